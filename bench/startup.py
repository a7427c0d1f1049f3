"""Seconds to the first step, and where they go: the demo, a tiny run on a folder of images, a
2-worker all-reduce cluster on 127.0.0.1 and the same cluster restarted after a preemption.
Each start is a process of the real entry point (`python -m inception.train`); what is timed is
the wall clock from starting the process to its first step line (a cluster: its slowest task),
and the parts its start-up line names (loop/first_step.py), medians over the repeats.

    python3 -m bench.startup --output_json=bench/results/startup-cpu-2core.json \\
        [--baseline_tree=/path/to/an/older/checkout]

Run by hand from the repository root with the project's environment (`bin/bazel` makes it;
its python is ~/.cache/inception/venv-cpu-*/bin/python). With --baseline_tree, every start runs
from that tree too, the two taking turns so that a slow spell of a shared machine falls on both
(a tree from before the start-up line has only the wall clock). Each process is stopped once it
logged its first step: what follows is training, timed elsewhere (bench/throughput.py).
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

from common import machine
from common.loopback import free_ports
from data import demo_data

THIS_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIRST_STEP = re.compile(r": step \d+, loss = ")
STARTUP_LINE = re.compile(r"^start-up: ([\d.]+) s to the end of the first step \((.*)\)$")
PART = re.compile(r"(.+?) ([\d.]+) s$")
# The quick-look network (docs/own-images.md): what a first try on one's own images runs.
QUICK = ("--image_size=107", "--depth_multiplier=0.1", "--batch_size=4")
EVERY_STEP = "--log_every_n_steps=1"  # the first step's line comes at step 1
CLUSTER_FLAGS = ("--dataset=demo", *QUICK, "--num_gpus=1", "--eval_every_n_steps=0",
                 EVERY_STEP, "--save_checkpoint_steps=100", "--seed=1")
RESTART_EXIT_CODE = 138
TASK_TIMEOUT_SECS = 600


class Task:
    """One process of the entry point from `tree`, its output read line by line with the
    seconds since its start."""

    def __init__(self, tree, args, extra_env=None):
        env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="2",
                   CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                   **(extra_env or {}))
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "inception.train", *args], cwd=tree, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.lines = []

    def wait_for(self, pattern):
        """Seconds from the start to the first line matching `pattern` (read on until then)."""
        deadline = self.started + TASK_TIMEOUT_SECS
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if pattern.search(line):
                return time.monotonic() - self.started
            if time.monotonic() > deadline:
                break
        sys.exit("error: a start never reached its first step; its output:\n"
                 + "\n".join(self.lines[-40:]))

    def startup_parts(self):
        """{part: seconds} of the start-up line (read on to it), or {} when the tree has
        none (it comes right after the first step line)."""
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            match = STARTUP_LINE.match(line.strip())
            if match:
                return {PART.match(part).group(1): float(PART.match(part).group(2))
                        for part in match.group(2).split(", ")}
            if FIRST_STEP.search(line):  # a second step line: this tree logs no start-up line
                return {}
        return {}

    def exit_status(self):
        """Waits for the task to end by itself (reading its output on); its exit status."""
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
        return self.process.wait(timeout=TASK_TIMEOUT_SECS)

    def stop(self):
        """Kills the task's process group if it still runs."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=TASK_TIMEOUT_SECS)


def time_starts(tasks):
    """(seconds to the slowest task's first step, {part: seconds} of that task's line)."""
    timed = [(task.wait_for(FIRST_STEP), task) for task in tasks]
    seconds, slowest = max(timed, key=lambda pair: pair[0])
    parts = slowest.startup_parts()
    return seconds, parts


def demo(tree, work):
    """The bare first command's run (its demo data made beforehand), to its first step."""
    task = Task(tree, [f"--train_dir={os.path.join(work, 'demo')}", EVERY_STEP])
    try:
        return time_starts([task])
    finally:
        task.stop()


def own_images(tree, work, folder, train_dir):
    """A try on a folder of images with the quick-look settings into `train_dir`, its shards
    cached under `work` (built by the first start, found by the next)."""
    task = Task(tree, [f"--data_dir={folder}", f"--train_dir={os.path.join(work, train_dir)}",
                       *QUICK, "--validation_fraction=0.25", EVERY_STEP],
                {"INCEPTION_CACHE_DIR": os.path.join(work, "cache")})
    try:
        return time_starts([task])
    finally:
        task.stop()


def cluster_tasks(tree, train_dir, data_dir, hosts):
    """The two workers of an all-reduce cluster at `hosts`, started."""
    cluster = [f"--worker_hosts={','.join(hosts)}"]
    return [Task(tree, ["--job_name=worker", f"--task_id={index}", *cluster, *CLUSTER_FLAGS,
                        f"--data_dir={data_dir}", f"--train_dir={train_dir}",
                        "--max_steps=100000"])
            for index in range(2)]


