"""Decides when periodic work is due ("log / summarize / checkpoint now?").

One rule for every cadence, from step counts and/or seconds, instead of scattered `% N` checks;
`LoopCadences` holds the training loop's. Two kinds: a `Cadence` counts from its last mark (so a
log line comes N steps after the last one, wherever a run resumed), an `AlignedCadence` falls on
the global steps that are multiples of N (so validation scores the same steps in a run that was
stopped and resumed as in one that was not, and its results line up across runs).
"""


class Cadence:
    """Due every `every_steps` steps and/or every `every_secs` seconds (0 or None: never by that).

    The first call to `due` after construction counts from `start_step` / `start_time`.
    """

    def __init__(self, every_steps=None, every_secs=None, start_step=0, start_time=0.0):
        self.every_steps = every_steps or 0
        self.every_secs = every_secs or 0
        self._last_step = start_step
        self._last_time = start_time

    def due(self, step, now):
        """True when `every_steps` steps or `every_secs` seconds have passed since the last mark."""
        by_steps = self.every_steps > 0 and step - self._last_step >= self.every_steps
        by_time = self.every_secs > 0 and now - self._last_time >= self.every_secs
        return by_steps or by_time

    def mark(self, step, now):
        """Records that the work was done at `step`, time `now`."""
        self._last_step = step
        self._last_time = now

    def check_and_mark(self, step, now):
        """`due(step, now)`, marking when True."""
        if self.due(step, now):
            self.mark(step, now)
            return True
        return False


class AlignedCadence:
    """Due at the global steps that are multiples of `every_steps` (0 or None: never)."""

    def __init__(self, every_steps):
        self.every_steps = every_steps or 0

    def due(self, step):
        """True when `step` is a positive multiple of `every_steps`."""
        return self.every_steps > 0 and step > 0 and step % self.every_steps == 0


class LoopCadences:
    """When to log, summarize and checkpoint, and where the current log interval began."""

    def __init__(self, loop, step, now):
        self.loop = loop
        self.log = Cadence(loop.log_every_n_steps, start_step=step, start_time=now)
        self.summary = Cadence(loop.save_summaries_steps, loop.save_summaries_secs,
                               start_step=step - loop.save_summaries_steps, start_time=now)
        self.checkpoint = Cadence(loop.save_checkpoint_steps, loop.save_interval_secs,
                                  start_step=step, start_time=now)
        self.interval_start, self.interval_step = now, step

    def pause(self, seconds):
        """Leaves `seconds` of other work (a validation) out of the current log interval's
        examples/sec."""
        self.interval_start += seconds

    def restart(self, step, now):
        """After a rollback: count again from `step`."""
        self.checkpoint.mark(step, now)
        self.log.mark(step, now)
        self.interval_start, self.interval_step = now, step
