"""A timer around a TensorFlow call that should end by its own timeout.

TensorFlow's own timers (SecondOrStepTimer, session hooks) schedule work between steps; this
guards a single call that may never return (cancelling a timed-out step can deadlock inside
TensorFlow), so it runs on a thread of its own and calls `on_stuck`, which ends the process.
"""

import contextlib
import threading

from inception.config.recovery import STUCK_GRACE_SECS


class Watchdog:
    """`around(timeout_secs, what)`: calls on_stuck(message) if the call inside has not
    returned STUCK_GRACE_SECS after `timeout_secs`; does nothing when on_stuck is None."""

    def __init__(self, who, on_stuck):
        self._who, self._on_stuck = who, on_stuck

    @contextlib.contextmanager
    def around(self, timeout_secs, what):
        """Context manager around one TensorFlow call."""
        if self._on_stuck is None:
            yield
            return
        limit = timeout_secs + STUCK_GRACE_SECS
        timer = threading.Timer(limit, self._on_stuck, args=(
            f"{self._who}: {what} did not end within {limit:g} s although it should have "
            "timed out; TensorFlow is stuck, so this task exits now. Stop every task and start "
            "them again.",))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
