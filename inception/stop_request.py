"""Turns SIGINT/SIGTERM into a polite request to stop at the next safe point."""

import signal


class StopRequest:
    """Context manager: while inside, the first SIGINT/SIGTERM sets `signal_number` instead of
    killing the process; a second one gets the previous behaviour (stop at once).

    Outside the main thread signals cannot be caught; the request then never fires.
    """

    def __init__(self, log, action="stopping"):
        self.signal_number = None
        self._log = log
        self._action = action
        self._previous = {}

    def __enter__(self):
        for number in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[number] = signal.signal(number, self._handle)
            except ValueError:
                pass
        return self

    @property
    def requested(self):
        """True once a signal arrived."""
        return self.signal_number is not None

    def _handle(self, number, frame):
        del frame
        self.signal_number = number
        self._log(f"{signal.Signals(number).name} received: {self._action} (send it again to "
                  "stop at once).")
        signal.signal(number, self._previous.get(number, signal.SIG_DFL))

    def __exit__(self, *exc_info):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
