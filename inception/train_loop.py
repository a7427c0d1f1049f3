"""The training loop: session, resume, logging, summaries, NaN check, checkpoints, signals.

It runs a `TrainGraph` built by a callable (so tests can run the real loop on small models)
and owns everything with side effects: files in `train_dir` and the log.
"""

import contextlib
import dataclasses
import datetime
import math
import os
import time

import numpy as np
import tensorflow as tf

from inception import checkpoints
from inception import train_graph as train_graph_lib
from inception.cadence import Cadence
from inception.stop_request import StopRequest

tf1 = tf.compat.v1
CHECKPOINT_BASENAME = "model.ckpt"


class NonFiniteLossError(RuntimeError):
    """Training diverged: a tower's loss or update, or a variable, became NaN or infinite. The
    message names the step that did it, the towers and the last good checkpoint."""

    def __init__(self, step, tower_losses, last_checkpoint, tower_gradient_norms=(),
                 variables=()):
        self.step = step
        losses_bad = [i for i, value in enumerate(tower_losses) if not math.isfinite(value)]
        norms_bad = [i for i, value in enumerate(tower_gradient_norms)
                     if not math.isfinite(value)]
        self.bad_towers = losses_bad or norms_bad
        super().__init__(f"{divergence(step, tower_losses, tower_gradient_norms, variables)}; "
                         f"training stopped and {_kept(last_checkpoint)}. Lower "
                         "--initial_learning_rate, check the data, or rerun with "
                         "--on_nan=rollback.")


def divergence(step, tower_losses, tower_gradient_norms=(), variables=()):
    """What went non-finite at `step`, for the log and the error."""
    def towers(values):
        return ", ".join(f"tower_{i}" for i, value in enumerate(values)
                         if not math.isfinite(value))

    def listed(values):
        return ", ".join(f"tower_{i} = {value:.4g}" for i, value in enumerate(values))
    if any(not math.isfinite(value) for value in tower_losses):
        return (f"loss is not finite at step {step} in {towers(tower_losses)} "
                f"({listed(tower_losses)})")
    if any(not math.isfinite(value) for value in tower_gradient_norms):
        return (f"the update of step {step} is not finite in {towers(tower_gradient_norms)} "
                f"(gradient norms: {listed(tower_gradient_norms)})")
    return (f"{len(variables)} variable(s) are not finite at step {step} (e.g. "
            f"{variables[0] if variables else '?'})")


def _kept(last_checkpoint):
    return (f"the last good checkpoint is {last_checkpoint}" if last_checkpoint
            else "no checkpoint was written")


class DivergingError(RuntimeError):
    """The smoothed loss climbed far above where it started (--on_divergence=stop)."""


class LossWatch:
    """The smoothed mean_loss and one warning when it climbs well above its starting value.

    Smoothing is an exponential moving average over about `window` steps (bias-corrected, so
    the first values count fully). The starting value is the run's first loss (an untrained
    network's is the same for every run of a data set; after a resume, the loss it resumed
    at); from `window` steps on, a smoothed loss above `factor` times it is the warning, once
    per run. That is what a too-high learning rate does before the loss turns NaN.
    """

    def __init__(self, window=10, factor=2.0):
        self.window, self.factor = window, factor
        self.smoothed, self.start, self.start_step = None, None, None
        self._average, self._weight, self._count, self.warned = 0.0, 0.0, 0, False

    def add(self, step, loss):
        """Takes the step's mean loss; returns the warning line when it is due, else None."""
        decay = 1.0 - 1.0 / self.window
        self._average = decay * self._average + (1.0 - decay) * loss
        self._weight = decay * self._weight + (1.0 - decay)
        self.smoothed = self._average / self._weight
        self._count += 1
        if self.start is None:
            self.start, self.start_step = loss, step
        if (self.warned or self._count < self.window
                or not self.smoothed > self.factor * self.start):
            return None
        self.warned = True
        return (f"the loss is climbing: smoothed loss {self.smoothed:.4g} at step {step}, "
                f"{self.smoothed / self.start:.1f}x its {self.start:.4g} at step "
                f"{self.start_step}. Lower --initial_learning_rate (a tenth is a good first "
                "try), lengthen --warmup_steps, or pick a rate with --find_learning_rate.")


