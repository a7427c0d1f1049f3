"""What --accumulate_steps costs in memory: the peak resident memory of training steps of
Inception v3 on one CPU tower, for a global batch B, for K micro-batches of B (one at a time, as
training builds them, and all at once, without the ordering), and for one batch of K x B.

    python3 bench/accumulation_memory.py --batch=32 --micro_batches=4 \
        --output_json=bench/results/accumulation-memory-cpu-2core.json

Run by hand from the repository root with the project's environment (`bin/bazel` makes it;
its python is ~/.cache/inception/venv-cpu-*/bin/python). Each configuration runs in its own
process, so each peak (ru_maxrss) is that configuration's alone.
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

CONFIGURATIONS = ("one_batch", "micro_batches_in_order", "micro_batches_unordered",
                  "one_large_batch")


def measure(configuration, batch, micro_batches, image_size, depth_multiplier, steps):
    """Peak resident MiB of `steps` training steps of `configuration` (run in this process)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from inception.config import recipe  # pylint: disable=import-outside-toplevel
    from inception.config import settings  # pylint: disable=import-outside-toplevel
    from inception.inputs import pipeline  # pylint: disable=import-outside-toplevel
    from inception.model import network  # pylint: disable=import-outside-toplevel
    from inception.step import micro_batches as micro  # pylint: disable=import-outside-toplevel
    from inception.parallel import sharing  # pylint: disable=import-outside-toplevel
    from inception.step import step_graph  # pylint: disable=import-outside-toplevel

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    accumulate = 1 if configuration in ("one_batch", "one_large_batch") else micro_batches
    rows = batch * (micro_batches if configuration == "one_large_batch" else 1) * accumulate
    if configuration == "micro_batches_unordered":
        micro.one_micro_batch_at_a_time = lambda *args: None
    model = settings.ModelSettings(num_classes=11, image_size=image_size,
                                   depth_multiplier=depth_multiplier, dataset="synthetic")
    optimization = settings.with_defaults(
        settings.OptimizationSettings(optimizer="sgd", accumulate_steps=accumulate),
        recipe.OWN_DATA_DEFAULTS)
    images = tf.random.uniform([rows, image_size, image_size, 3], -1.0, 1.0, seed=1)
    labels = tf.random.uniform([rows], 0, 11, tf.int32, seed=2)
    built = step_graph.build_train_graph(
        pipeline.InputBatch(images, labels, tf.constant(0, tf.int64), tf.no_op()),
        lambda decay: network.make_model_fn(model, decay), optimization,
        sharing.OneDevice(["/cpu:0"]), 10_000)
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        for _ in range(steps):
            session.run(built.stages[0].train_op)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--micro_batches", type=int, default=4)
    parser.add_argument("--image_size", type=int, default=128)
    parser.add_argument("--depth_multiplier", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--output_json", default="")
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    sizes = (args.batch, args.micro_batches, args.image_size, args.depth_multiplier, args.steps)
    if args.only:
        print(f"PEAK_MIB {measure(args.only, *sizes):.1f}")
        return
    peaks = {}
    for configuration in CONFIGURATIONS:
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], f"--only={configuration}"],
                              capture_output=True, text=True, check=True,
                              env=dict(os.environ, CUDA_VISIBLE_DEVICES="",
                                       PYTHONPATH=os.getcwd()))
        peaks[configuration] = float(done.stdout.split("PEAK_MIB")[-1])
        print(f"{configuration}: peak {peaks[configuration]:.0f} MiB", flush=True)
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as handle:
            json.dump({"peak_mib": peaks, "batch": args.batch,
                       "micro_batches": args.micro_batches, "image_size": args.image_size,
                       "depth_multiplier": args.depth_multiplier,
                       "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                       "date": time.strftime("%Y-%m-%d")}, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
