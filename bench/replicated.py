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
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

from common import machine

PARAMETER_SERVER = "parameter_server"
BUFFER_COUNTS = (0, 1, 2, 4, 8)


def configurations():
    """Every configuration's name: parameter_server, then replicated with each buffer count
    (0: one collective per gradient)."""
    return [PARAMETER_SERVER] + [f"replicated_{count}_buffers" for count in BUFFER_COUNTS]


def step_times(configuration, batch, image_size, depth_multiplier, steps):
    """Seconds of each of `steps` timed training steps of `configuration` (in this process),
    after two untimed ones."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from inception.config import recipe  # pylint: disable=import-outside-toplevel
    from inception.config import settings  # pylint: disable=import-outside-toplevel
    from inception.inputs import pipeline  # pylint: disable=import-outside-toplevel
    from inception.model import network  # pylint: disable=import-outside-toplevel
    from inception.parallel import all_reduce  # pylint: disable=import-outside-toplevel
    from inception.parallel import step_graph  # pylint: disable=import-outside-toplevel

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    spec = None
    if configuration != PARAMETER_SERVER:
        spec = all_reduce.AllReduceSpec(all_reduce.RING, int(configuration.split("_")[1]))
    model = settings.ModelSettings(num_classes=11, image_size=image_size,
                                   depth_multiplier=depth_multiplier, dataset="synthetic")
    optimization = settings.with_defaults(settings.OptimizationSettings(optimizer="rmsprop"),
                                          recipe.OWN_DATA_DEFAULTS)
    images = tf.random.uniform([batch, image_size, image_size, 3], -1.0, 1.0, seed=1)
    labels = tf.random.uniform([batch], 0, 11, tf.int32, seed=2)
    built = step_graph.build_train_graph(
        pipeline.InputBatch(images, labels, tf.constant(0, tf.int64), tf.no_op()),
        lambda decay: network.make_model_fn(model, decay), optimization, ["/cpu:0", "/cpu:1"],
        10_000, all_reduce=spec)
    config = tf1.ConfigProto()
    config.device_count["CPU"] = 2
    times = []
    with tf1.Session(config=config) as session:
        session.run(tf1.global_variables_initializer())
        if built.copy_to_replicas is not None:
            session.run(built.copy_to_replicas)
        for step in range(steps + 2):
            start = time.perf_counter()
            session.run(built.stages[0].train_op)
            if step >= 2:
                times.append(time.perf_counter() - start)
    return times


def run_child(configuration, argv):
    """(step times, peak MiB) of `configuration` measured in a fresh process."""
    done = subprocess.run([sys.executable, __file__, *argv, f"--only={configuration}"],
                          capture_output=True, text=True, check=True,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.getcwd()))
    result = json.loads(done.stdout.split("RESULT")[-1])
    return result["times"], result["peak_mib"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="global batch (both towers)")
    parser.add_argument("--image_size", type=int, default=150)
    parser.add_argument("--depth_multiplier", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output_json", default="")
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    sizes = (args.batch, args.image_size, args.depth_multiplier, args.steps)
    if args.only:
        times = step_times(args.only, *sizes)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print("RESULT" + json.dumps({"times": times, "peak_mib": peak}))
        return
    times = {name: [] for name in configurations()}
    peaks = {name: 0.0 for name in configurations()}
    for round_number in range(args.rounds):
        for name in configurations():
            measured, peak = run_child(name, sys.argv[1:])
            times[name].extend(measured)
            peaks[name] = max(peaks[name], peak)
            print(f"round {round_number + 1}/{args.rounds} {name}: median "
                  f"{statistics.median(measured):.3f} s/step, peak {peak:.0f} MiB", flush=True)
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
