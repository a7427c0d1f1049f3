"""A text progress bar for long work (evaluation, building shards)."""

import sys
import time


class ProgressBar:
    """Shows `done/total` with a rate; redraws in place on a terminal, else prints every 10%.

    Args:
      total: the amount of work (e.g. images); 0 or None when unknown.
      label: what is counted, e.g. "images".
      stream: where to write (stderr by default, so stdout stays clean for results).
    """

    WIDTH = 30

    def __init__(self, total, label="items", stream=None):
        self.total = total or 0
        self.label = label
        self.done = 0
        self._stream = stream or sys.stderr
        self._start = time.time()
        self._interactive = hasattr(self._stream, "isatty") and self._stream.isatty()
        self._next_report = 0.1

    def update(self, amount):
        """Adds `amount` finished units and redraws when useful."""
        self.done += amount
        if self._interactive:
            self._stream.write("\r" + self.line())
            self._stream.flush()
        elif self.total and self.done >= self._next_report * self.total:
            self._stream.write(self.line() + "\n")
            self._stream.flush()
            while self._next_report * self.total <= self.done:
                self._next_report += 0.1

    def rate(self):
        """Units per second so far."""
        return self.done / max(time.time() - self._start, 1e-9)

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
