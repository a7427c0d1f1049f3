"""A cluster of `python -m inception.train` tasks for the cluster tests: with one parameter
server, or none (the workers all-reduce), each task a subprocess with its output in a file; on
127.0.0.1, or each task on a host of its own in a lab of hosts (tests/lab.py)."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from common.loopback import free_ports
from inception.config import cluster as cluster_lib
from inception.config import recovery
from inception.run.directory import RunDirectory
from tests import testing_utils

STARTUP_TIMEOUT_SECS = 120
STEP_TIMEOUT_SECS = 60
# A whole run of one task, start-up and graph building included: a bound, not a speed target.
# Bazel runs the cluster tests' shards side by side, so on 2 cores six TensorFlow processes
# build their graphs at once: measured 3.5 min to the first step there (under 1 min alone).
RUN_TIMEOUT_SECS = 480
# The port of every task on a lab host (each host has its own ports).
TASK_PORT = 2222
# A cut of a host's network shorter than the step watch's span of failed probes
# (loop/liveness.py: 10 s, then 3 probes 10 s apart), which training survives: TCP's
# retransmissions carry the step on within seconds of the mend.
BLIP_SECS = 5
# What a partition may take to end every task with the default timeouts: the step watch's
# 30-40 s (a parameter server's own probes: about 15 s), a busy machine's margin on top.
PARTITION_BOUND_SECS = 150
# What every task exits with when a task was preempted or lost (the flag's default).
RESTART_EXIT_CODE = recovery.DEFAULT_RESTART_EXIT_CODE
TINY = ("--dataset=demo", *testing_utils.tiny_flags(aux_head=True), "--batch_size=4",
        "--log_every_n_steps=1", "--save_summaries_steps=1", "--save_checkpoint_steps=100")
# The flag's own default, where a test shows what a user gets (the tests' STEP_TIMEOUT_SECS
# would end a partitioned step sooner than the step watch).
DEFAULT_STEP_TIMEOUT = (f"--step_timeout_secs={cluster_lib.ClusterSettings.step_timeout_secs:g}",)
# For runs that do not test validation: the demo's default validates every 350 steps and at
# the end, and the chief builds its evaluation graph (another Inception) before its first step.
NO_VALIDATION = ("--eval_every_n_steps=0",)


class LocalCluster:
    """`num_ps` parameter servers (0 or 1) and two worker tasks of `python -m inception.train`
    training on `data_dir` into `train_dir` with `num_towers` towers each, each task in its
    own process group with its output in a file; `stop()` kills whatever still runs.

    With `lab` (a tests/lab.Lab), each task runs on a host of its own, the parameter server
    first, from host 1 on (`hosts` names each task's), at TASK_PORT of its address."""

    def __init__(self, data_dir, train_dir, max_steps, num_ps=1, extra_flags=(), num_towers=2,
                 lab=None):
        names = [f"ps{task}" for task in range(num_ps)] + ["worker0", "worker1"]
        self.lab = lab
        if lab is None:
            self.hosts = {}
            self.addresses = {name: f"127.0.0.1:{port}"
                              for name, port in zip(names, free_ports(len(names)))}
        else:
            self.hosts = {name: host for host, name in enumerate(names, start=1)}
            self.addresses = {name: f"{lab.address(host)}:{TASK_PORT}"
                              for name, host in self.hosts.items()}
        self.log_dir = testing_utils.temp_dir("cluster_logs")
        cluster = (f"--worker_hosts={self.addresses['worker0']},{self.addresses['worker1']}",
                   f"--startup_timeout_secs={STARTUP_TIMEOUT_SECS}",
                   f"--step_timeout_secs={STEP_TIMEOUT_SECS}")
        if num_ps:
            cluster += (f"--ps_hosts={self.addresses['ps0']}",)
        training_flags = (f"--train_dir={train_dir}", f"--data_dir={data_dir}",
                          f"--max_steps={max_steps}", f"--num_gpus={num_towers}",
                          *TINY, *extra_flags)
        self.commands = {f"ps{task}": ("--job_name=ps", f"--task_id={task}") + cluster
                         for task in range(num_ps)}
        for task in range(2):
            self.commands[f"worker{task}"] = (
                ("--job_name=worker", f"--task_id={task}") + cluster + training_flags)
        self.processes = {}

    def __enter__(self):
        """Starts the cluster's tasks (others started before with `start` keep running)."""
        for name, args in self.commands.items():
            self.start(name, "inception.train", args, self.hosts.get(name))
        return self

    def start(self, name, module, args, host=None):
        """Runs `python -m module *args` as task `name` (on the lab's `host`, when given), in
        a process group of its own, its output in log_path(name)."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TF_CPP_MIN_LOG_LEVEL="2")
        argv = [sys.executable, "-m", module, *args]
        if host is not None:
            argv = self.lab.command(host, argv)
        with open(self.log_path(name), "w", encoding="utf-8") as log:
            self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                    env=env, start_new_session=True)

    def __exit__(self, *exc_info):
        self.stop()

    def log_path(self, name):
        """The file holding task `name`'s stdout and stderr."""
        return os.path.join(self.log_dir, f"{name}.log")

    def output(self, name):
        """Everything task `name` printed so far."""
        with open(self.log_path(name), encoding="utf-8", errors="replace") as log:
            return log.read()

    def wait(self, name, timeout):
        """Task `name`'s exit status; fails the test if it runs longer than `timeout` s."""
        try:
            return self.processes[name].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{name} still runs after {timeout} s; its output:\n"
                                 f"{self.output(name)[-3000:]}") from None

    def wait_all(self, names, timeout):
        """{name: exit status} of tasks `names`, all within `timeout` s in total."""
        deadline = time.time() + timeout
        return {name: self.wait(name, max(1.0, deadline - time.time())) for name in names}

    def wait_for_output(self, name, pattern, timeout):
        """Waits until task `name` prints a line matching `pattern`."""
        deadline = time.time() + timeout
        while not re.search(pattern, self.output(name), re.MULTILINE):
            if time.time() > deadline or self.processes[name].poll() is not None:
                raise AssertionError(f"{name} printed no {pattern!r} within {timeout} s:\n"
                                     f"{self.output(name)[-3000:]}")
            time.sleep(0.5)

    def kill(self, name):
        """SIGKILL to task `name`'s process group."""
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self):
        """Kills every task that still runs."""
        for name in self.processes:
            self.kill(name)


