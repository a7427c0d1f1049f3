"""Traces chosen steps of the training run with TensorFlow's profiler (--profile_steps).

The trace goes to <train_dir>/plugins/profile/<time>/, where TensorBoard's Profile tab (the
profile plugin, pinned in requirements.txt) shows its trace viewer, op statistics and
input-pipeline analysis. Each traced update is marked as a step (TensorFlow's `Trace` with a
step number, as Keras marks its batches), which is what the input-pipeline analysis splits into
"input" and "compute" time. Outside the window nothing is started: a step costs one integer
comparison more.
"""

import contextlib
import os
import shlex

import tensorflow as tf

PROFILE_SUBDIR = os.path.join("plugins", "profile")  # under the log directory, as TensorBoard reads
_NOTHING = contextlib.nullcontext()  # reusable: the steps outside the window build nothing


class StepProfiler:
    """Traces the updates numbered `first` to `last` (the step each one reaches, as the log
    counts) into `logdir`; `steps` None or empty: traces nothing."""

    def __init__(self, steps, logdir, log):
        self.first, self.last = steps if steps else (None, None)
        self.logdir, self.log = logdir, log
        self.tracing = False

    def around_update(self, step):
        """Around the update that takes the run from `step` to step + 1: starts the trace
        before the window's first update, marks each update in it, stops after its last;
        outside the window, a context that does nothing."""
        number = step + 1
        if self.first is None or not self.first <= number <= self.last:
            return _NOTHING
        return self._traced(number)

    @contextlib.contextmanager
    def _traced(self, number):
        if not self.tracing:
            self._start()
        with tf.profiler.experimental.Trace("train", step_num=number, _r=1):
            yield
        if number == self.last:
            self.stop()

    def _start(self):
        self.log(f"profiling steps {self.first} to {self.last} into "
                 f"{os.path.join(self.logdir, PROFILE_SUBDIR)} ...")
        tf.profiler.experimental.start(self.logdir)
        self.tracing = True

    def stop(self):
        """Ends the trace, if one runs (at the window's end, or when the run stops inside it),
        and names where it went."""
        if not self.tracing:
            return
        self.tracing = False
        tf.profiler.experimental.stop()
        self.log(f"profile written to {newest_profile(self.logdir)}: see TensorBoard's "
                 f"Profile tab (bin/tensorboard --logdir={shlex.quote(self.logdir)}).")


def newest_profile(logdir):
    """The newest trace directory under <logdir>/plugins/profile, or that folder if none."""
    root = os.path.join(logdir, PROFILE_SUBDIR)
    runs = sorted(tf.io.gfile.listdir(root)) if tf.io.gfile.isdir(root) else []
    return os.path.join(root, runs[-1].rstrip("/")) if runs else root