class _Diverged(Exception):
    """Inside the loop: this step's loss, update or variables are not finite."""

    def __init__(self, step, tower_losses=(), tower_gradient_norms=(), variables=()):
        super().__init__(divergence(step, tower_losses, tower_gradient_norms, variables))
        self.step, self.tower_losses = step, list(tower_losses)
        self.tower_gradient_norms, self.variables = list(tower_gradient_norms), list(variables)

    def error(self, last_checkpoint):
        """The NonFiniteLossError to stop with."""
        return NonFiniteLossError(self.step, self.tower_losses, last_checkpoint,
                                  self.tower_gradient_norms, self.variables)


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """Cadences and limits of the loop (0 turns a step or seconds cadence off).

    keep_checkpoints: the newest this many checkpoints stay (across resumed runs); older ones
      are deleted except one every keep_checkpoint_every_n_hours (0: none kept that way).
    on_nan: 'stop' (raise NonFiniteLossError) or 'rollback' (restore the newest finite
      checkpoint of this run, or its starting point, and go on with the next batches), at most
      max_nan_rollbacks times.
    on_divergence: when the smoothed loss climbs well above its start (LossWatch): 'warn'
      (one line) or 'stop' (DivergingError).
    """
    train_dir: str
    max_steps: int
    batch_size: int
    log_every_n_steps: int = 10
    save_summaries_steps: int = 20
    save_summaries_secs: float = 0
    save_checkpoint_steps: int = 1000
    save_interval_secs: float = 600
    keep_checkpoints: int = 5
    keep_checkpoint_every_n_hours: float = 0
    on_nan: str = "stop"
    max_nan_rollbacks: int = 3
    on_divergence: str = "warn"


@dataclasses.dataclass
class TrainResult:
    """How a run ended: its last step, last checkpoint, and the signal that stopped it if any.

    stopped_by_peer: another task of a cluster ended the run before max_steps (distributed).
    """
    step: int
    checkpoint: str = None
    stopped_by_signal: int = None
    last_mean_loss: float = float("nan")
    stopped_by_peer: bool = False


class PeerStopped(Exception):
    """Raised by `Replica.run_step` when the cluster's training ended; `step` is the global step
    it ended at (another task stopped it, or max_steps was reached)."""

    def __init__(self, step):
        super().__init__(f"training ended by another task at step {step}")
        self.step = step


class Replica:
    """How `run_training` takes part in training: the single-machine behaviour.

    distributed.ClusterWorker overrides these hooks for one worker task of a cluster (shared
    variables, synchronous updates, only the chief writing files); every hook here is the plain
    one-machine step.
    """
    is_chief = True

    def device_scope(self):
        """Context manager around the whole graph build (places variables)."""
        return contextlib.nullcontext()

    def build(self, train_graph):
        """Adds the replica's own ops to the default graph, after the training graph."""
        del train_graph

    def open_session(self, graph, session_config):
        """A tf.compat.v1.Session running `graph`."""
        return tf1.Session(graph=graph, config=session_config)

    def wait_until_ready(self, session):
        """Non-chief only: waits for the chief to initialize the model; returns the step."""
        raise NotImplementedError("only a non-chief replica waits for the chief")

    def begin(self, session):
        """Runs once the variables are initialized or restored and the local ones too."""
        del session

    def run_step(self, session, fetches, step):
        """Runs one training step; returns (fetched values, the step reached)."""
        return session.run(fetches), step + 1

    def before_save(self, session):
        """Runs before each checkpoint (may raise to refuse it)."""
        del session

    def finish(self, session):
        """Runs when the loop ends, however it ends (best effort, must not raise)."""
        del session