def stop_worker_1_by_signal(cluster, timeout):
    """SIGTERM to worker 1 once it logged step 2; returns ({task: exit status}, {task:
    output}) once every task ended (within `timeout` s)."""
    cluster.wait_for_output("worker1", r": step 2, loss", RUN_TIMEOUT_SECS)
    cluster.processes["worker1"].send_signal(signal.SIGTERM)
    codes = cluster.wait_all(list(cluster.processes), timeout)
    return codes, {name: cluster.output(name) for name in cluster.processes}


def survive_a_blip_then_cut_off(cluster, name):
    """On a cluster of a lab: cuts task `name`'s host off the network for BLIP_SECS once it
    logged a step, waits until it logged two more (training survived the blip), then cuts it
    off for good; returns ({task: exit status}, {task: output}, seconds from the cut to the
    last task's end), failing the test if that exceeds PARTITION_BOUND_SECS."""
    host = cluster.hosts[name]
    cluster.wait_for_output(name, r": step \d+, loss", RUN_TIMEOUT_SECS)
    cluster.lab.cut(host)
    time.sleep(BLIP_SECS)
    cluster.lab.mend(host)
    last = step_lines(cluster.output(name))[-1][0]
    cluster.wait_for_output(name, rf": step {last + 2}, loss", RUN_TIMEOUT_SECS)
    cluster.lab.cut(host)
    cut_at = time.monotonic()
    codes = cluster.wait_all(list(cluster.processes), PARTITION_BOUND_SECS)
    seconds = time.monotonic() - cut_at
    print(f"{name}'s host cut off: every task ended {seconds:.1f} s later")
    return codes, {task: cluster.output(task) for task in cluster.processes}, seconds


def check_partition_ended(test, cluster, name, codes, outputs):
    """Checks with `test` that every task of `cluster` ended with the restart code and one
    error line, and that task `name`, cut off, named every other task as not answering."""
    test.assertEqual(codes, {task: RESTART_EXIT_CODE for task in cluster.processes}, outputs)
    for task, output in outputs.items():
        test.assertNotIn("Traceback", output, task)
        test.assertEqual(len(error_lines(output)), 1, output)
    line = error_lines(outputs[name])[0]
    test.assertIn("lost contact with the cluster (not answering now: ", line)
    for task, address in cluster.addresses.items():
        if task != name:
            test.assertIn(f"{task[:-1]} {task[-1]} at {address}", line)


def chief_saved_after_peer_stop(test, chief_output, train_dir):
    """(step, checkpoint) named by the chief's one error line after another worker stopped the
    cluster; checks with `test` that the checkpoint is the newest and holds that step."""
    chief_error = error_lines(chief_output)
    test.assertEqual(len(chief_error), 1, chief_output)
    match = re.search(r"training stopped at step (\d+) because another task of the "
                      r"cluster got SIGTERM \(a preemption\); the chief saved (\S+); exit "
                      rf"status {RESTART_EXIT_CODE}: start every task again", chief_error[0])
    test.assertIsNotNone(match, chief_error[0])
    step, saved = int(match.group(1)), match.group(2)
    test.assertEqual(saved, RunDirectory(train_dir).newest())
    test.assertEqual(int(tf.train.load_checkpoint(saved).get_tensor("global_step")), step)
    return step, saved


def assert_same_checkpoints(test, train_dir, other_dir):
    """Checks with `test` that the newest checkpoints of two runs hold the same variables with
    bit-identical values."""
    readers = [tf.train.load_checkpoint(RunDirectory(directory).newest())
               for directory in (train_dir, other_dir)]
    names = [reader.get_variable_to_dtype_map() for reader in readers]
    test.assertEqual(sorted(names[0]), sorted(names[1]))
    differ = [name for name in names[0]
              if not np.array_equal(readers[0].get_tensor(name), readers[1].get_tensor(name))]
    test.assertEqual(differ, [], f"{len(differ)} of {len(names[0])} tensors differ")


def step_lines(output):
    """[(step, loss)] of the `step N, loss = X` lines."""
    return [(int(step), float(loss))
            for step, loss in re.findall(r": step (\d+), loss = ([\d.]+) ", output)]


def error_lines(output):
    """The lines an entry point printed as `error: ...`."""
    return [line for line in output.splitlines() if line.startswith("error: ")]
