"""The loss line the training loop logs every --log_every_n_steps, and the notes that follow it
when something happened since the last one: damaged input records skipped, updates that
gradient clipping clipped, and (once a run) a traced step that waited long for its input
(loop/feed_wait.py; its share is on the loss line of each traced step)."""

import time

from common import cli
from inception.loop import feed_wait
from inception.run import tags


class LossLines:
    """Writes the loss lines of one run of the loop and remembers what its notes reported, so
    that each note says what is new.

    Args:
      train_graph: the step_graph.TrainGraph trained; graph: the tf.Graph holding it.
      log: callable(str); scalar: callable(tag, value, step) writing to TensorBoard.
      max_steps: the run's last step, which always gets a line.
    """

    def __init__(self, train_graph, graph, log, scalar, max_steps):
        self.train_graph, self.log, self.scalar = train_graph, log, scalar
        self.max_steps = max_steps
        self.wait_probe = feed_wait.InputWaitProbe(graph)
        self.corrupt = self.clipped = 0
        self.input_bound_noted = False

    def trace_for(self, step, cadences):
        """A RunMetadata for the update from `step` when its input wait is to be measured
        (feed_wait.InputWaitProbe.metadata), else None; give it to `record` after the step."""
        return self.wait_probe.metadata(step + 1, self._due(step + 1, cadences, time.time()),
                                        last=step + 1 == self.max_steps)

    def record(self, metadata):
        """Takes the input wait of a step traced with `trace_for`'s metadata (None: none)."""
        self.wait_probe.record(metadata)

    def maybe_log(self, session, step, cadences, loss):
        """The loss line of `step` (mean loss `loss`) and its notes when a line is due; returns
        whether one was logged."""
        now = time.time()
        if not self._due(step, cadences, now):
            return False
        cadences.log.mark(step, now)
        updates = max(step - cadences.interval_step, 1)
        elapsed = max(now - cadences.interval_start, 1e-9)
        examples_per_sec = self.train_graph.examples_per_step * updates / elapsed
        share = self.wait_probe.take()
        waited = "" if share is None else f"; input wait {share:.0%}"
        self.log(cli.timestamped(f"step {step}, loss = {loss:.4f} ({examples_per_sec:.1f} "
                                 f"examples/sec; {elapsed / updates:.3f} sec/batch{waited})"))
        self.scalar(tags.EXAMPLES_PER_SEC, examples_per_sec, step)
        if share is not None:
            self.scalar(tags.INPUT_WAIT, share, step)
        cadences.interval_start, cadences.interval_step = now, step
        self._notes(session, updates, share)
        return True

    def _due(self, step, cadences, now):
        """Whether `step` gets a loss line: the log cadence's, and the run's last step."""
        return cadences.log.due(step, now) or step == self.max_steps

    def _notes(self, session, updates, share):
        """Logs the counts that grew since the last line; `updates`: the updates since then."""
        fetches = {"corrupt": self.train_graph.corrupt_records}
        if self.train_graph.clipped_updates is not None:
            fetches["clipped"] = self.train_graph.clipped_updates
        counts = {name: int(value) for name, value in session.run(fetches).items()}
        if counts["corrupt"] > self.corrupt:
            self.log(f"note: {counts['corrupt']} damaged input record(s) skipped so far (named "
                     f"above; {tags.CORRUPT_RECORDS} in TensorBoard; --strict_input stops "
                     "instead).")
        self.corrupt = counts["corrupt"]
        clipped = counts.get("clipped", 0)
        if clipped > self.clipped:
            self.log(f"note: --clip_gradient_norm clipped {clipped - self.clipped} of the last "
                     f"{updates} update(s), {clipped} in this run ({tags.CLIPPED_UPDATES} in "
                     "TensorBoard).")
        self.clipped = clipped
        if share is not None and share >= feed_wait.INPUT_BOUND_SHARE and \
                not self.input_bound_noted:
            self.log(feed_wait.input_bound_note(share))
            self.input_bound_noted = True
