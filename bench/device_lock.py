"""One measurement at a time on the machine, while the next one builds its graph.

bench.throughput overlaps measurement processes on GPU machines: each waits for this lock
before it touches the GPU (or times anything) and keeps it until it exits, so the timed parts
never overlap and the GPU's memory is free for the next one; only set-up work (imports, graph
building) runs beside another measurement. Kept free of TensorFlow so the PyTorch peer can use
it too.
"""

import fcntl
import time

_HELD = []


def hold_device(settings):
    """Waits for the lock file `settings['device_lock']`, then holds it until this process ends;
    a no-op without that setting (or when already held)."""
    path = settings.get("device_lock")
    if path and not _HELD:
        handle = open(path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
        fcntl.flock(handle, fcntl.LOCK_EX)
        _HELD.append((handle, time.time()))  # the lock goes with the process


def held_since():
    """Wall-clock time this process got the lock, or None (for the report: timed parts must
    not overlap)."""
    return _HELD[0][1] if _HELD else None
