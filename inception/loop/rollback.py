"""What the training loop does once training diverged: set aside the checkpoints written since
the divergence began, then stop or, with --on_nan=rollback, go back to the last healthy
checkpoint (or the weights a fresh run started from) and on with the next batches.

A fresh run with --on_nan=rollback keeps the weights it started from in `<train_dir>/start/`
until its first checkpoint proves healthy (the first step trained from it was sound and it was
not written while the loss climbed); from then on a rollback has that checkpoint or a later one
to go to, so the copy, one checkpoint's space, is deleted. A resumed run never needs it."""

import os

import tensorflow as tf

from common import cli
from common import error_lines
from inception.loop import resume
from inception.run.checkpoint_io import step_of


class Rollbacks:
    """The set-aside and rollback of one run.

    Args:
      session: the loop's session; built: its built_run.BuiltRun (the Saver, the
        step_graph.TrainGraph, the run's start and resume.keeping_input_position's callable).
      run_dir: run.directory.RunDirectory; worker: loop.hooks.WorkerHooks (a non-chief sets
        nothing aside); loop: settings.LoopSettings; log: callable(str).
    """

    def __init__(self, session, built, run_dir, worker, loop, log):
        self.session, self.saver, self.graph = session, built.saver, built.train_graph
        self.run_dir, self.worker, self.loop, self.log = run_dir, worker, loop, log
        self.restart, self.keep_position = built.start, built.keep_position
        self.count = 0
        self.resumed_from = None  # the checkpoint this run started from
        self.start_kept = False  # whether <train_dir>/start/ holds this run's starting weights

    def begin(self, checkpoint):
        """At the start of a run from `checkpoint` (None: a fresh run): a fresh run with
        --on_nan=rollback has saved its starting weights; a resumed one deletes a copy an
        earlier attempt left."""
        self.resumed_from = checkpoint
        if self.worker.is_chief:
            self.start_kept = True
            if checkpoint is not None or self.loop.on_nan != "rollback":
                self.drop_start()

    def mark_verified(self, checkpoint):
        """Records that the first step trained from `checkpoint` was sound; once a checkpoint
        is healthy for good, deletes the starting weights (see the module docstring)."""
        if self.run_dir.health.mark_verified(checkpoint, self.log):
            self.drop_start()

    def drop_start(self):
        """Deletes `<train_dir>/start/` if this run kept it; a failure is one warning line (the
        copy is then only space lost)."""
        if not self.start_kept:
            return
        self.start_kept = False
        start_dir = os.path.dirname(self.run_dir.start_prefix())
        try:
            if tf.io.gfile.isdir(start_dir):
                tf.io.gfile.rmtree(start_dir)
        except (tf.errors.OpError, OSError) as error:
            self.log(f"warning: could not delete {start_dir} "
                     f"({error_lines.file_error_cause(error)}); it holds only the weights "
                     "this run started from: delete it by hand.")

    def set_aside_diverged(self, failed_step, watch):
        """Sets aside every checkpoint newer than the last healthy one after the run diverged
        at `failed_step` (`watch`: the loop's guards.LossWatch); returns (the last healthy
        checkpoint or None, those set aside)."""
        if not self.worker.is_chief:
            return None, []
        healthy = self.run_dir.health.last_healthy(watch.first_bad_weights(failed_step))
        newer = sorted((path for path in self.run_dir.candidates()
                        if healthy is None or step_of(path) > step_of(healthy)), key=step_of)
        if newer:
            self.run_dir.set_aside(newer)
            self.saver.recover_last_checkpoints(self.run_dir.listed())
        return healthy, newer

    def recover(self, diverged, watch):
        """Stops (raising guards.DivergenceError) or rolls back after `diverged` (a
        guards.Diverged); returns (the step rolled back to, the checkpoint restored or None)."""
        loop = self.loop
        healthy, set_aside = self.set_aside_diverged(diverged.step, watch)
        if loop.on_nan != "rollback" or self.count >= loop.max_nan_rollbacks:
            if loop.on_nan == "rollback":
                self.log(f"{self.count} rollback(s) already (--max_nan_rollbacks="
                         f"{loop.max_nan_rollbacks}); stopping.")
            raise diverged.error(healthy, set_aside) from None
        target = self._roll_back_to(healthy)
        if target is None:
            raise diverged.error(healthy, set_aside) from None
        self.count += 1
        watch.restart()
        step = int(self.session.run(self.graph.global_step))
        aside = (f"; set aside {', '.join(os.path.basename(p) for p in set_aside)} (kept as "
                 "<name>.unusable.*)" if set_aside else "")
        self.log(cli.timestamped(
            f"{diverged}; rolled back to {target} (step {step}), skipping the "
            f"{diverged.step - step} batch(es) since (rollback {self.count} of at most "
            f"{loop.max_nan_rollbacks}){aside}."))
        return step, healthy

    def _roll_back_to(self, healthy):
        """Restores `healthy` (None: the weights a fresh run started from), the input going on;
        returns what it restored, in words, or None when nothing healthy can be restored."""
        if healthy is None and not self.start_kept:
            return None  # resumed from an unhealthy checkpoint, or the healthy ones are gone
        if healthy is None or healthy == self.resumed_from:
            self.keep_position(self.session, self.restart)  # restores as at the start
        else:
            try:
                self.keep_position(self.session, lambda s: self.saver.restore(s, healthy))
            except tf.errors.OpError:
                return None  # an older run's checkpoint of another plan: a rerun resumes it
            resume.fill_copies(self.session, self.graph)
        return healthy or "the weights this run started from"
