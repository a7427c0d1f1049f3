"""A real Slurm on the hosts of a lab (tests/lab.py), for the test of deploy/slurm/train.sbatch.

Debian's `slurm-wlm` and `munge` (installed by `ensure_installed` when missing): one munge
daemon with a key of the lab's own, `slurmctld` on host 1, one `slurmd` per host, all from a
`slurm.conf` of the lab's own (SLURM_CONF). Every daemon runs in its host's network namespace,
in a UTS namespace named as its node (`n1`, `n2`, ...: slurmctld refuses a host name other than
its SlurmctldHost's, slurmd takes its node name from it) and in a mount namespace where a hosts
file of the lab's nodes covers /etc/hosts (the tasks of a job reach each other by node name,
as TensorFlow's SlurmClusterResolver gives them). Processes tracked by /proc, no task plugin,
no accounting: nothing of this machine's cgroups or services is touched. The daemons change
their supplementary groups, which Bazel's sandbox forbids: the test runs unsandboxed.
"""

import os
import shutil
import subprocess
import tempfile
import time

PACKAGES = ("slurm-wlm", "munge")
DAEMON_WAIT_SECS = 60
CONFIG = """ClusterName=lab
SlurmctldHost=n1({controller})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/linear
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=30
{nodes}
PartitionName=lab Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""


def unavailable_reason():
    """Why no Slurm can run here (its packages are missing and cannot be installed), or
    None."""
    missing = [tool for tool in ("slurmctld", "slurmd", "sbatch", "munged")
               if shutil.which(tool) is None]
    return f"{', '.join(missing)} not installed (Debian: {' '.join(PACKAGES)})" if missing else None


def ensure_installed():
    """Installs Debian's slurm-wlm and munge when they are missing (as root; apt-get)."""
    if unavailable_reason() is None or shutil.which("apt-get") is None or os.geteuid() != 0:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    if subprocess.run(install, capture_output=True, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
        subprocess.run(install, capture_output=True, env=env, check=False)


def node_name(host):
    """The Slurm node name of lab host `host`."""
    return f"n{host}"


class SlurmLab:
    """Slurm on every host of `lab` (a running tests/lab.Lab), its files in a directory of its
    own under /tmp (munge's socket path must stay under 108 bytes, which a test's temporary
    directory can exceed), removed on leaving; a context manager that starts the daemons and
    stops them on leaving."""

    def __init__(self, lab):
        self.lab = lab
        self.root = tempfile.mkdtemp(prefix="slurm-", dir="/tmp")
        self.hosts_file = os.path.join(self.root, "hosts")
        self.config = os.path.join(self.root, "slurm.conf")
        self._daemons = []

    def __enter__(self):
        try:
            self._write_files()
            self._start(None, ["munged", "--foreground", "--force",
                               f"--socket={self.root}/munge.socket",
                               f"--key-file={self.root}/munge.key",
                               f"--pid-file={self.root}/munged.pid",
                               f"--log-file={self.root}/munged.log",
                               f"--seed-file={self.root}/munged.seed"])
            self._start(1, ["slurmctld", "-D", "-i", "-f", self.config])
            for host in range(1, self.lab.num_hosts + 1):
                self._start(host, ["slurmd", "-D", "-f", self.config])
            self.wait_until_idle()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info):
        self.close()

    def command(self, argv, host=1):
        """`argv` as a command on `host` that reaches this Slurm (sbatch, squeue, scancel)."""
        return self.lab.command(host, self._namespaced(host, argv))

    def env(self):
        """The environment of a Slurm command of this lab (its SLURM_CONF)."""
        return dict(os.environ, SLURM_CONF=self.config)

    def run(self, argv, env=None, host=1):
        """Runs the Slurm command `argv` on `host` in `env` (default: env()); its stdout
        (RuntimeError if it failed)."""
        done = subprocess.run(self.command(argv, host), capture_output=True, text=True,
                              env=env or self.env(), timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed ({done.returncode}): "
                               f"{done.stderr.strip()}\n{self.logs()}")
        return done.stdout

    def wait_until_idle(self):
        """Waits until every node is up and idle."""
        deadline = time.monotonic() + DAEMON_WAIT_SECS
        expected = self.lab.num_hosts
        while True:
            try:
                states = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"]).split()
            except RuntimeError:
                states = []
            if states.count("idle") == expected:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm's nodes did not come up: {states}\n{self.logs()}")
            time.sleep(0.5)

    def logs(self):
        """The end of every daemon's log, for a failure's message."""
        ends = []
        for name in sorted(os.listdir(self.root)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.root, name), encoding="utf-8",
                          errors="replace") as log:
                    ends.append(f"--- {name}:\n{log.read()[-1500:]}")
        return "\n".join(ends)

    def close(self):
        """Stops every daemon and removes the lab's files (idempotent)."""
        for daemon in reversed(self._daemons):
            if daemon.poll() is None:
                daemon.kill()
            daemon.wait()
        self._daemons.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def _write_files(self):
        hosts = range(1, self.lab.num_hosts + 1)
        for directory in ["state"] + [f"spool/{node_name(host)}" for host in hosts]:
            os.makedirs(os.path.join(self.root, directory), exist_ok=True)
        with open(self.hosts_file, "w", encoding="utf-8") as out:
            out.write("127.0.0.1 localhost\n")
            out.writelines(f"{self.lab.address(host)} {node_name(host)}\n" for host in hosts)
        nodes = "\n".join(f"NodeName={node_name(host)} NodeAddr={self.lab.address(host)} "
                          "CPUs=1 State=UNKNOWN" for host in hosts)
        with open(self.config, "w", encoding="utf-8") as out:
            out.write(CONFIG.format(controller=self.lab.address(1), root=self.root,
                                    nodes=nodes,
                                    names=",".join(node_name(host) for host in hosts)))
        key = os.path.join(self.root, "munge.key")
        with open(key, "wb") as out:
            out.write(os.urandom(1024))
        os.chmod(key, 0o400)

    def _namespaced(self, host, argv):
        """`argv` in a UTS namespace named as `host`'s node and a mount namespace whose
        /etc/hosts is the lab's."""
        script = ('mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"')
        return ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script,
                self.hosts_file, node_name(host), *argv]

    def _start(self, host, argv):
        with open(os.path.join(self.root, f"{argv[0]}-{host}.out"), "w",
                  encoding="utf-8") as out:
            command = argv if host is None else self.command(argv, host)
            # pylint: disable-next=consider-using-with
            self._daemons.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                                  env=self.env()))
