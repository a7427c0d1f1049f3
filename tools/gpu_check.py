"""`python3 -m tools.gpu_check --out=DIR`: every GPU question in one short run, one report.

Run from the repository root on a machine with a GPU, in this project's environment (the one
`bin/bazel` makes, or tools/gpu_offline's on a GPU machine without network access):

1. Beside each other, nothing timed: the GPU tests (tests/topics/gpu_test.py), and the demo trained
   and then evaluated in each precision (fp32, bf16, fp16) on one GPU.
2. Then alone: the throughput benchmark (bench/throughput.py), with a deadline that keeps the
   whole check within --budget_secs (measurements it cannot start in time are named in the
   report's `not_measured`).

Writes DIR/gpu-<gpu>.json (the benchmark's report plus `gpu_tests` {passed, failed, skipped},
`demo_precision_at_1` {fp32, bf16, fp16} and the time each part took), the benchmark's plot,
and DIR/gpu_check.log with every part's output; one step's trace lands in DIR too. Few files
on purpose: some GPU machines hand back only a handful.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from common import files
from common import machine

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "gpu_check_out", "Directory for the report, plot, trace and log.")
flags.DEFINE_float("budget_secs", 480, "Wall time the whole check may take.")
flags.DEFINE_list("precisions", ["fp32", "bf16", "fp16"], "Precisions of the demo trainings.")
flags.DEFINE_string("demo_flags", "", "Extra flags for the demo trainings (tests shrink them).")
flags.DEFINE_string("bench_flags", "--batch_size=256 --warmup=3 --steps=5 --repeats=3 "
                    "--keep_going", "Flags for bench.throughput (the deadline, the report "
                    "path and the trace directory are added).")
flags.DEFINE_string("test_module", "tests.topics.gpu_test", "The GPU tests' module.")
flags.DEFINE_string("report_name", "", "Report file name (default: gpu-<first GPU>.json).")

BENCH_RESERVE_SECS = 20  # writing the report after the benchmark's last measurement


def log(message):
    """Progress on stdout, stamped with the seconds since the check began."""
    print(f"[{time.monotonic() - STARTED:5.0f}s] {message}", flush=True)


STARTED = time.monotonic()


class Part:
    """One command of the check in its own process, its output kept for the log."""

    def __init__(self, name, command, env=None):
        self.name, self.command = name, command
        self.output = tempfile.TemporaryFile(mode="w+")  # pylint: disable=consider-using-with
        self.started = time.monotonic()
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            command, stdout=self.output, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))
        log(f"started {name}: {' '.join(command[2:])}")

    def finish(self, timeout):
        """Waits up to `timeout` seconds (then stops it); returns (exit status, output)."""
        try:
            status = self.process.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            status = "timed out"
        self.output.seek(0)
        text = self.output.read()
        self.seconds = time.monotonic() - self.started  # pylint: disable=attribute-defined-outside-init
        log(f"{self.name}: exit {status} after {self.seconds:.0f}s")
        return status, text


def python(*args):
    return [sys.executable, "-m", *args]


def test_counts(output):
    """{passed, failed, skipped} from unittest's summary lines ('Ran N tests', 'OK (...)' or
    'FAILED (...)'); None when the run printed no summary (it crashed or timed out)."""
    ran = re.search(r"^Ran (\d+) tests?", output, re.MULTILINE)
    verdict = re.search(r"^(OK|FAILED)(?: \((.*)\))?$", output, re.MULTILINE)
    if not ran or not verdict:
        return None
    counts = {key: int(value) for key, value in
              re.findall(r"(\w+)=(\d+)", verdict.group(2) or "")}
    failed = counts.get("failures", 0) + counts.get("errors", 0) + \
        counts.get("unexpected_successes", 0)
    skipped = counts.get("skipped", 0)
    return {"passed": int(ran.group(1)) - failed - skipped - counts.get("expected_failures", 0),
            "failed": failed, "skipped": skipped}


def precision_at_1(output):
    """The evaluation's precision@1, or None."""
    found = re.findall(r"precision @ 1 = ([0-9.]+)", output)
    return float(found[-1]) if found else None


def demo_command(precision, work_dir):
    """The shell-free command that trains the demo in `precision`, then evaluates it."""
    train_dir = os.path.join(work_dir, f"demo_{precision}")
    train = python("inception.train", f"--train_dir={train_dir}", f"--precision={precision}",
                   "--num_gpus=1", *FLAGS.demo_flags.split())
    evaluate = python("inception.eval", f"--checkpoint_dir={train_dir}", "--run_once")
    script = ("import subprocess, sys\n"
              f"code = subprocess.call({train!r})\n"
              f"sys.exit(code or subprocess.call({evaluate!r}))\n")
    return [sys.executable, "-c", script]


