"""Turns SIGINT/SIGTERM into a polite request to stop at the next safe point."""

import signal

from common import signals


class StopRequest:
    """Context manager: while inside, the first SIGINT/SIGTERM sets `signal_number` instead of
    killing the process; a second one ends the process at once (exit status 128 + signal),
    even in the middle of a TensorFlow call. A save cut short that way leaves only temporary
    files, which the next run removes: the previous checkpoint stays the newest.

    Outside the main thread signals cannot be caught; the request then never fires. In a
    process that called common.signals.handle_signals(), the second signal stops it at once
    even in the middle of one long TensorFlow call (see there); the handler's own exit below
    covers processes that did not.

    The handler only records the signal: the log line is written by the first `requested`
    check after it, in the program's own flow. Printing from the handler itself could land in
    the middle of a print of the main code and fail ("reentrant call inside <stdout>").
    """

    def __init__(self, log, action="stopping"):
        self.signal_number = None
        self._log = log
        self._action = action
        self._previous = {}
        self._announced = False

    def __enter__(self):
        signals.new_phase()
        for number in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[number] = signal.signal(number, self._handle)
            except ValueError:
                pass
        return self

    @property
    def requested(self):
        """True once a signal arrived; the first such check logs what happens next."""
        if self.signal_number is None:
            return False
        if not self._announced:
            self._announced = True
            self._log(f"{signal.Signals(self.signal_number).name} received: {self._action} "
                      "(send it again to stop at once).")
        return True

    def _handle(self, number, frame):
        del frame
        if self.signal_number is None:
            self.signal_number = number
            return
        signals.stop_at_once(number, "rerun the same command to resume from the last "
                                     "checkpoint")

    def __exit__(self, *exc_info):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
