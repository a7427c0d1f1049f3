"""What --deterministic costs on this machine: the demo's training with --seed, with and without
TensorFlow's op determinism, side by side. Seconds per step (median over the logged steps after
the warm-up) of each configuration, and whether its two runs wrote the same checkpoint.

    python3 -m bench.determinism --output_json=bench/results/determinism-cpu-2core.json

Run by hand from the repository root with the project's environment (`bin/bazel` makes it;
its python is ~/.cache/inception/venv-cpu-*/bin/python). Each run is a process of the real
entry point (`python -m inception.train`); the configurations take turns, round after round,
so that a slow spell of a shared machine falls on both.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from bench import report as bench_report
from common import machine

CONFIGURATIONS = {"seed": ["--seed=5"], "seed + deterministic": ["--seed=5", "--deterministic"]}
WARM_UP_STEPS = 3  # the first steps build and tune kernels: not timed
STEP_LINE = re.compile(r": step (\d+), loss = [\d.na]+ \([\d.]+ examples/sec; ([\d.]+) sec/batch")


def run_once(train_dir, steps, flags):
    """Seconds per logged step after the warm-up, of one training run into `train_dir`."""
    done = subprocess.run(
        [sys.executable, "-m", "inception.train", f"--train_dir={train_dir}",
         f"--max_steps={steps}", "--log_every_n_steps=1", "--eval_every_n_steps=0",
         f"--save_checkpoint_steps={steps}", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"error: the run into {train_dir} failed:\n{done.stdout[-3000:]}")
    return [float(seconds) for step, seconds in STEP_LINE.findall(done.stdout)
            if int(step) > WARM_UP_STEPS]


def same_checkpoints(first, second):
    """Whether the newest checkpoints of two run directories hold equal tensors, bit for bit."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    readers = [tf.train.load_checkpoint(tf.train.latest_checkpoint(path))
               for path in (first, second)]
    names = readers[0].get_variable_to_shape_map()
    return all(np.array_equal(readers[0].get_tensor(name), readers[1].get_tensor(name))
               for name in names)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2: each configuration's two runs are compared")
    scratch = tempfile.mkdtemp(prefix="determinism_bench_")
    seconds = {name: [] for name in CONFIGURATIONS}
    for round_number in range(args.rounds):
        for name, flags in CONFIGURATIONS.items():
            train_dir = os.path.join(scratch, f"{name.replace(' + ', '_')}-{round_number}")
            seconds[name] += run_once(train_dir, args.steps, flags)
            print(f"round {round_number + 1}, {name}: median "
                  f"{statistics.median(seconds[name]):.3f} s/step so far", flush=True)
    results = {name: {
        "median_seconds_per_step": round(statistics.median(values), 4),
        "steps_timed": len(values),
        "repeated_bit_for_bit": same_checkpoints(
            *(os.path.join(scratch, f"{name.replace(' + ', '_')}-{r}") for r in (0, 1))),
    } for name, values in seconds.items()}
    ratio = (results["seed + deterministic"]["median_seconds_per_step"]
             / results["seed"]["median_seconds_per_step"])
    report = {"machine": machine.cpu_summary(), "steps": args.steps, "rounds": args.rounds,
              "data": "demo defaults (2 towers, 128 px, x0.25, batch 32)", "runs": results,
              "deterministic_over_seed": round(ratio, 3)}
    print(json.dumps(report, indent=2))
    if args.output_json:
        bench_report.write_json(report, args.output_json)


if __name__ == "__main__":
    main()