def report_name():
    """gpu-<first GPU's short name>.json, e.g. gpu-h200.json."""
    if FLAGS.report_name:
        return FLAGS.report_name
    gpus = machine.nvidia_gpus()
    if not gpus:
        return "gpu-unknown.json"
    short = gpus[0][0].lower().replace("nvidia", "").split()
    return "gpu-" + "-".join(re.sub(r"[^a-z0-9]", "", word) for word in short[:1]) + ".json"


class Log:
    """DIR/gpu_check.log, a section per part, written as each part ends (a check stopped from
    outside keeps what it had)."""

    def __init__(self, path):
        self.path = path
        with open(path, "w", encoding="utf-8"):
            pass

    def add(self, title, text):
        """Appends one part's output."""
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(f"===== {title} =====\n{text}\n")


def prepare_demo_data(check_log):
    """Generates the demo data set once, before three trainings want it at the same time."""
    if "--data_dir" in FLAGS.demo_flags:
        return
    part = Part("demo data", [sys.executable, "-c",
                              "from data import demo_data; demo_data.ensure_demo_data()"])
    check_log.add("demo data", part.finish(FLAGS.budget_secs / 4)[1])


def run_tests_and_demos(check_log, work_dir, timings):
    """Phase 1: the GPU tests and the demo trainings side by side; returns (test counts,
    {precision: precision@1})."""
    tests = Part("gpu tests", python("unittest", "-v", FLAGS.test_module))
    demos = {precision: Part(f"demo {precision}", demo_command(precision, work_dir))
             for precision in FLAGS.precisions}
    limit = FLAGS.budget_secs * 0.45
    _, test_output = tests.finish(limit - (time.monotonic() - STARTED))
    check_log.add("gpu tests", test_output)
    timings["gpu_tests_secs"] = tests.seconds
    demo_precision = {}
    for precision, part in demos.items():
        status, text = part.finish(limit - (time.monotonic() - STARTED))
        check_log.add(f"demo {precision}", text)
        timings[f"demo_{precision}_secs"] = part.seconds
        demo_precision[precision] = precision_at_1(text) if status == 0 else None
    return test_counts(test_output), demo_precision


def run_benchmark(check_log, out, report_path, work_dir, timings):
    """Phase 2: the benchmark alone, within what is left of the budget; returns its report
    (empty if it wrote none) and its exit status."""
    bench_json = os.path.join(work_dir, "bench.json")
    deadline = FLAGS.budget_secs - (time.monotonic() - STARTED) - BENCH_RESERVE_SECS
    bench = Part("benchmark", python(
        "bench.throughput", f"--output_json={bench_json}",
        f"--output_plot={os.path.splitext(report_path)[0]}.png", f"--profile_dir={out}",
        f"--deadline_secs={max(deadline, 1):.0f}", *FLAGS.bench_flags.split()))
    status, text = bench.finish(FLAGS.budget_secs - (time.monotonic() - STARTED) + 300)
    check_log.add("benchmark", text)
    timings["benchmark_secs"] = bench.seconds
    if not os.path.exists(bench_json):
        return {}, status
    with open(bench_json, encoding="utf-8") as handle:
        return json.load(handle), status


def main(argv):
    del argv
    out = os.path.abspath(FLAGS.out)
    os.makedirs(out, exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix="gpu_check_")
    check_log = Log(os.path.join(out, "gpu_check.log"))
    timings = {}
    prepare_demo_data(check_log)
    gpu_tests, demo_precision = run_tests_and_demos(check_log, work_dir, timings)
    report_path = os.path.join(out, report_name())
    report, status = run_benchmark(check_log, out, report_path, work_dir, timings)
    report["gpu_tests"] = gpu_tests
    report["demo_precision_at_1"] = demo_precision
    timings["total_secs"] = time.monotonic() - STARTED
    report["check"] = {"timings": timings, "budget_secs": FLAGS.budget_secs,
                       "bench_flags": FLAGS.bench_flags, "demo_flags": FLAGS.demo_flags,
                       "benchmark_exit": status}
    report["complete"] = bool(report.get("complete")) and gpu_tests is not None and all(
        value is not None for value in demo_precision.values())
    files.write_text_atomically(report_path, json.dumps(report, indent=2))
    log(f"gpu tests: {gpu_tests}; demo precision@1: {demo_precision}")
    log(f"report: {report_path} (complete: {report['complete']}); log: {check_log.path}")


if __name__ == "__main__":
    app.run(main)