class _NoSummaryWriter:
    """Stands in for the FileWriter on replicas that write no files."""

    def add_summary(self, summary, step):
        del summary, step

    def flush(self):
        pass

    def close(self):
        pass


def timestamped(message):
    """`message` prefixed with the local time, as every log line of the loop is."""
    return f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S}: {message}"


def run_training(build_graph, session_config, settings, make_initializer=None, log=print,
                 replica=None):
    """Builds the graph with `build_graph()` and trains until `settings.max_steps`.

    Resumes from the newest checkpoint in `settings.train_dir` that restores and holds finite
    values (each one skipped is named in the log, none deleted); otherwise initializes the
    variables and then runs the initializer that `make_initializer()` (called while the graph
    is built) returned, e.g. to restore a pretrained model. Runs each step with the train op
    of the plan's current stage and checks its towers' losses and gradient norms. Saves every
    `save_checkpoint_steps` / `save_interval_secs`, at the end and on SIGINT/SIGTERM, each time
    after checking that every variable is finite: a checkpoint never holds NaN or Inf. When
    training diverges it stops with NonFiniteLossError naming the step and the last good
    checkpoint, or, with `settings.on_nan='rollback'`, goes back to the newest finite state of
    this run and on with the next batches.

    Args:
      build_graph: callable() -> train_graph.TrainGraph, called inside a fresh default graph.
      session_config: tf.compat.v1.ConfigProto (devices for the towers).
      settings: LoopSettings.
      make_initializer: optional callable() -> callable(session), for a fresh start only.
      log: callable(str) for progress lines.
      replica: Replica; None trains on this machine alone. A non-chief replica neither reads
        nor writes `train_dir`: it waits for the chief to initialize the shared variables.

    Returns:
      TrainResult. Raises NonFiniteLossError, and checkpoints.CheckpointError when no
      checkpoint restores or one cannot be written.
    """
    replica = replica or Replica()
    checkpoint = None
    if replica.is_chief:
        os.makedirs(settings.train_dir, exist_ok=True)
        checkpoints.remove_interrupted_saves(settings.train_dir, log)
        checkpoint = checkpoints.newest_usable_checkpoint(settings.train_dir, log)
    graph = tf.Graph()
    with graph.as_default(), replica.device_scope():
        train_graph = build_graph()
        saved_variables = {v.op.name: v for v in tf1.global_variables()}
        saver = tf1.train.Saver(
            saved_variables, max_to_keep=settings.keep_checkpoints, name="saver",
            keep_checkpoint_every_n_hours=settings.keep_checkpoint_every_n_hours or 1e6)
        if not replica.is_chief:
            start = replica.wait_until_ready
        elif checkpoint:
            start = _prepare_resume(checkpoint, train_graph, saved_variables, log)
        else:
            start = _prepare_fresh_start(train_graph, make_initializer)
        health = _VariableHealth(saved_variables)
        local_init = tf1.local_variables_initializer()
        replica.build(train_graph)
        graph.finalize()
    if checkpoint:
        saver.recover_last_checkpoints(checkpoints.all_checkpoints(settings.train_dir))
    for name in train_graph.skipped_variables:
        log(f"note: no loss reaches variable {name}; it is left out of the update.")
    end_step = min(settings.max_steps, train_graph.plan.total_steps or settings.max_steps)
    with replica.open_session(graph, session_config) as session:
        try:
            step = start(session)
            if checkpoint:
                log(timestamped(f"resumed from {checkpoint} (step {step})"))
            session.run([local_init, train_graph.input_initializer])
            if train_graph.input_fill is not None:
                session.run(train_graph.input_fill)  # the first batch, staged on the devices
            replica.begin(session)
            if step >= end_step:
                log(f"{settings.train_dir} is already at step {step}, the end of this run "
                    f"(--max_steps={settings.max_steps}); nothing to train. Raise --max_steps "
                    "or use a new --train_dir.")
                return TrainResult(step=step, checkpoint=checkpoint)
            loop = _Loop(session, saver, train_graph, dataclasses.replace(
                settings, max_steps=end_step), replica, log, start, health)
            return loop.run(step, checkpoint)
        finally:
            replica.finish(session)


