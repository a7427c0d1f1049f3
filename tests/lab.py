"""A lab of hosts on one machine, for the tests of what crosses machines.

Each host is a network namespace of its own, with its own loopback (its `localhost` is not
another host's) and one interface `eth0` at 10.77.0.N on a bridge; the bridge lives in one
more network namespace the lab makes for itself, so nothing touches this machine's network
and the only addresses in use are the lab's. The namespaces are held by `sleep` processes that
die with the test (PR_SET_PDEATHSIG), so a test that is killed leaves nothing behind. A
process runs on a host through `nsenter --net` (`Lab.command`); `cut` takes a host off the
bridge without a signal to anyone (its link stays up and its packets are dropped, as in a
partition) and `mend` puts it back.

Needs root, util-linux (`unshare`, `nsenter`) and iproute2 (`ip`); `skip_without_lab` makes a
test report itself skipped with the reason where they are missing, and fail instead under
CI=true, where the lab must run.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import time

SUBNET = "10.77.0"
BRIDGE = "labbr0"
_PR_SET_PDEATHSIG = 1
_NAMESPACE_WAIT_SECS = 10.0


def unavailable_reason():
    """Why no lab can be made on this machine, or None when one can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: util-linux, iproute2)"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True,
                           check=False)
    if probe.returncode != 0:
        return f"`unshare --net` failed: {probe.stderr.strip() or probe.returncode}"
    return None


def skip_without_lab(test):
    """Skips `test`, saying why, where no lab can be made; fails it under CI=true."""
    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        test.fail(f"the cluster lab must run in CI, but {reason}")
    test.skipTest(f"no lab of hosts here: {reason}")


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _namespace_of(pid):
    return os.readlink(f"/proc/{pid}/ns/net")


class Lab:
    """`num_hosts` hosts, numbered from 1, at `address(host)` on one bridge; a context manager
    (leaving it kills every process still holding a namespace)."""

    def __init__(self, num_hosts):
        self.num_hosts = num_hosts
        self._holders = {}  # 0: the bridge's namespace, 1..num_hosts: the hosts'

    def __enter__(self):
        try:
            self._holders[0] = self._new_namespace()
            self._ip(0, "link", "add", BRIDGE, "type", "bridge")
            self._ip(0, "link", "set", BRIDGE, "up")
            for host in range(1, self.num_hosts + 1):
                self._holders[host] = self._new_namespace()
                self._ip(0, "link", "add", self._port(host), "type", "veth", "peer", "name",
                         "eth0", "netns", str(self._holders[host].pid))
                self._ip(0, "link", "set", self._port(host), "master", BRIDGE, "up")
                self._ip(host, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
                self._ip(host, "link", "set", "eth0", "up")
                self._ip(host, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info):
        self.close()

    def address(self, host):
        """The IPv4 address of `host` (1..num_hosts) on the lab's bridge."""
        return f"{SUBNET}.{host}"

    def command(self, host, argv):
        """`argv` (a list) as a command that runs on `host`: in its network namespace."""
        return ["nsenter", f"--net={self.namespace_path(host)}", "--", *argv]

    def namespace_path(self, host):
        """The /proc path of `host`'s network namespace (for nsenter or setns)."""
        return f"/proc/{self._holders[host].pid}/ns/net"

    def cut(self, host):
        """Takes `host` off the bridge: its packets are dropped from now on, silently, both
        ways (its processes and its link stay up, as in a network partition)."""
        self._ip(0, "link", "set", self._port(host), "nomaster")

    def mend(self, host):
        """Puts `host` back on the bridge after `cut`."""
        self._ip(0, "link", "set", self._port(host), "master", BRIDGE)

    def close(self):
        """Ends the namespaces' holders (idempotent); a namespace goes when its last process
        does, the bridge and the hosts' links with it."""
        for holder in self._holders.values():
            if holder.poll() is None:
                holder.kill()
            holder.wait()
        self._holders.clear()

    @staticmethod
    def _port(host):
        return f"lab{host}"

    def _ip(self, host, *args):
        command = self.command(host, ["ip", *args])
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"lab: `{' '.join(command)}` failed: {done.stderr.strip()}")

    @staticmethod
    def _new_namespace():
        mine = _namespace_of(os.getpid())
        # pylint: disable-next=consider-using-with,subprocess-popen-preexec-fn
        holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"],
                                  preexec_fn=_die_with_parent)
        deadline = time.monotonic() + _NAMESPACE_WAIT_SECS
        while _namespace_of(holder.pid) == mine:  # unshare has not switched yet
            if holder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lab: `unshare --net` made no namespace "
                                   f"(exit status {holder.poll()})")
            time.sleep(0.01)
        return holder
