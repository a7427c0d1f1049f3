"""Chaos: clusters whose tasks each run on a host of their own (a lab of network namespaces,
tests/lab.py) and meet a fault at random steps, started again by a supervisor
(bench/supervisor.py) each time, against the same cluster never interrupted.

    sudo python3 -m bench.chaos --output_json=bench/results/chaos-cpu-2core.json

For each configuration (2 and 4 workers, all-reduce and parameter server) it trains a seeded,
deterministic tiny Inception v3 straight to --steps, then again while faults come in turn, each
at a random step after the first one a start trained (never at a restart's first step), each to
another task (non-chief workers and parameter servers too): SIGTERM (a preemption), SIGKILL (a
task gone) and a partition (the task's host cut off the network, its processes left running;
mended once every task ended), each time restarted as a scheduler would. It reports the tensors
of the final checkpoint that differ from the straight run's and, per fault, every task's exit
status, the seconds from the fault to every task's exit, the steps trained again (since the
last checkpoint; a SIGTERM saves first), and the seconds from the restart to the first step
trained again. Run by hand as root (the lab's namespaces) from the repository root with the
project's environment.
"""

import argparse
import json
import os
import random
import re
import signal
import tempfile
import time

import numpy as np

from bench.supervisor import RESTART_EXIT_CODE
from bench.supervisor import Supervisor
from bench.supervisor import TaskCluster
from common import machine
from data import demo_data
from tests import lab as lab_lib

CONFIGURATIONS = {"all_reduce_2": (2, 0), "all_reduce_4": (4, 0),
                  "parameter_server_2": (2, 1), "parameter_server_4": (4, 1)}
STEP_LINE = re.compile(r": step (\d+), loss")
RESUMED = re.compile(r"resumed from \S+ \(step (\d+)\)(?:; the run had reached step (\d+))?")
STAMPED_STEP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d): step \d+, loss", re.M)


def training_flags(args, data_dir, train_dir):
    """The flags of every worker of a configuration's runs."""
    return [f"--data_dir={data_dir}", "--dataset=demo", f"--train_dir={train_dir}",
            f"--max_steps={args.steps}", "--image_size=107", "--depth_multiplier=0.1",
            "--batch_size=4", "--num_gpus=1", "--seed=1", "--deterministic",
            "--log_every_n_steps=1", "--eval_every_n_steps=0", "--save_summaries_steps=0",
            f"--save_checkpoint_steps={args.save_every}", "--save_interval_secs=0",
            "--step_timeout_secs=120", "--startup_timeout_secs=300"]


class Faults:
    """`count` faults in turn (SIGTERM, SIGKILL, a partition), each at a random step of the
    chief's log after the first step its start trained, each to the next task of a random
    rotation; records what each fault cost. One fault per start of the cluster."""

    KINDS = ("SIGTERM", "SIGKILL", "partition")

    def __init__(self, count, steps, rng):
        self.rng, self.steps = rng, steps
        self.pending = [self.KINDS[index % len(self.KINDS)] for index in range(count)]
        self.offset = rng.randrange(1000)
        self.target = None
        self.records = []
        self.faulted_start = None
        self.cut = None  # the host of a partition, mended before the restart

    def __call__(self, cluster):
        if not self.pending or cluster.starts == self.faulted_start:
            return
        reached = [int(step) for step in STEP_LINE.findall(cluster.output("worker0"))]
        if not reached:
            return  # a restart's first step comes first: a fault before it would hit start-up
        if self.target is None:
            if reached[0] + 1 >= self.steps - 1:
                self.pending = []  # too near the end for another fault
                return
            self.target = self.rng.randint(reached[0] + 1, min(reached[0] + 3, self.steps - 1))
        if reached[-1] < self.target:
            return
        tasks = sorted(cluster.commands)
        kind, task = self.pending.pop(0), tasks[(self.offset + len(self.records)) % len(tasks)]
        self.records.append({"fault": kind, "task": task, "at_step": reached[-1],
                             "at": time.time()})
        if kind == "partition":
            self.cut = cluster.hosts[task]
            cluster.lab.cut(self.cut)
        else:
            cluster.send(task, getattr(signal, kind))
        self.target, self.faulted_start = None, cluster.starts

    def mend(self, cluster):
        """Puts a host cut off by a partition back on the network (before a restart)."""
        if self.cut is not None:
            cluster.lab.mend(self.cut)
            self.cut = None