class _VariableHealth:
    """Which saved float variables hold NaN or Inf (checked before every save), and how many
    bytes a checkpoint of them takes."""

    def __init__(self, saved_variables):
        floats = [(name, v) for name, v in sorted(saved_variables.items())
                  if v.dtype.base_dtype.is_floating]
        self.names = [name for name, _ in floats]
        checks = []
        for _, variable in floats:
            with tf.device(variable.device):
                checks.append(tf.reduce_all(tf.math.is_finite(variable)))
        with tf.name_scope("variable_health"):
            self.finite = tf.stack(checks) if checks else tf.constant([], tf.bool)
        self.checkpoint_bytes = sum(
            v.shape.num_elements() * v.dtype.base_dtype.size for v in saved_variables.values())

    def non_finite(self, session):
        """Names of the variables that are not finite now."""
        return [name for name, ok in zip(self.names, session.run(self.finite)) if not ok]


def _prepare_fresh_start(train_graph, make_initializer):
    """Ops for a fresh start: initialize, run the initializer (e.g. a pretrained restore), then
    start every moving average at its variable's value. Returns callable(session) -> step 0."""
    init_op = tf1.global_variables_initializer()
    initialize = make_initializer() if make_initializer else None
    sync = train_graph_lib.sync_averages_op(train_graph.moving_average,
                                            tf1.trainable_variables())

    def start(session):
        session.run(init_op)
        if initialize is not None:
            initialize(session)
        session.run(sync)
        return 0
    return start


def _prepare_resume(checkpoint, train_graph, saved_variables, log):
    """Ops to resume from `checkpoint`. Optimizer state and moving averages the checkpoint
    lacks (the training plan changed, e.g. a head-only run resumed to train everything) start
    fresh; a missing model variable or global step is a CheckpointError.
    Returns callable(session) -> the checkpoint's step."""
    stored = checkpoints.stored_shapes(checkpoint)
    essential = {v.op.name for v in tf1.trainable_variables() + tf1.model_variables()}
    essential.add(train_graph.global_step.op.name)
    missing = sorted(name for name in saved_variables if name not in stored)
    hint = ("the model changed since it was written; use the flags it was trained with, or a "
            "new --train_dir")
    for name in missing:
        if name in essential:
            raise checkpoints.CheckpointError(f"checkpoint {checkpoint} has no variable {name}; "
                                              f"{hint}.")
    present = {name: v for name, v in saved_variables.items() if name in stored}
    checkpoints.check_restorable(checkpoint, present, hint=hint)
    restorer = tf1.train.Saver(present, name="resume")
    init_missing = tf1.variables_initializer([saved_variables[name] for name in missing])
    averages = {train_graph.moving_average.average_name(v): v for v in tf1.trainable_variables()}
    sync = train_graph_lib.sync_averages_op(
        train_graph.moving_average, [averages[name] for name in missing if name in averages])

    def start(session):
        session.run(init_missing)
        restorer.restore(session, checkpoint)
        session.run(sync)
        if missing:
            log(f"note: {len(missing)} optimizer or averaging variables are not in {checkpoint} "
                "(the training plan changed); they start fresh.")
        return int(session.run(train_graph.global_step))
    return start


