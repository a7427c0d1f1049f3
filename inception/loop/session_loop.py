"""The training loop: session, resume, logging, summaries, NaN check, checkpoints, signals.

It runs a `TrainGraph` built by a callable (so tests can run the real loop on small models)
and owns everything with side effects: files in `train_dir`, the log, the run's wall clock."""

import dataclasses
import gc
import math
import time

import numpy as np
import tensorflow as tf

from common import cli
from inception.loop import built_run
from inception.loop import guards
from inception.loop import log_notes
from inception.loop import profiling
from inception.loop import hooks as hooks_lib
from inception.loop import rollback
from inception.loop import first_step
from inception.loop.cadence import LoopCadences
from inception.loop.stop_request import StopRequest
from inception.run import tags
from inception.run import health
from inception.run.directory import RunDirectory
from inception.run.health import SaveRecord
from inception.step import step_graph as step_graph_lib

tf1 = tf.compat.v1


@dataclasses.dataclass
class TrainResult:
    """How a run ended: its last step, last checkpoint, and the signal that stopped it if any.

    stopped_by_peer: another task of a cluster ended the run before max_steps (distributed);
    peer_signal: the signal to another task that ended it, if that is what did.
    stopped_early: early stopping ended it (no better validation for a while, or the target
    accuracy reached); last_validation: the last validation's scoring.EvalResult (or None).
    """
    step: int
    checkpoint: str = None
    stopped_by_signal: int = None
    last_mean_loss: float = float("nan")
    stopped_by_peer: bool = False
    peer_signal: int = None
    stopped_early: bool = False
    last_validation: object = None


@dataclasses.dataclass(frozen=True)
class LoopCompanions:
    """What runs beside the loop: `validation` (in_training.TrainingValidation: scores the
    checkpoints it is due for, may stop the run early); `startup` (first_step.StartupClock)."""
    validation: object = None
    startup: object = None


def run_training(build_graph, session_config, loop, make_initializer=None, log=print,
                 worker=None, companions=LoopCompanions()):
    """Builds the graph with `build_graph()` and trains until `loop.max_steps`.

    Resumes from the newest checkpoint in `loop.train_dir` that restores and holds finite
    values (each one skipped is named in the log, none deleted); otherwise initializes the
    variables, then runs `make_initializer()`'s initializer (made while the graph is built;
    e.g. a pretrained model's restore). Each step runs the train op of the plan's current stage
    and checks the towers' losses and gradient norms. Saves every `save_checkpoint_steps` /
    `save_interval_secs`, at the end and on SIGINT/SIGTERM, each time after checking that every
    variable is finite. When training diverges, the checkpoints written since the divergence
    began are set aside (run.health.HealthRecords.last_healthy) and it stops with
    guards.DivergenceError naming them and the last healthy one, or, with
    `loop.on_nan='rollback'`, goes back to the last healthy checkpoint (or the weights a fresh
    run started from) and on with the next batches.

    Args:
      build_graph: callable() -> step_graph.TrainGraph, called inside a fresh default graph.
      session_config: tf.compat.v1.ConfigProto (devices for the towers); log: callable(str).
      loop: settings.LoopSettings, its max_steps filled (settings.with_defaults).
      make_initializer: optional callable() -> callable(session), for a fresh start only.
      worker: WorkerHooks; None trains on this machine alone. A non-chief worker neither reads
        nor writes `train_dir`: it waits for the chief to initialize the shared variables.
      companions: LoopCompanions: validation, and the start-up clock.

    Returns TrainResult. Raises guards.DivergenceError, and checkpoint_io.CheckpointError
    when no checkpoint restores or one cannot be written.
    """
    worker = worker or hooks_lib.WorkerHooks()
    companions = dataclasses.replace(companions,
                                     startup=companions.startup or first_step.StartupClock())
    run_dir = RunDirectory(loop.train_dir)
    checkpoint = None
    if worker.is_chief:
        tf.io.gfile.makedirs(loop.train_dir)
        run_dir.remove_interrupted_saves(log)
        checkpoint = run_dir.newest_usable(log, set_aside=True)
    built = built_run.build_run(build_graph, loop, worker, checkpoint,
                                make_initializer, log)
    companions.startup.mark("graph")
    # The graphs' objects live as long as the run: frozen, the collector stops rescanning them
    # after work that makes many short-lived objects (the demo: 0.383 -> 0.365 s a step).
    gc.collect()
    gc.freeze()
    try:
        return _train_built(built, session_config, loop, checkpoint, worker, log,
                            companions)
    finally:
        gc.unfreeze()


