"""A cluster of `python -m inception.train` tasks, on 127.0.0.1 or each on a host of its own
(a lab of network namespaces, tests/lab.py), and a supervisor that starts every task again
whenever one exits with the restart code, as a scheduler told that the code is retryable does
(a JobSet's failure policy, Kubeflow's ExitCode policy, deploy/slurm's loop).

A test and benchmark tool (bench/chaos.py), not a product scheduler: it runs on one machine,
keeps no state of its own beyond the tasks' logs, and gives up after a fixed number of restarts.
The tasks keep their addresses across restarts, as a JobSet's pods keep their host names.
"""

import os
import signal
import subprocess
import sys
import time

from common.loopback import free_ports
from inception.config import recovery

RESTART_EXIT_CODE = recovery.DEFAULT_RESTART_EXIT_CODE
POLL_SECS = 0.1  # how often the supervisor looks at its tasks: the resolution of its times
LAB_PORT = 2222  # every task's port on a host of its own


class TaskCluster:
    """`num_workers` workers (and `num_ps` parameter servers), each started with `flags` and
    its own cluster flags: on 127.0.0.1, or with `lab` (a running tests/lab.Lab of at least as
    many hosts) each on a host of its own, parameter servers first, at LAB_PORT. Each task's
    output goes to `<log_dir>/<task>.log`, every start of it appended."""

    def __init__(self, num_workers, num_ps, flags, log_dir, lab=None):
        self.lab = lab
        if lab is None:
            addresses = [f"127.0.0.1:{port}" for port in free_ports(num_ps + num_workers)]
        else:
            addresses = [f"{lab.address(host)}:{LAB_PORT}"
                         for host in range(1, num_ps + num_workers + 1)]
        self.ps_hosts, self.worker_hosts = addresses[:num_ps], addresses[num_ps:]
        self.hosts = {name: host for host, name in enumerate(
            [f"ps{task}" for task in range(num_ps)]
            + [f"worker{task}" for task in range(num_workers)], start=1)}
        cluster = [f"--worker_hosts={','.join(self.worker_hosts)}"]
        if num_ps:
            cluster.append(f"--ps_hosts={','.join(self.ps_hosts)}")
        self.commands = {f"ps{task}": ["--job_name=ps", f"--task_id={task}", *cluster]
                         for task in range(num_ps)}
        self.commands.update({f"worker{task}": ["--job_name=worker", f"--task_id={task}",
                                                *cluster, *flags]
                              for task in range(num_workers)})
        self.log_dir = log_dir
        self.processes = {}
        self.starts = 0

    def start(self):
        """Starts every task (again)."""
        self.starts += 1
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONPATH=os.getcwd())
        for name, args in self.commands.items():
            argv = [sys.executable, "-m", "inception.train", *args]
            if self.lab is not None:
                argv = self.lab.command(self.hosts[name], argv)
            with open(self.log_path(name), "a", encoding="utf-8") as log:
                log.write(f"=== start {self.starts}\n")
                log.flush()
                self.processes[name] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True)

    def log_path(self, name):
        """Where task `name`'s output goes."""
        return os.path.join(self.log_dir, f"{name}.log")

    def output(self, name, start=None):
        """What task `name` printed in its start `start` (default: the latest)."""
        with open(self.log_path(name), encoding="utf-8", errors="replace") as log:
            text = log.read()
        return text.split(f"=== start {start or self.starts}\n", 1)[-1].split("=== start ")[0]

    def codes(self):
        """{task: exit status, None while it runs}."""
        return {name: process.poll() for name, process in self.processes.items()}

    def send(self, name, number):
        """Sends signal `number` to task `name`'s process group."""
        os.killpg(self.processes[name].pid, number)

    def wait(self, timeout):
        """{task: exit status} once every task ended; kills them all after `timeout` s."""
        deadline = time.time() + timeout
        while any(code is None for code in self.codes().values()):
            if time.time() > deadline:
                self.kill()
                raise RuntimeError(f"tasks still ran after {timeout:g} s; killed them")
            time.sleep(POLL_SECS)
        return self.codes()

    def kill(self):
        """SIGKILL to every task still running."""
        for name, code in self.codes().items():
            if code is None:
                self.send(name, signal.SIGKILL)
                self.processes[name].wait()


class Supervisor:
    """Runs a TaskCluster to its end, starting every task again whenever one exits with
    the restart code (the others then exit with it too) and none with another failure."""

    def __init__(self, cluster, max_restarts=20, task_timeout=900):
        self.cluster = cluster
        self.max_restarts = max_restarts
        self.task_timeout = task_timeout
        self.restarts = []  # one {task: exit status} per restart
        self.ends = []  # when every task had ended, one time per start
        self.starts = []  # when the tasks were started, one time per start

    def run(self, while_running=None, before_restart=None):
        """Starts the cluster and restarts it as above; returns the last {task: status}.
        `while_running(cluster)`, called every POLL_SECS while every task runs, may signal
        tasks or cut a host off (bench/chaos.py's faults); `before_restart(cluster)` runs
        once every task ended, before they start again (a cut host is mended there)."""
        while True:
            self.starts.append(time.time())
            self.cluster.start()
            codes = self._wait_for_end(while_running)
            self.ends.append(time.time())
            if not any(code == RESTART_EXIT_CODE for code in codes.values()):
                return codes
            if len(self.restarts) >= self.max_restarts:
                raise RuntimeError(f"still asking for a restart after {self.max_restarts}")
            self.restarts.append(codes)
            if before_restart is not None:
                before_restart(self.cluster)

    def _wait_for_end(self, while_running):
        deadline = time.time() + self.task_timeout
        while any(code is None for code in self.cluster.codes().values()):
            if while_running is not None and all(
                    code is None for code in self.cluster.codes().values()):
                while_running(self.cluster)
            if time.time() > deadline:
                self.cluster.kill()
                raise RuntimeError(f"the cluster still ran after {self.task_timeout:g} s")
            time.sleep(POLL_SECS)
        return self.cluster.codes()
