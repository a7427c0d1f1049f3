"""What --sync_batch_norm costs a step on virtual CPU towers: the training step of Inception v3
with tf-slim's batch norm on each tower's slice and with the statistics synchronized over all
towers (model/synced_batch_norm.py), side by side. Seconds per step (median) of each, and
their ratio.

    python3 -m bench.sync_batch_norm --output_json=bench/results/sync-batch-norm-cpu-2core.json

Run by hand from the repository root with the project's environment (`bin/bazel` makes it;
its python is ~/.cache/inception/venv-cpu-*/bin/python). Each configuration runs in its own
process, and they take turns round after round, so that a slow spell of a shared machine falls
on both. Its accuracy effect is measured with bench/recipe_options.py (README, Training).
"""

import argparse
import json
import platform
import statistics
import sys
import time

from bench import step_timing
from common import machine

CONFIGURATIONS = ("per_tower", "synchronized")


def step_times(configuration, towers, batch, image_size, depth_multiplier, steps,
               device_kind="cpu"):
    """Seconds of each of `steps` timed training steps of `configuration` on `towers` towers
    (virtual CPU devices, or GPUs for `device_kind` "gpu"; in this process), after two untimed
    ones."""
    from inception.model import synced_batch_norm  # pylint: disable=import-outside-toplevel

    groups = (synced_batch_norm.BatchNormGroups(group_size=towers, towers_per_worker=towers)
              if configuration == "synchronized" else None)
    return step_timing.step_times([f"/{device_kind}:{index}" for index in range(towers)],
                                  batch, image_size, depth_multiplier, steps,
                                  batch_norm_groups=groups)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--towers", type=int, default=4)
    parser.add_argument("--device_kind", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--batch", type=int, default=16, help="global batch (all towers)")
    parser.add_argument("--image_size", type=int, default=96)
    parser.add_argument("--depth_multiplier", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output_json", default="")
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    sizes = (args.towers, args.batch, args.image_size, args.depth_multiplier, args.steps,
             args.device_kind)
    if args.only:
        step_timing.report(step_times(args.only, *sizes))
        return

    def measure(name):
        return step_timing.run_child("bench.sync_batch_norm", sys.argv[1:], name,
                                     hide_gpus=args.device_kind == "cpu"), ""
    times = step_timing.take_turns(CONFIGURATIONS, measure, args.rounds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["synchronized"] / medians["per_tower"]
    print(f"per tower {medians['per_tower']:.3f} s/step, synchronized "
          f"{medians['synchronized']:.3f} s/step ({ratio:.2f}x)")
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as handle:
            json.dump({"median_seconds_per_step": medians, "ratio_synchronized": ratio,
                       "steps_per_configuration": len(times["per_tower"]),
                       "towers": args.towers, "batch": args.batch,
                       "image_size": args.image_size, "depth_multiplier": args.depth_multiplier,
                       "machine": f"{platform.machine()} {machine.cpu_summary()}",
                       "date": time.strftime("%Y-%m-%d")}, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
