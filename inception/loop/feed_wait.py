"""How much of a training step waits for its input: a step before a loss line is traced.

The last step before a loss line runs with TensorFlow's step statistics (RunOptions'
SOFTWARE_TRACE and a RunMetadata), which time every op of the step; at most one step in
TRACE_GAP_STEPS is traced (and the run's last), so a loss line every step does not trace them
all. The wait is the time the input iterator's read (IteratorGetNext) runs while no other op
does: on CPU towers everything after the read needs its batch, so the whole read is waited
for; with GPU towers the read stages the next step's batch while the towers compute
(parallel/gpu_prefetch.py), and only what it takes beyond them counts. Its share of the traced
step goes on that loss line and into TensorBoard, and a note follows when it passes
INPUT_BOUND_SHARE. A run with no input iterator (--synthetic_input) traces nothing.
"""

import tensorflow as tf

tf1 = tf.compat.v1

READ_OP_TYPES = ("IteratorGetNext", "IteratorGetNextSync")
# The share of a step above which the input-bound note follows a loss line: beyond a tenth,
# a faster input would speed training by more than run-to-run noise on a shared machine.
INPUT_BOUND_SHARE = 0.10
# A traced step takes longer than another: on the demo on 2 cores 0.35 s against 0.26 (every
# op's times are collected; bench/input_at_scale.py), so at most one step in this many is
# traced: about 0.3% of a run's time.
TRACE_GAP_STEPS = 100


class InputWaitProbe:
    """Traces the steps it is asked to and keeps the newest traced step's input-wait share."""

    def __init__(self, graph):
        self.readers = frozenset(op.name for op in graph.get_operations()
                                 if op.type in READ_OP_TYPES)
        self.share = self.traced_step = None

    def metadata(self, step, due, last):
        """A RunMetadata for the update that reaches `step`, when a loss line is `due` after it,
        the graph reads input, and it is the run's `last` or TRACE_GAP_STEPS after the last
        traced one (or before it: a rollback); else None. Pass it to WorkerHooks.run_step, then to
        `record`."""
        if not (due and self.readers):
            return None
        if not last and self.traced_step is not None and \
                0 <= step - self.traced_step < TRACE_GAP_STEPS:
            return None
        self.traced_step = step
        return tf1.RunMetadata()

    def record(self, metadata):
        """Keeps the share of the step traced into `metadata` (None: nothing traced)."""
        if metadata is not None:
            self.share = waiting_share(metadata.step_stats, self.readers)

    def take(self):
        """The newest traced step's share (None if none was traced since the last take)."""
        share, self.share = self.share, None
        return share


def waiting_share(step_stats, readers):
    """The share of the step in `step_stats` during which only the ops named in `readers` ran."""
    spans = [(node.all_start_micros, node.all_start_micros + node.all_end_rel_micros,
              node.node_name in readers)
             for device in step_stats.dev_stats for node in device.node_stats]
    if not spans:
        return 0.0
    length = max(end for _, end, _ in spans) - min(start for start, _, _ in spans)
    busy = _merged([(start, end) for start, end, read in spans if not read])
    waited = sum(end - start - _overlap(start, end, busy)
                 for start, end, read in spans if read)
    return min(max(waited / length, 0.0), 1.0) if length > 0 else 0.0


def _merged(intervals):
    """Sorted, non-overlapping intervals covering the same time as `intervals`."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _overlap(start, end, merged):
    """How much of [start, end] the merged intervals cover."""
    return sum(max(0, min(end, high) - max(start, low)) for low, high in merged)


def input_bound_note(share):
    """The note after a loss line whose traced step waited `share` (>= INPUT_BOUND_SHARE) of
    its time for input."""
    return (f"note: the traced step waited {share:.0%} of its time for input: this run is "
            "input-bound. More CPU cores for decoding and augmenting, or the tf.data service "
            "on other machines (--input_service; docs/monitoring.md), would "
            "feed the towers faster; --synthetic_input times the step alone.")
