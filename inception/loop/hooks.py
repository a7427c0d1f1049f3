"""The hooks through which `session_loop.run_training` takes part in training: here the plain
one-machine behaviour, which a cluster worker (distributed/worker.py) overrides."""

import contextlib

import tensorflow as tf

from inception.config import recovery

tf1 = tf.compat.v1


def run_options(timeout_secs=None, metadata=None):
    """RunOptions for a session call: ended after `timeout_secs` (None: no limit), traced when
    `metadata` (a RunMetadata, to pass as the call's run_metadata too) is given."""
    options = tf1.RunOptions()
    if timeout_secs is not None:
        options.timeout_in_ms = max(1, int(timeout_secs * 1000))
    if metadata is not None:
        options.trace_level = tf1.RunOptions.SOFTWARE_TRACE
    return options


class PeerStopped(Exception):
    """Raised by `WorkerHooks.run_step` when the cluster's training ended; `step` is the global step
    it ended at (another task stopped it, or max_steps was reached); `early`: the chief's early
    stopping ended it (nothing went wrong); `signal_number`: a signal to another task ended it
    (SIGTERM: a preemption, so every task exits with the restart code), None otherwise."""

    def __init__(self, step, early=False, signal_number=None):
        super().__init__(f"training ended by another task at step {step}")
        self.step = step
        self.early = early
        self.signal_number = signal_number

    @classmethod
    def for_reasons(cls, step, reasons):
        """PeerStopped at `step` for the STOP_REASONS the other tasks gave (first_signal wins;
        early stopping only when no signal came)."""
        number = recovery.first_signal(reasons)
        return cls(step, early=number is None and "early" in reasons, signal_number=number)


class WorkerHooks:
    """How `run_training` takes part in training: the single-machine behaviour.

    distributed.ClusterWorker (beside parameter servers) and distributed.CollectiveWorker (an
    all-reduce between the workers) override these hooks for one worker task of a cluster
    (synchronous updates, only the chief writing files); every hook here is the plain
    one-machine step.
    """
    is_chief = True

    def device_scope(self):
        """Context manager around the whole graph build (places variables)."""
        return contextlib.nullcontext()

    def build(self, train_graph):
        """Adds the worker's own ops to the default graph, after the training graph."""
        del train_graph

    def open_session(self, graph, session_config):
        """A tf.compat.v1.Session running `graph`."""
        return tf1.Session(graph=graph, config=session_config)

    def wait_until_ready(self, session):
        """Non-chief only: waits for the chief to initialize the model; returns the step."""
        raise NotImplementedError("only a non-chief worker waits for the chief")

    def begin(self, session):
        """Runs once the variables are initialized or restored and the local ones too."""
        del session

    def run_step(self, session, fetches, step, metadata=None):
        """Runs one training step (traced into `metadata`, a RunMetadata, when given); returns
        (fetched values, the step reached)."""
        return session.run(fetches, options=run_options(metadata=metadata),
                           run_metadata=metadata), step + 1

    def agree_to_stop(self, signal_number, early):
        """Whether the loop stops before its next step, where this task wants to (a signal
        `signal_number` arrived, or `early` stopping by validation): at once here; a cluster worker
        whose peers must stop at the same step may ask for one more step first
        (distributed/collective.py)."""
        return signal_number is not None or early

    def before_save(self, session):
        """Runs before each checkpoint (may raise to refuse it)."""
        del session

    def finish(self, session):
        """Runs when the loop ends, however it ends (best effort, must not raise)."""
        del session


class TimedWorkerHooks(WorkerHooks):
    """The one-machine hooks with a limit on each step: a step that has not ended after
    `timeout_secs` (the first of a start, which builds and warms up everything, gets
    `first_step_extra_secs` more) ends training with the error `make_error(step, waited_secs)`
    returns. For an input that can stop arriving (inputs/service.py), where a read would wait
    for ever. `watch`: None, or callable(step, first) -> a context manager around the step
    after `step` (`first`: the start's first step) that ends one waiting for an input found
    gone sooner (loop/liveness.py)."""

    def __init__(self, timeout_secs, first_step_extra_secs, make_error, watch=None):
        self.timeout_secs, self.extra_secs = timeout_secs, first_step_extra_secs
        self.make_error = make_error
        self.watch = watch
        self.steps_run = 0

    def run_step(self, session, fetches, step, metadata=None):
        limit = self.timeout_secs + (0 if self.steps_run else self.extra_secs)
        watched = (self.watch(step, not self.steps_run) if self.watch is not None
                   else contextlib.nullcontext())
        try:
            with watched:
                out = session.run(fetches, options=run_options(limit, metadata),
                                  run_metadata=metadata)
        except tf.errors.DeadlineExceededError:
            raise self.make_error(step, limit) from None
        self.steps_run += 1
        return out, step + 1


class NoSummaryWriter:
    """Stands in for the FileWriter on workers that write no files."""

    def add_summary(self, summary, step):
        del summary, step

    def flush(self):
        pass

    def close(self):
        pass
