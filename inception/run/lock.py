"""One training run per --train_dir: an exclusive lock held for the run's life, with a heartbeat.

An OS file lock (flock) on `<train_dir>/train.lock`: the kernel drops it when the process ends
however it ends, so a killed run leaves no stale lock on its machine. The file's one line names
the holder (Holder.line), which rewrites it every RENEW_SECS from a daemon thread (its heartbeat).
A run that cannot take the flock reads it. A holder on this machine (the same kernel, by boot
id: a node's containers are one machine, a pod recreated under its name on another node is
not) is believed: the flock is the truth there. One on another machine whose line is older than
STALE_SECS is taken to be gone with its machine, and the run is taken over (a line of its own,
renewed; one log line naming the previous holder; the flock once free): a file server keeps a
lost client's lock a while (NFSv4: until the server stops waiting for it to renew its
state) or for good (NFSv3's lock manager: until it reboots). Anything else, a line that is
not intact too, is refused.

A line's age is read from the file server's clock alone: the modification time it stamped at
the holder's last write against the one it stamps on a file touched beside it, so any skew
between the hosts' clocks is tolerated. Only where that probe cannot be written does the
newcomer's clock stand in, tolerating it up to STALE_SECS - RENEW_SECS (50 s) ahead of the
server's. Evaluation and TensorBoard take no lock. Free of TensorFlow: a second run fails fast.
"""

import contextlib
import dataclasses
import datetime
import fcntl
import os
import re
import socket
import threading
import time
import zlib

from common import cli
from common import error_lines
from common import files

LOCK_FILE = "train.lock"
# The holder rewrites its line this often: ~150 bytes and an fsync, nothing a run notices; a
# live holder loses its run only after 5 renewals in a row failed (writes stalled a minute).
RENEW_SECS = 10.0
# A holder on another machine whose line is older than this is taken over. Long enough that a
# live holder's hiccups (above) never hand its run to a second chief; short enough that a chief
# restarted on another node gets in about a minute after its old node's loss, sooner than
# NFSv4's default server timeout for a silent client (90 s) frees the flock, and at all where
# NFSv3 never frees it.
STALE_SECS = 60.0

_RECORD = re.compile(r"pid (?P<pid>\d+) on (?P<host>\S+), started (?P<since>[\d: -]+?), "
                     r"renewed (?P<renewed>[\d: -]+?) \[machine (?P<machine>\S+), "
                     r"crc32 (?P<crc>[0-9a-f]{8})\]$")
_RECORD_BYTES = 4096  # far more than a line with a 255-byte host name


