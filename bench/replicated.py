"""--variable_update on 2 virtual CPU towers, side by side: the training step of Inception v3
with the variables on the CPU (parameter_server) and with a copy per tower and an all-reduce
over the collective ring (replicated), for several gradient buffer counts. Seconds per step
(median) and peak resident memory of each.

    python3 -m bench.replicated --output_json=bench/results/replicated-cpu-2core.json

Run by hand from the repository root with the project's environment (`bin/bazel` makes it;
its python is ~/.cache/inception/venv-cpu-*/bin/python). Each configuration runs in its own
process (so each peak, ru_maxrss, is its own), and the configurations take turns, round after
round, so that a slow spell of a shared machine falls on all of them.
"""

import argparse
import json
import platform
import resource
import statistics
import sys
import time

from bench import step_timing
from common import machine

PARAMETER_SERVER = "parameter_server"
BUFFER_COUNTS = (0, 1, 2, 4, 8)


def configurations():
    """Every configuration's name: parameter_server, then replicated with each buffer count
    (0: one collective per gradient)."""
    return [PARAMETER_SERVER] + [f"replicated_{count}_buffers" for count in BUFFER_COUNTS]


def step_times(configuration, batch, image_size, depth_multiplier, steps):
    """Seconds of each of `steps` timed training steps of `configuration` on 2 virtual CPU
    towers (in this process), after two untimed ones."""
    from inception.parallel import all_reduce  # pylint: disable=import-outside-toplevel

    spec = None
    if configuration != PARAMETER_SERVER:
        spec = all_reduce.AllReduceSpec(all_reduce.RING, int(configuration.split("_")[1]))
    return step_timing.step_times(["/cpu:0", "/cpu:1"], batch, image_size, depth_multiplier,
                                  steps, all_reduce=spec, num_classes=11)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="global batch (both towers)")
    parser.add_argument("--image_size", type=int, default=150)
    parser.add_argument("--depth_multiplier", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output_json", default="")
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    sizes = (args.batch, args.image_size, args.depth_multiplier, args.steps)
    if args.only:
        times = step_times(args.only, *sizes)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        step_timing.report({"times": times, "peak_mib": peak})
        return
    peaks = {name: 0.0 for name in configurations()}

    def measure(name):
        result = step_timing.run_child("bench.replicated", sys.argv[1:], name)
        peaks[name] = max(peaks[name], result["peak_mib"])
        return result["times"], f", peak {result['peak_mib']:.0f} MiB"
    times = step_timing.take_turns(configurations(), measure, args.rounds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    reference = medians[PARAMETER_SERVER]
    for name in configurations():
        print(f"{name}: {medians[name]:.3f} s/step ({medians[name] / reference:.2f}x "
              f"parameter_server), peak {peaks[name]:.0f} MiB")
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as handle:
            json.dump({"median_seconds_per_step": medians,
                       "ratio_to_parameter_server": {name: value / reference
                                                     for name, value in medians.items()},
                       "peak_mib": peaks, "steps_per_configuration": len(times[PARAMETER_SERVER]),
                       "towers": 2, "batch": args.batch, "image_size": args.image_size,
                       "depth_multiplier": args.depth_multiplier,
                       "machine": f"{platform.machine()} {machine.cpu_summary()}",
                       "date": time.strftime("%Y-%m-%d")}, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
