"""Where a start's seconds go: the parts of the time from the process's start (or from the
call to training) to the end of the first step, logged in one line after that step.

Every restart of every task pays these seconds again, so the line is there to be read: which
part to cut is whichever is largest (bench/startup.py records them side by side).
"""

import os
import time


def process_age_secs():
    """Seconds since this process started (the Python interpreter, or a launcher it replaced
    by exec), from /proc; None where there is no /proc."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            # The command name (field 2) may hold spaces; the fields after its ')' are fixed.
            fields = stat.read().rsplit(")", 1)[1].split()
        started_ticks = int(fields[19])  # field 22: start time, clock ticks since boot
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started_ticks / os.sysconf(
            "SC_CLK_TCK")
    except (OSError, IndexError, ValueError, AttributeError):
        return None


class StartupClock:
    """The seconds of a start's parts, each from the previous mark to its own.

    `before`: [(part, seconds)] already measured (the process's start up to now, by the entry
    point); the clock counts on from its construction."""

    def __init__(self, before=()):
        self.parts = list(before)
        self.last = time.monotonic()
        self.logged = False

    @classmethod
    def from_process_start(cls, part):
        """A clock whose first part, named `part`, is the time from the process's start to
        now (none where the start is unknown)."""
        age = process_age_secs()
        return cls([] if age is None else [(part, age)])

    def mark(self, part):
        """Ends part `part` now."""
        now = time.monotonic()
        self.parts.append((part, now - self.last))
        self.last = now

    def first_step_ended(self, log):
        """Marks the first step's end and logs the line, on the first call only."""
        if not self.logged:
            self.mark("first step")
            self.logged = True
            log(self.line())

    def line(self):
        """The start-up line: the total and each part, in order."""
        total = sum(seconds for _, seconds in self.parts)
        parts = ", ".join(f"{part} {seconds:.1f} s" for part, seconds in self.parts)
        return f"start-up: {total:.1f} s to the end of the first step ({parts})"
