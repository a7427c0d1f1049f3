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
import os
import platform
import statistics
import subprocess
import sys
import time

from common import machine

CONFIGURATIONS = ("per_tower", "synchronized")


def step_times(configuration, towers, batch, image_size, depth_multiplier, steps,
               device_kind="cpu"):
    """Seconds of each of `steps` timed training steps of `configuration` on `towers` towers
    (virtual CPU devices, or GPUs for `device_kind` "gpu"; in this process), after two untimed
    ones."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from inception.config import recipe  # pylint: disable=import-outside-toplevel
    from inception.config import settings  # pylint: disable=import-outside-toplevel
    from inception.inputs import pipeline  # pylint: disable=import-outside-toplevel
    from inception.model import network  # pylint: disable=import-outside-toplevel
    from inception.model import synced_batch_norm  # pylint: disable=import-outside-toplevel
    from inception.parallel import step_graph  # pylint: disable=import-outside-toplevel

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    groups = (synced_batch_norm.BatchNormGroups(group_size=towers, towers_per_worker=towers)
              if configuration == "synchronized" else None)
    model = settings.ModelSettings(num_classes=10, image_size=image_size,
                                   depth_multiplier=depth_multiplier, dataset="synthetic")
    optimization = settings.with_defaults(settings.OptimizationSettings(optimizer="rmsprop"),
                                          recipe.OWN_DATA_DEFAULTS)
    images = tf.random.uniform([batch, image_size, image_size, 3], -1.0, 1.0, seed=1)
    labels = tf.random.uniform([batch], 0, 10, tf.int32, seed=2)
    built = step_graph.build_train_graph(
        pipeline.InputBatch(images, labels, tf.constant(0, tf.int64), tf.no_op()),
        lambda decay: network.make_model_fn(model, decay, batch_norm_groups=groups),
        optimization, [f"/{device_kind}:{index}" for index in range(towers)], 10_000)
    config = tf1.ConfigProto()
    config.device_count["CPU"] = towers if device_kind == "cpu" else 1
    times = []
    with tf1.Session(config=config) as session:
        session.run(tf1.global_variables_initializer())
        for step in range(steps + 2):
            start = time.perf_counter()
            session.run(built.stages[0].train_op)
            if step >= 2:
                times.append(time.perf_counter() - start)
    return times


def run_child(configuration, argv):
    """The step times of `configuration` measured in a fresh process."""
    done = subprocess.run([sys.executable, "-m", "bench.sync_batch_norm", *argv,
                           f"--only={configuration}"], capture_output=True, text=True,
                          check=True, env=dict(os.environ, PYTHONPATH=os.getcwd(), **(
                              {} if "--device_kind=gpu" in argv else {"CUDA_VISIBLE_DEVICES": ""})))
    return json.loads(done.stdout.split("RESULT")[-1])


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
        print("RESULT" + json.dumps(step_times(args.only, *sizes)))
        return
    times = {name: [] for name in CONFIGURATIONS}
    for round_number in range(args.rounds):
        for name in CONFIGURATIONS:
            measured = run_child(name, sys.argv[1:])
            times[name].extend(measured)
            print(f"round {round_number + 1}/{args.rounds} {name}: median "
                  f"{statistics.median(measured):.3f} s/step", flush=True)
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