class _Loop:
    """One run of the training loop over an open session: steps, logs, summaries, the
    divergence checks, rollbacks and checkpoints."""

    def __init__(self, session, saver, graph, settings, replica, log, restart, health):
        self.session, self.saver, self.graph, self.settings = session, saver, graph, settings
        self.replica, self.log, self.restart, self.health = replica, log, restart, health
        self.writer = _NoSummaryWriter()
        self.watch = LossWatch()
        self.rollbacks = 0
        self.saved_this_run = None  # the newest checkpoint this run wrote

    def run(self, step, checkpoint):
        """Trains from `step` to settings.max_steps (or a stop request); returns TrainResult."""
        settings = self.settings
        if self.replica.is_chief:
            self.writer = tf1.summary.FileWriter(
                settings.train_dir, self.session.graph if checkpoint is None else None)
        else:
            settings = self.settings = dataclasses.replace(
                settings, save_summaries_steps=0, save_summaries_secs=0,
                save_checkpoint_steps=0, save_interval_secs=0)
        try:
            return self._train(step, TrainResult(step=step, checkpoint=checkpoint))
        finally:
            self.writer.close()

    def _train(self, step, result):
        now = time.time()
        cadences = _Cadences(self.settings, step, now)
        saved_step, stage_index, corrupt = step, None, 0
        action = ("saving a checkpoint after this step and stopping" if self.replica.is_chief
                  else "stopping after this step")
        with StopRequest(self.log, action) as stop:
            while step < self.settings.max_steps and not stop.requested:
                if self.graph.plan.stage_index_at(step) != stage_index:
                    stage_index = self.graph.plan.stage_index_at(step)
                    self.log(timestamped(describe_stage(self.graph, stage_index,
                                                        self.settings.max_steps)))
                try:
                    step, ended = self._step(step, stage_index, cadences, result)
                    if ended:
                        break
                    corrupt = self._maybe_log(step, cadences, result, corrupt)
                    if cadences.checkpoint.check_and_mark(step, time.time()):
                        result.checkpoint, saved_step = self._save(step), step
                except _Diverged as diverged:
                    step = saved_step = self._recover(diverged, result)
                    cadences.restart(step, time.time())
            result.step = step
            if step != saved_step and self.replica.is_chief:
                try:
                    result.checkpoint = self._save(step)
                except _Diverged as diverged:
                    raise diverged.error(result.checkpoint) from None
            result.stopped_by_signal = stop.signal_number
        return result

    def _step(self, step, stage_index, cadences, result):
        """One step; returns (the step reached, whether the cluster ended training)."""
        ops = self.graph.stages[stage_index]
        want_summary = cadences.summary.due(step + 1, time.time())
        fetches = {"train": ops.train_op, "losses": ops.tower_losses,
                   "norms": ops.tower_gradient_norms}
        if want_summary:
            fetches["summary"] = ops.summary_op
        try:
            out, step = self.replica.run_step(self.session, fetches, step)
        except PeerStopped as ended:
            result.stopped_by_peer = ended.step < self.settings.max_steps
            return ended.step, True
        losses = [float(value) for value in out["losses"]]
        norms = [float(value) for value in out["norms"]]
        if not all(math.isfinite(value) for value in losses) or (
                not self.graph.loss_scaled and not all(math.isfinite(v) for v in norms)):
            self.writer.flush()
            raise _Diverged(step, losses, norms)
        result.last_mean_loss = float(np.mean(losses))
        self._watch_loss(step, result)
        if want_summary:
            cadences.summary.mark(step, time.time())
            self.writer.add_summary(out["summary"], step)
            self._scalar("smoothed_loss", self.watch.smoothed, step)
        return step, False

    def _watch_loss(self, step, result):
        warning = self.watch.add(step, result.last_mean_loss)
        if warning is None:
            return
        if self.settings.on_divergence == "stop":
            self.writer.flush()
            raise DivergingError(f"{warning} Training stopped (--on_divergence=stop); "
                                 f"{_kept(result.checkpoint)}.")
        self.log(timestamped(f"warning: {warning}"))

    def _maybe_log(self, step, cadences, result, corrupt):
        """The loss line when due; returns the damaged-record count reported so far."""
        now = time.time()
        if not (cadences.log.check_and_mark(step, now) or step == self.settings.max_steps):
            return corrupt
        steps_done = max(step - cadences.interval_step, 1)
        elapsed = max(now - cadences.interval_start, 1e-9)
        examples_per_sec = self.settings.batch_size * steps_done / elapsed
        self.log(timestamped(f"step {step}, loss = {result.last_mean_loss:.4f} "
                             f"({examples_per_sec:.1f} examples/sec; "
                             f"{elapsed / steps_done:.3f} sec/batch)"))
        self._scalar("examples_per_sec", examples_per_sec, step)
        cadences.interval_start, cadences.interval_step = now, step
        return _report_corrupt_records(self.session, self.graph, corrupt, self.log)

    def _scalar(self, tag, value, step):
        self.writer.add_summary(tf1.Summary(value=[tf1.Summary.Value(
            tag=tag, simple_value=value)]), step)

    def _save(self, step):
        """Checks every variable, then writes the checkpoint of `step`; returns its path."""
        self.replica.before_save(self.session)
        bad = self.health.non_finite(self.session)
        if bad:
            raise _Diverged(step, variables=bad)
        path = checkpoints.save_checkpoint(
            self.saver, self.session, os.path.join(self.settings.train_dir, CHECKPOINT_BASENAME),
            step, self.health.checkpoint_bytes)
        self.saved_this_run = path
        return path

    def _recover(self, diverged, result):
        """Stops (raising NonFiniteLossError) or rolls back; returns the step rolled back to."""
        settings = self.settings
        if settings.on_nan != "rollback" or self.rollbacks >= settings.max_nan_rollbacks:
            if settings.on_nan == "rollback":
                self.log(f"{self.rollbacks} rollback(s) already (--max_nan_rollbacks="
                         f"{settings.max_nan_rollbacks}); stopping.")
            raise diverged.error(result.checkpoint) from None
        self.rollbacks += 1
        if self.saved_this_run:
            self.saver.restore(self.session, self.saved_this_run)
            target = self.saved_this_run
        else:
            self.restart(self.session)
            target = result.checkpoint or "the weights this run started from"
        step = int(self.session.run(self.graph.global_step))
        self.log(timestamped(
            f"{diverged}; rolled back to {target} (step {step}), skipping the "
            f"{diverged.step - step} batch(es) since (rollback {self.rollbacks} of at most "
            f"{settings.max_nan_rollbacks})."))
        self._scalar("nan_rollbacks", self.rollbacks, diverged.step)
        self.writer.flush()
        return step


