"""One training run per --train_dir: an exclusive lock held for the run's life.

An OS file lock (flock) on `<train_dir>/train.lock`: the kernel drops it when the process ends
however it ends, so a killed run never leaves a stale lock; the file itself only says who holds
the lock (pid, host, start time) for the message of a run that finds it taken. Evaluation and
TensorBoard read the directory without it. Free of TensorFlow, so a second run fails within
seconds, before anything is built.
"""

import contextlib
import datetime
import fcntl
import os
import socket

from common import cli
from common import error_lines
from common import files

LOCK_FILE = "train.lock"


class RunLockError(cli.UserError):
    """Another run holds the directory; the message names it and says what to do."""


@contextlib.contextmanager
def exclusive_run(train_dir):
    """Holds the lock of `train_dir` (created if missing) while inside; RunLockError when
    another process holds it. Paths of remote file systems (`gs://...`) are not locked."""
    if files.is_url(train_dir):
        yield
        return
    path = os.path.join(train_dir, LOCK_FILE)
    try:
        os.makedirs(train_dir, exist_ok=True)
        handle = open(path, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
    except OSError as error:
        raise RunLockError(error_lines.cannot_write(f"in --train_dir={train_dir}",
                                                    error)) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "a process that has not said who it is"
            raise RunLockError(f"another training run uses {train_dir} ({holder}); wait for it "
                               "to end, or pass another --train_dir.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started "
                     f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