class RunLockError(cli.UserError):
    """Another run holds the directory (or it cannot be locked); the message names the holder
    and says what to do. `retryable` is the caller's, True for a task of a cluster alone: a
    scheduler (Kubernetes, Slurm) restarts such a task while its previous incarnation may still
    be ending, on its node (the flock goes with its process) or on a node that is gone (the
    heartbeat runs out), so the refusal passes, and the restart code makes the scheduler try again
    where status 1 would end the whole job. A run alone is not: there a second run is a user's
    mistake (two commands, one --train_dir) that a restart loop would only repeat."""

    def __init__(self, message, retryable=False):
        super().__init__(message)
        self.retryable = retryable


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a run's lock. pid, host: the process and its host name. since, renewed: when it
    took the lock and last wrote its line, by its own clock as 'YYYY-MM-DD HH:MM:SS' (for people:
    the heartbeat is judged by the file's modification time). machine: its machine_id()."""
    pid: int
    host: str
    since: str
    renewed: str
    machine: str

    def line(self):
        """The line of the lock file, ending in a checksum of itself so that a reader tells a
        line a concurrent write tore: 'pid 4321 on node-a, started 2026-01-02 03:04:05,
        renewed 2026-01-02 03:09:15 [machine <boot id>, crc32 <8 hex digits>]'."""
        text = (f"pid {self.pid} on {self.host}, started {self.since}, renewed {self.renewed} "
                f"[machine {self.machine}, ")
        return f"{text}crc32 {zlib.crc32(text.encode()):08x}]\n"

    def named(self):
        """The holder for a message: 'pid 4321 on node-a, started 2026-01-02 03:04:05'."""
        return f"pid {self.pid} on {self.host}, started {self.since}"

    def same_run(self, other):
        """Whether the Holder `other` is this one at another renewal."""
        return dataclasses.replace(other, renewed=self.renewed) == self

    @classmethod
    def parse(cls, text):
        """The Holder of the first line of `text`; None when that is not an intact line (empty,
        torn, or written by an older version of this module)."""
        first = text.split("\n", 1)[0]
        match = _RECORD.match(first)
        if not match or (f"{zlib.crc32(first[:match.start('crc') - 6].encode()):08x}"
                         != match.group("crc")):
            return None
        return cls(int(match["pid"]), match["host"], match["since"], match["renewed"],
                   match["machine"])


def machine_id():
    """The kernel this process runs on: its boot id (the same in every container of a node, new
    after a reboot), else the host name where /proc does not tell it."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot_id:
            return boot_id.read().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def _now():
    return f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S}"


def read_holder(path, tries=3, pause_secs=0.05):
    """(Holder or None, the file's first line, its modification time in seconds since the epoch)
    of the lock file `path`; a line that is not intact is read again up to `tries` times,
    `pause_secs` apart, as a renewal may have been writing it. Raises OSError."""
    for attempt in range(1, max(tries, 1) + 1):
        # A fresh open each time: an NFS client revalidates a file's data and times on open.
        fd = os.open(path, os.O_RDONLY)
        try:
            text = os.read(fd, _RECORD_BYTES).decode(errors="replace")
            mtime = os.fstat(fd).st_mtime  # after the read: never older than the line read
        finally:
            os.close(fd)
        holder = Holder.parse(text)
        if holder is not None or not text.strip():
            break
        if attempt < tries:
            time.sleep(pause_secs)
    return holder, text.split("\n", 1)[0].strip(), mtime


def file_server_time(directory):
    """Now by the clock of the file server of `directory`: the modification time it stamps on
    a file created and touched there without a time (which an NFS client sends as 'the server's
    time'); None where nothing can be written there."""
    probe = os.path.join(directory, f".{LOCK_FILE}.clock-{socket.gethostname()}-{os.getpid()}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        os.utime(probe)
        return os.stat(probe).st_mtime
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.remove(probe)


def _try_flock(fd):
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class RunHeartbeat:
    """A run's hold on its directory (exclusive_run yields it): `holder`, the Holder naming this
    process, renewed by a daemon thread; `holds_flock` (not yet after a take-over, while the
    file server keeps the previous holder's); `lost_to`, the Holder that took the run over
    after this one's heartbeat lapsed (renewal stops then), else None."""

    def __init__(self, path, fd, holder, renew_secs, log):
        self.path = path
        self.holder = holder
        self.holds_flock = False
        self.lost_to = None
        self._fd = fd
        self._renew_secs = renew_secs
        self._log = log
        self._failing = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._renew_until_stopped, name="run-heartbeat",
                                        daemon=True)

    def write(self):
        """Writes this run's line, renewed now. Raises OSError."""
        self.holder = dataclasses.replace(self.holder, renewed=_now())
        data = self.holder.line().encode()
        # One write, in place (the flock is on this inode: no rename); a reader catching it half
        # done sees a wrong checksum. fsync: the file server stamps the time the heartbeat is
        # judged by.
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))
        os.fsync(self._fd)

    def renew(self):
        """One renewal: takes the flock if this run lacks it, and rewrites this run's line
        unless another run's replaced it (then logs a line, sets `lost_to`, returns False); a
        failed write is logged once per streak and tried again. Returns whether to go on."""
        try:
            self.holds_flock = self.holds_flock or _try_flock(self._fd)
            found = read_holder(self.path)[0]
            if found is not None and not found.same_run(self.holder):
                self.lost_to = found
                self._log(f"the lock of {os.path.dirname(self.path)} was taken over by "
                          f"{found.named()}, as this run's heartbeat had not been renewed for "
                          f"{STALE_SECS:.0f} s; two runs now write there: stop one of them.")
                return False
            if found is not None:  # else being written by another run: judged next time
                self.write()
            self._failing = False
        except OSError as error:
            if not self._failing:
                self._log(f"could not renew the heartbeat in {self.path}: "
                          f"{error_lines.cause_of(error)}; trying again every "
                          f"{self._renew_secs:g} s (a run on another machine takes this one "
                          f"over after {STALE_SECS:.0f} s without a renewal).")
            self._failing = True
        return True

    def start(self):
        """Starts renewing every `renew_secs` in a daemon thread."""
        self._thread.start()

    def stop(self):
        """Stops renewing; returns once the thread has ended (within one renewal)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _renew_until_stopped(self):
        while not self._stopped.wait(self._renew_secs) and self.renew():
            pass


def _lapsed_holder(train_dir, here, stale_secs, retryable):
    """(the Holder of `train_dir` whose heartbeat lapsed, seconds since its last renewal); raises
    RunLockError for any other holder."""
    try:
        holder, named, mtime = read_holder(os.path.join(train_dir, LOCK_FILE))
    except OSError:
        holder, named, mtime = None, "", 0.0
    if holder is not None and holder.machine != here.machine:
        server_now = file_server_time(train_dir)
        age = (time.time() if server_now is None else server_now) - mtime
        if age > stale_secs:
            return holder, age
        named = (f"{holder.named()}, heartbeat renewed {max(age, 0):.0f} s ago; a run on another "
                 f"machine is taken over once not renewed for {stale_secs:.0f} s")
    elif holder is not None:
        named = holder.named()
    what = ("exiting with the restart code, so that the scheduler tries again once it has "
            "ended; if it is not this task's earlier run, stop it or pass another --train_dir."
            if retryable else "wait for it to end, or pass another --train_dir.")
    raise RunLockError(f"another training run uses {train_dir} "
                       f"({named or 'a process that has not said who it is'}); {what}",
                       retryable=retryable)


@contextlib.contextmanager
def exclusive_run(train_dir, retryable=False, log=print, stale_secs=STALE_SECS,
                  renew_secs=RENEW_SECS):
    """Holds the lock of `train_dir` (created if missing) while inside, renewing its heartbeat
    every `renew_secs` seconds; yields the RunHeartbeat (None for a remote path, `gs://...`: not
    locked). Raises RunLockError, with `retryable` (True for a task of a cluster: see the
    class), when a process of this machine holds it, or one of another machine that renewed its
    heartbeat within `stale_secs`; one silent for longer is taken over, and `log` gets a line."""
    if files.is_url(train_dir):
        yield None
        return
    path = os.path.join(train_dir, LOCK_FILE)
    try:
        os.makedirs(train_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_APPEND: pwrite would append
    except OSError as error:
        raise RunLockError(error_lines.cannot_write(f"in --train_dir={train_dir}",
                                                    error)) from None
    here = Holder(pid=os.getpid(), host=socket.gethostname(), since=_now(), renewed=_now(),
                  machine=machine_id())
    heartbeat = RunHeartbeat(path, fd, here, renew_secs, log)
    try:
        heartbeat.holds_flock = _try_flock(fd)
        if not heartbeat.holds_flock:
            previous, age = _lapsed_holder(train_dir, here, stale_secs, retryable)
            log(f"took over {train_dir} from {previous.named()}: its heartbeat was last renewed "
                f"{age:.0f} s ago (more than {stale_secs:.0f} s), so its machine is taken to be "
                "gone, although the file server still reports its lock.")
        try:
            heartbeat.write()
        except OSError as error:
            raise RunLockError(error_lines.cannot_write(f"in --train_dir={train_dir}",
                                                        error)) from None
        heartbeat.start()
        yield heartbeat
    finally:
        heartbeat.stop()
        if heartbeat.holds_flock:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