class _Cadences:
    """When to log, summarize and checkpoint, and where the current log interval began."""

    def __init__(self, settings, step, now):
        self.settings = settings
        self.log = Cadence(settings.log_every_n_steps, start_step=step, start_time=now)
        self.summary = Cadence(settings.save_summaries_steps, settings.save_summaries_secs,
                               start_step=step - settings.save_summaries_steps, start_time=now)
        self.checkpoint = Cadence(settings.save_checkpoint_steps, settings.save_interval_secs,
                                  start_step=step, start_time=now)
        self.interval_start, self.interval_step = now, step

    def restart(self, step, now):
        """After a rollback: count again from `step`."""
        self.checkpoint.mark(step, now)
        self.log.mark(step, now)
        self.interval_start, self.interval_step = now, step


def _report_corrupt_records(session, graph, reported, log):
    """Logs how many damaged input records were skipped when the count grew; returns it."""
    count = int(session.run(graph.corrupt_records))
    if count > reported:
        log(f"note: {count} damaged input record(s) skipped so far (named above; "
            "input/corrupt_records in TensorBoard; --strict_input stops instead).")
    return count


def describe_stage(graph, index, end_step):
    """One log line: which stage starts, its steps and what it trains."""
    plan, ops = graph.plan, graph.stages[index]
    start = plan.stage_start(index)
    end = end_step if ops.stage.steps is None else min(end_step, start + ops.stage.steps)
    scopes = ", ".join(ops.stage.scopes) if ops.stage.scopes else "all scopes"
    terms = ", ".join(ops.stage.loss_terms) if ops.stage.loss_terms else "all loss terms"
    return (f"stage '{ops.stage.name}' ({index + 1} of {len(plan.stages)}): steps {start}-{end}, "
            f"training {len(ops.variables)} variables ({scopes}; {terms}; "
            f"{ops.stage.optimizer})")