def run_configuration(name, args, data_dir, rng):
    """One configuration's straight and chaotic runs; returns its report."""
    workers, num_ps = CONFIGURATIONS[name]
    with tempfile.TemporaryDirectory() as root:
        straight_dir, chaos_dir = os.path.join(root, "straight"), os.path.join(root, "chaos")
        straight = TaskCluster(workers, num_ps, training_flags(args, data_dir, straight_dir),
                               tempfile.mkdtemp(dir=root))
        if any(Supervisor(straight).run().values()):
            raise RuntimeError(f"{name}: the straight run failed:\n"
                               f"{straight.output('worker0')[-3000:]}")
        faults = Faults(args.faults, args.steps, rng)
        with lab_lib.Lab(workers + num_ps) as lab:
            cluster = TaskCluster(workers, num_ps, training_flags(args, data_dir, chaos_dir),
                                  tempfile.mkdtemp(dir=root), lab=lab)
            supervisor = Supervisor(cluster)
            final = supervisor.run(while_running=faults, before_restart=faults.mend)
        if any(code != 0 for code in final.values()):
            raise RuntimeError(f"{name}: the cluster ended with {final}:\n"
                               f"{cluster.output('worker0')[-3000:]}")
        for index, (fault, codes) in enumerate(zip(faults.records, supervisor.restarts)):
            fault["exit_codes"] = codes
            fault["seconds_to_every_exit"] = supervisor.ends[index] - fault.pop("at")
            fault.update(restart_costs(cluster.output("worker0", index + 2),
                                       supervisor.starts[index + 1], fault["at_step"]))
        return dict(compare_checkpoints(straight_dir, chaos_dir), faults=faults.records,
                    restarts=len(supervisor.restarts))


def restart_costs(chief_output, started, reached_before):
    """{resumed_at_step, steps_redone, seconds_to_train_again} of one restart, from the
    chief's output of that start (started at time `started`) and the step it had logged last
    before the fault."""
    resumed = RESUMED.search(chief_output)
    step = int(resumed.group(1)) if resumed else 0
    reached = int(resumed.group(2)) if resumed and resumed.group(2) else step
    first = STAMPED_STEP.search(chief_output)
    trained_again = (time.mktime(time.strptime(first.group(1), "%Y-%m-%d %H:%M:%S")) - started
                     if first else None)
    return {"resumed_at_step": step, "steps_redone": max(reached, reached_before) - step,
            "seconds_to_train_again": trained_again}


def compare_checkpoints(straight_dir, chaos_dir):
    """{differing_tensors: how many tensors of the two runs' newest checkpoints differ (by any
    bit), largest_weight_distance: the largest relative L2 distance of a weight tensor}."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from inception.run.directory import RunDirectory  # pylint: disable=import-outside-toplevel
    readers = [tf.train.load_checkpoint(RunDirectory(path).newest())
               for path in (straight_dir, chaos_dir)]
    names = readers[0].get_variable_to_dtype_map()
    pairs = {name: [reader.get_tensor(name) for reader in readers] for name in names}
    distances = [float(np.linalg.norm(chaos - straight) / max(np.linalg.norm(straight), 1e-30))
                 for name, (straight, chaos) in pairs.items() if name.endswith("weights")]
    return {"differing_tensors": sum(1 for straight, chaos in pairs.values()
                                     if not np.array_equal(straight, chaos)),
            "tensors": len(pairs), "largest_weight_distance": max(distances)}


def exit_statuses(codes):
    """'all 138', or 'worker1 -9, the others 138': a fault's {task: exit status} in short."""
    common = max(set(codes.values()), key=list(codes.values()).count)
    odd = [f"{task} {code}" for task, code in sorted(codes.items()) if code != common]
    return f"all {common}" if not odd else f"{', '.join(odd)}, the others {common}"


def summary(reports):
    """The README's table: one row per configuration."""
    rows = ["| configuration | faults (kind, task, step) | exit statuses | tensors that differ "
            "(largest weight distance) | steps redone | s from fault to every exit | s from "
            "restart to training again |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, report in reports.items():
        faults = report["faults"]
        described = ", ".join("{fault} {task} at {at_step}".format(**fault) for fault in faults)
        redone = ", ".join(str(fault["steps_redone"]) for fault in faults)
        exits = ", ".join(f"{fault['seconds_to_every_exit']:.1f}" for fault in faults)
        again = ", ".join(f"{fault['seconds_to_train_again']:.0f}" for fault in faults
                          if fault["seconds_to_train_again"] is not None)
        differ = (f"{report['differing_tensors']} of {report['tensors']} "
                  f"({report['largest_weight_distance']:.2g})")
        statuses = "; ".join(exit_statuses(fault["exit_codes"]) for fault in faults)
        rows.append(f"| {name} | {described} | {statuses} | {differ} | {redone} | {exits} | "
                    f"{again} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--save_every", type=int, default=4, help="--save_checkpoint_steps")
    parser.add_argument("--faults", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    unavailable = lab_lib.unavailable_reason()
    if unavailable is not None:
        raise SystemExit(f"error: the chaos benchmark runs each task on a host of its own, and "
                         f"{unavailable} here: run it as root on Linux.")
    data_dir = demo_data.ensure_demo_data()
    rng = random.Random(args.seed)
    reports = {}
    for name in args.configurations.split(","):
        reports[name] = run_configuration(name, args, data_dir, rng)
        print(f"{name}: {json.dumps(reports[name])}", flush=True)
    print(summary(reports))
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as handle:
            json.dump({"configurations": reports, "steps": args.steps,
                       "save_checkpoint_steps": args.save_every,
                       "restart_exit_code": RESTART_EXIT_CODE,
                       "machine": f"{os.uname().machine} {machine.cpu_summary()}",
                       "date": time.strftime("%Y-%m-%d")}, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
