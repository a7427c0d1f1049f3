"""What validation inside training costs the bare README command: the demo run with its default
validation (steps 350 and 700) and with `--eval_every_n_steps=0`, alternated, wall time of
each whole command.

    python3 -m bench.validation_cost --pairs=2 \
        --output_json=bench/results/validation-cost-cpu-2core.json

Run by hand from the repository root on an otherwise idle machine (not under Bazel: it runs
`bin/bazel run` itself, after one build so that no run pays for it). Prints and writes the
median of each and their ratio.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time

from bench import train_command

MODES = {"with_validation": [], "without_validation": ["--eval_every_n_steps=0"]}


def run_once(train_dir, extra):
    """Wall seconds of one bare-command run into `train_dir`; exits on a failed run."""
    return train_command.run([f"--train_dir={train_dir}", *extra])[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="runs of each mode, alternated")
    parser.add_argument("--output_json", default="", help="also write the results here")
    args = parser.parse_args()
    train_command.build()
    scratch = tempfile.mkdtemp(prefix="validation_cost_")
    seconds = {mode: [] for mode in MODES}
    try:
        for index in range(args.pairs):
            for mode, extra in MODES.items():
                seconds[mode].append(run_once(os.path.join(scratch, f"{mode}_{index}"), extra))
                print(f"{mode} run {index + 1}: {seconds[mode][-1]:.1f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {mode: statistics.median(values) for mode, values in seconds.items()}
    ratio = medians["with_validation"] / medians["without_validation"]
    print(f"median with validation {medians['with_validation']:.1f} s, without "
          f"{medians['without_validation']:.1f} s: x{ratio:.3f}")
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as handle:
            json.dump({"seconds": seconds, "medians": medians, "ratio": ratio,
                       "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                       "date": time.strftime("%Y-%m-%d")}, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
