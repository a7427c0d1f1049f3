"""A text progress bar for long work (evaluation, building shards)."""

import sys
import time


class ProgressBar:
    """Shows `done/total` with a rate; redraws in place on a terminal. Elsewhere (a log file)
    it writes a line at each further 10% that comes LOG_INTERVAL_SECS or more after the last
    line, and one when the work is done: a few seconds' work is one line.

    Args:
      total: the amount of work (e.g. images); 0 or None when unknown.
      label: what is counted, e.g. "images".
      stream: where to write (stderr by default, so stdout stays clean for results).
      clock: seconds, for the rate and the log's spacing (time.monotonic).
    """

    WIDTH = 30
    LOG_INTERVAL_SECS = 10.0

    def __init__(self, total, label="items", stream=None, clock=time.monotonic):
        self.total = total or 0
        self.label = label
        self.done = 0
        self._stream = stream or sys.stderr
        self._clock = clock
        self._start = self._last_line = clock()
        self._interactive = hasattr(self._stream, "isatty") and self._stream.isatty()
        self._next_tenth = 1  # of the work, counted in whole tenths (no rounding drift)

    def update(self, amount):
        """Adds `amount` finished units and redraws when useful."""
        self.done += amount
        if self._interactive:
            self._stream.write("\r" + self.line())
            self._stream.flush()
        elif self.total and self.done * 10 >= self._next_tenth * self.total:
            if self.done >= self.total or \
                    self._clock() - self._last_line >= self.LOG_INTERVAL_SECS:
                self._stream.write(self.line() + "\n")
                self._stream.flush()
                self._last_line = self._clock()
            while self._next_tenth * self.total <= self.done * 10:
                self._next_tenth += 1

    def rate(self):
        """Units per second so far."""
        return self.done / max(self._clock() - self._start, 1e-9)

    def line(self):
        """The bar as text, e.g. `[#####     ] 150/300 images (210.4 images/sec)`."""
        if self.total:
            filled = int(self.WIDTH * min(self.done, self.total) / self.total)
            bar = "[" + "#" * filled + " " * (self.WIDTH - filled) + "] "
            count = f"{self.done}/{self.total}"
        else:
            bar, count = "", str(self.done)
        return f"{bar}{count} {self.label} ({self.rate():.1f} {self.label}/sec)"

    def clear(self):
        """Wipes the bar's line on a terminal, so other output can be printed in its place (the
        next update draws it again)."""
        if self._interactive:
            self._stream.write("\r" + " " * len(self.line()) + "\r")
            self._stream.flush()

    def close(self):
        """Ends the bar's line on a terminal."""
        if self._interactive:
            self._stream.write("\n")
            self._stream.flush()