def _train_built(built, session_config, loop, checkpoint, worker, log, companions):
    for name in built.train_graph.skipped_variables:
        log(f"note: no loss reaches variable {name}; it is left out of the update.")
    end_step = min(loop.max_steps, built.train_graph.plan.total_steps or loop.max_steps)
    with worker.open_session(built.graph, session_config) as session:
        try:
            step = built_run.start_session(session, built, checkpoint, worker, log)
            companions.startup.mark("session and restore")
            if step >= end_step:
                log(f"{loop.train_dir} is already at step {step}, the end of this run "
                    f"(--max_steps={loop.max_steps}); nothing to train. Raise --max_steps "
                    "or use a new --train_dir.")
                return TrainResult(step=step, checkpoint=checkpoint)
            loop = _Loop(session, built, dataclasses.replace(loop, max_steps=end_step),
                         worker, log, companions)
            return loop.run(step, checkpoint)
        finally:
            worker.finish(session)


class _Loop:
    """One run of the loop over an open session: steps, logs, summaries, checks, saves."""

    def __init__(self, session, built, loop, worker, log, companions):
        self.session, self.saver, self.graph = session, built.saver, built.train_graph
        validation, self.clock_of_start = companions.validation, companions.startup
        self.loop, self.worker, self.log = loop, worker, log
        self.validation, self.health = validation, built.health
        self.run_dir = RunDirectory(loop.train_dir)
        self.writer = hooks_lib.NoSummaryWriter()
        self.watch = guards.LossWatch()
        self.rollbacks = rollback.Rollbacks(session, built, self.run_dir, worker, loop,
                                            log)
        self.unverified = None  # the newest checkpoint whose first step has not run yet
        self.last_loss = self.last_norm = float("nan")
        self.profiler = profiling.StepProfiler(
            loop.profile_steps if worker.is_chief else None, loop.train_dir, log)
        self.lines = log_notes.LossLines(built.train_graph, session.graph, log, self._scalar,
                                         loop.max_steps)

    def run(self, step, checkpoint):
        """Trains from `step` to loop.max_steps (or a stop request); returns TrainResult."""
        self.rollbacks.begin(checkpoint)
        self.unverified = checkpoint
        self.clock = health.RunClock(self.run_dir, resumed=checkpoint is not None)
        if self.worker.is_chief:
            self.writer = tf1.summary.FileWriter(self.loop.train_dir)
            if checkpoint is None:  # the Graphs tab's; FileWriter(graph=) writes it twice
                self.writer.add_graph(self.session.graph)
            self.writer.add_summary(tags.layout_summary(), step)
        else:
            self.loop = dataclasses.replace(
                self.loop, save_summaries_steps=0, save_summaries_secs=0,
                save_checkpoint_steps=0, save_interval_secs=0)
        try:
            return self._train(step, TrainResult(step=step, checkpoint=checkpoint))
        finally:
            self.profiler.stop()
            self.writer.close()

    def _train(self, step, result):
        now = time.time()
        cadences = LoopCadences(self.loop, step, now)
        saved_step, stage_index, early = step, None, False
        action = ("saving a checkpoint after this step and stopping" if self.worker.is_chief
                  else "stopping after this step")
        with StopRequest(self.log, action) as stop:
            while step < self.loop.max_steps and \
                    not self.worker.agree_to_stop(
                        stop.signal_number if stop.requested else None, early):
                if self.graph.plan.stage_index_at(step) != stage_index:
                    stage_index = self.graph.plan.stage_index_at(step)
                    self.log(cli.timestamped(step_graph_lib.describe_stage(
                        self.graph, stage_index, self.loop.max_steps, step)))
                try:
                    step, ended = self._step(step, stage_index, cadences, result)
                    if ended:
                        break
                    self._maybe_log(step, cadences, result)
                    self.clock_of_start.first_step_ended(self.log)
                    validate = self.validation is not None and self.validation.due(step)
                    if cadences.checkpoint.check_and_mark(step, time.time()) or validate:
                        result.checkpoint, saved_step = self._save(step), step
                    early = early or (validate and self._validate(result, cadences))
                except guards.Diverged as diverged:
                    step = saved_step = self._recover(diverged, result)
                    cadences.restart(step, time.time())
            result.step = step
            if step != saved_step and self.worker.is_chief:
                try:
                    result.checkpoint = self._save(step)
                except guards.Diverged as diverged:
                    raise diverged.error(*self.rollbacks.set_aside_diverged(
                        diverged.step, self.watch)) from None
            if self.validation is not None and not stop.requested and \
                    self.validation.last_step != step:
                self._validate(result, cadences)
            result.stopped_by_signal = stop.signal_number
        return result

    def _validate(self, result, cadences):
        """Validates the checkpoint just saved; returns whether early stopping ends the run."""
        self.writer.flush()
        started = time.time()
        result.stopped_early = self.validation.validate(result.checkpoint, self.clock.seconds())
        result.last_validation = self.validation.last_result
        cadences.pause(time.time() - started)
        return result.stopped_early

    def _step(self, step, stage_index, cadences, result):
        """One step; returns (the step reached, whether the cluster ended training)."""
        ops = self.graph.stages[stage_index]
        want_summary = cadences.summary.due(step + 1, time.time())
        fetches = {"train": ops.train_op, "losses": ops.tower_losses,
                   "norms": ops.tower_gradient_norms}
        if want_summary:
            fetches["summary"] = ops.summary_op
        metadata = self.lines.trace_for(step, cadences)
        try:
            with self.profiler.around_update(step):
                out, step = self.worker.run_step(self.session, fetches, step, metadata)
        except hooks_lib.PeerStopped as ended:
            result.stopped_by_peer = ended.step < self.loop.max_steps
            result.stopped_early = ended.early
            result.peer_signal = ended.signal_number
            return ended.step, True
        self.lines.record(metadata)
        losses = [float(value) for value in out["losses"]]
        norms = [float(value) for value in out["norms"]]
        if not all(math.isfinite(value) for value in losses) or (
                not self.graph.loss_scaled and not all(math.isfinite(v) for v in norms)):
            self.writer.flush()
            raise guards.Diverged(step, losses, norms)
        self.last_loss, self.last_norm = float(np.mean(losses)), max(norms)
        result.last_mean_loss = self.last_loss
        self._watch_loss(step, result)
        if want_summary:
            cadences.summary.mark(step, time.time())
            self.writer.add_summary(out["summary"], step)
            self._scalar(tags.SMOOTHED_LOSS, self.watch.smoothed, step)
        return step, False

    def _watch_loss(self, step, result):
        warning = self.watch.add(step, result.last_mean_loss)
        if self.unverified and self.watch.sound(result.last_mean_loss):
            self.rollbacks.mark_verified(self.unverified)
        self.unverified = None
        if warning is None:
            return
        if self.loop.on_divergence == "stop":
            self.writer.flush()
            healthy, set_aside = self.rollbacks.set_aside_diverged(step + 1, self.watch)
            raise guards.DivergenceError(
                f"{warning} Training stopped (--on_divergence=stop); "
                f"{guards.kept(healthy, set_aside)}.")
        self.log(cli.timestamped(f"warning: {warning}"))

    def _maybe_log(self, step, cadences, result):
        """The loss line when due, and the notes that follow it (log_notes.LossLines)."""
        if self.lines.maybe_log(self.session, step, cadences, result.last_mean_loss) and \
                self.worker.is_chief:
            self.clock.record(step)

    def _scalar(self, tag, value, step):
        self.writer.add_summary(tf1.Summary(value=[tf1.Summary.Value(
            tag=tag, simple_value=value)]), step)

    def _save(self, step):
        """Checks every variable, then writes the checkpoint of `step` and what the loop knew of
        it (run.health.SaveRecord); returns its path."""
        self.worker.before_save(self.session)
        bad = self.health.non_finite(self.session)
        if bad:
            raise guards.Diverged(step, variables=bad)
        path = self.run_dir.save(self.saver, self.session, step, self.health.checkpoint_bytes)
        if self.worker.is_chief:
            self.run_dir.health.record_save(path, SaveRecord(
                step=step, loss=self.last_loss, gradient_norm=self.last_norm,
                smoothed_loss=self.watch.smoothed, climbing=self.watch.climbing), self.log)
        self.unverified = path
        return path

    def _recover(self, diverged, result):
        """Stops (raising guards.DivergenceError) or rolls back to the last healthy checkpoint
        (rollback.Rollbacks); returns the step rolled back to."""
        step, result.checkpoint = self.rollbacks.recover(diverged, self.watch)
        self.unverified = None
        self._scalar(tags.NAN_ROLLBACKS, self.rollbacks.count, diverged.step)
        self.writer.flush()
        return step
