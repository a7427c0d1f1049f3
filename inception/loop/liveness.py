"""A watch on a step that waits for something outside this process: its input from the tf.data
service, or the other tasks of a cluster.

TensorFlow's own timeout on a step (RunOptions) has to allow for the slowest healthy step, so
it is minutes; but a service or peer that is gone is gone at once. While a step runs longer
than `after_secs`, the watch asks its probe (a callable: why what the step waits for cannot
answer now, or None) every `every_secs`; when `lost_after` answers in a row say it is gone, it
calls `on_lost` with the line to print, which ends the process (cancelling a TensorFlow step
from another thread is not possible, and a process that exits leaves its last checkpoint as
the newest). A blip shorter than the probes' span (20 s by default) ends nothing, and a slow
but reachable service or peer is left to the step's own timeout.
"""

import contextlib
import threading

from inception.config import recovery



class StepWatch:
    """`around(describe)`: a context manager around one step; `describe(reason)` makes the line
    that `on_lost` gets."""

    def __init__(self, probe, on_lost, after_secs=recovery.STEP_PROBE_AFTER_SECS,
                 every_secs=recovery.STEP_PROBE_EVERY_SECS,
                 lost_after=recovery.STEP_LOST_AFTER_PROBES):
        self._probe, self._on_lost = probe, on_lost
        self._after_secs, self._every_secs, self._lost_after = after_secs, every_secs, lost_after

    @contextlib.contextmanager
    def around(self, describe):
        """Watches the step inside until it ends."""
        ended = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(ended, describe), daemon=True,
                                   name="step-watch")
        watcher.start()
        try:
            yield
        finally:
            ended.set()

    def _watch(self, ended, describe):
        if ended.wait(self._after_secs):
            return
        failures = 0
        while True:
            reason = self._probe()
            failures = failures + 1 if reason else 0
            if failures >= self._lost_after and not ended.is_set():
                self._on_lost(describe(reason))
                return
            if ended.wait(self._every_secs):
                return