def cluster_and_restart(tree, work, data_dir):
    """((seconds, parts) of a fresh 2-worker cluster, (seconds, parts) of the same restarted
    after worker 1 got SIGTERM at its third step)."""
    train_dir = os.path.join(work, "cluster")
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    tasks = cluster_tasks(tree, train_dir, data_dir, hosts)
    try:
        fresh = time_starts(tasks)
        tasks[1].wait_for(re.compile(r": step 3, loss = "))
        tasks[1].process.send_signal(signal.SIGTERM)
        codes = [task.exit_status() for task in tasks]
    finally:
        for task in tasks:
            task.stop()
    if codes != [RESTART_EXIT_CODE] * 2:
        sys.exit(f"error: the preempted cluster exited {codes}, not {RESTART_EXIT_CODE}:\n"
                 + "\n".join(tasks[0].lines[-30:]))
    tasks = cluster_tasks(tree, train_dir, data_dir, hosts)
    try:
        return fresh, time_starts(tasks)
    finally:
        for task in tasks:
            task.stop()


def image_folder(root, classes=3, per_class=20, size=160):
    """`root/<class>/<i>.jpg`: noise JPEGs, different per class in their mean colour."""
    rng = np.random.default_rng(0)
    for index in range(classes):
        os.makedirs(os.path.join(root, f"class_{index}"), exist_ok=True)
        for image in range(per_class):
            pixels = rng.normal(60 + 60 * index, 40, (size, size, 3)).clip(0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(
                os.path.join(root, f"class_{index}", f"{image}.jpg"))
    return root


def one_round(trees, data_dir, folder):
    """{configuration: {tree name: (seconds, parts)}} of one start of each, trees in turn."""
    measured = {}
    for name, tree in trees.items():
        with tempfile.TemporaryDirectory(prefix="startup_") as work:
            measured.setdefault("demo", {})[name] = demo(tree, work)
            measured.setdefault("own images, shards built", {})[name] = own_images(
                tree, work, folder, "first")
            measured.setdefault("own images, shards cached", {})[name] = own_images(
                tree, work, folder, "second")
            fresh, restarted = cluster_and_restart(tree, work, data_dir)
            measured.setdefault("2-worker cluster", {})[name] = fresh
            measured.setdefault("2-worker cluster restarted", {})[name] = restarted
    return measured


def summarize(rounds):
    """{configuration: {tree: {median_first_step_secs, first_step_secs, median_parts}}}."""
    summary = {}
    for configuration in rounds[0]:
        for tree in rounds[0][configuration]:
            runs = [measured[configuration][tree] for measured in rounds]
            parts = {}
            for _, run_parts in runs:
                for part, seconds in run_parts.items():
                    parts.setdefault(part, []).append(seconds)
            summary.setdefault(configuration, {})[tree] = {
                "median_first_step_secs": round(statistics.median(s for s, _ in runs), 1),
                "first_step_secs": [round(s, 1) for s, _ in runs],
                "median_parts_secs": {part: round(statistics.median(values), 1)
                                      for part, values in parts.items()}}
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline_tree", default="",
                        help="another checkout to time side by side (e.g. before a change)")
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    trees = {"this tree": THIS_TREE}
    if args.baseline_tree:
        trees = {"baseline": os.path.abspath(args.baseline_tree), "this tree": THIS_TREE}
    data_dir = demo_data.ensure_demo_data()
    with tempfile.TemporaryDirectory(prefix="startup_images_") as images:
        folder = image_folder(images)
        rounds = []
        for number in range(args.repeats):
            rounds.append(one_round(trees, data_dir, folder))
            print(f"round {number + 1}/{args.repeats}: " + "; ".join(
                f"{configuration}: " + ", ".join(f"{tree} {seconds:.1f} s"
                                                  for tree, (seconds, _) in by_tree.items())
                for configuration, by_tree in rounds[-1].items()), flush=True)
    summary = summarize(rounds)
    for configuration, by_tree in summary.items():
        for tree, values in by_tree.items():
            parts = ", ".join(f"{part} {secs} s"
                              for part, secs in values["median_parts_secs"].items())
            print(f"{configuration} ({tree}): first step after {values['median_first_step_secs']}"
                  f" s" + (f" ({parts})" if parts else ""))
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as handle:
            json.dump({"configurations": summary, "repeats": args.repeats,
                       "trees": {name: os.path.basename(path) for name, path in trees.items()},
                       "machine": f"{os.uname().machine} {machine.cpu_summary()}",
                       "date": time.strftime("%Y-%m-%d")}, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
