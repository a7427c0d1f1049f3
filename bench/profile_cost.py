"""What --profile_steps costs: the demo run with a traced window near its end and without one,
alternated; the median sec/batch of the log intervals before the window (where a trace must
cost nothing) and of the window's own interval.

    python3 -m bench.profile_cost --pairs=2 --output_json=bench/results/profile-cost-cpu-2core.json

Run by hand from the repository root on an otherwise idle machine (not under Bazel: it runs
`bin/bazel run //inception:train` itself, after one build so that no run pays for it).
"""

import argparse
import os
import re
import shutil
import statistics
import tempfile

from bench import report as bench_report
from bench import train_command
from common import machine

STEPS = 200
WINDOW = (191, 200)  # one whole log interval of 10 steps
LINE = re.compile(r": step (\d+), loss = \S+ \(\S+ examples/sec; ([\d.]+) sec/batch[;)]")


def sec_per_batch(train_dir, extra):
    """{step of each loss line: sec/batch of the interval it closes} of one run."""
    output, _ = train_command.run([f"--train_dir={train_dir}", f"--max_steps={STEPS}",
                                   "--eval_every_n_steps=0", "--seed=1", *extra])
    return {int(step): float(seconds) for step, seconds in LINE.findall(output)}


def summarize(intervals):
    """(median sec/batch of the intervals from step 20 to the window, the window's)."""
    before = [seconds for step, seconds in intervals.items() if 20 <= step < WINDOW[0]]
    return statistics.median(before), intervals[WINDOW[1]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2, help="runs of each mode, alternated")
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    train_command.build()
    modes = {"traced": [f"--profile_steps={WINDOW[0]},{WINDOW[1]}"], "untraced": []}
    runs = {mode: [] for mode in modes}
    scratch = tempfile.mkdtemp(prefix="profile_cost_")
    try:
        for index in range(args.pairs):
            for mode, extra in modes.items():
                before, window = summarize(sec_per_batch(
                    os.path.join(scratch, f"{mode}_{index}"), extra))
                runs[mode].append({"before_window": before, "window": window})
                print(f"{mode} run {index + 1}: {before:.3f} s/batch before steps "
                      f"{WINDOW[0]}-{WINDOW[1]}, {window:.3f} in them", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {mode: {part: statistics.median(run[part] for run in values)
                      for part in ("before_window", "window")} for mode, values in runs.items()}
    ratios = {part: medians["traced"][part] / medians["untraced"][part]
              for part in ("before_window", "window")}
    print(f"traced / untraced sec/batch: before the window x{ratios['before_window']:.3f}, "
          f"in it x{ratios['window']:.3f}")
    if args.output_json:
        bench_report.write_json({"steps": STEPS, "window": WINDOW, "runs": runs,
                                 "medians": medians, "ratios": ratios,
                                 "machine": machine.cpu_summary()}, args.output_json)


if __name__ == "__main__":
    main()
