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
    """A tower's loss became NaN or infinite; the message names the step and the towers."""

    def __init__(self, step, tower_losses, last_checkpoint):
        self.step = step
        self.bad_towers = [i for i, value in enumerate(tower_losses) if not math.isfinite(value)]
        values = ", ".join(f"tower_{i} = {value:.4g}" for i, value in enumerate(tower_losses))
        kept = (f"the last good checkpoint is {last_checkpoint}" if last_checkpoint
                else "no checkpoint was written")
        towers = ", ".join(f"tower_{i}" for i in self.bad_towers)
        super().__init__(f"loss is not finite at step {step} in {towers} ({values}); training "
                         f"stopped and {kept}. Lower --initial_learning_rate or check the data.")


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """Cadences and limits of the loop (0 turns a step or seconds cadence off)."""
    train_dir: str
    max_steps: int
    batch_size: int
    log_every_n_steps: int = 10
    save_summaries_steps: int = 20
    save_summaries_secs: float = 0
    save_checkpoint_steps: int = 1000
    save_interval_secs: float = 600
    keep_checkpoints: int = 5


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

    Resumes from the newest checkpoint in `settings.train_dir` when there is one; otherwise
    initializes the variables and then runs the initializer that `make_initializer()` (called
    while the graph is built) returned, e.g. to restore a pretrained model. Runs each step
    with the train op of the plan's current stage. Saves every `save_checkpoint_steps` /
    `save_interval_secs`, at the end and on SIGINT/SIGTERM; never after a non-finite loss
    (NonFiniteLossError is raised and the last good checkpoint stays the newest).

    Args:
      build_graph: callable() -> train_graph.TrainGraph, called inside a fresh default graph.
      session_config: tf.compat.v1.ConfigProto (devices for the towers).
      settings: LoopSettings.
      make_initializer: optional callable() -> callable(session), for a fresh start only.
      log: callable(str) for progress lines.
      replica: Replica; None trains on this machine alone. A non-chief replica neither reads
        nor writes `train_dir`: it waits for the chief to initialize the shared variables.

    Returns:
      TrainResult.
    """
    replica = replica or Replica()
    if replica.is_chief:
        os.makedirs(settings.train_dir, exist_ok=True)
    checkpoint = checkpoints.latest_checkpoint(settings.train_dir) if replica.is_chief else None
    graph = tf.Graph()
    with graph.as_default(), replica.device_scope():
        train_graph = build_graph()
        saved_variables = {v.op.name: v for v in tf1.global_variables()}
        saver = tf1.train.Saver(saved_variables, max_to_keep=settings.keep_checkpoints,
                                name="saver")
        if not replica.is_chief:
            start = replica.wait_until_ready
        elif checkpoint:
            start = _prepare_resume(checkpoint, train_graph, saved_variables, log)
        else:
            start = _prepare_fresh_start(train_graph, make_initializer)
        local_init = tf1.local_variables_initializer()
        replica.build(train_graph)
        graph.finalize()
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
            return _train_until(end_step, session, saver, train_graph, settings, step,
                                checkpoint, replica, log)
        finally:
            replica.finish(session)


def _train_until(end_step, session, saver, train_graph, settings, step, checkpoint, replica,
                 log):
    settings = dataclasses.replace(settings, max_steps=end_step)
    if replica.is_chief:
        writer = tf1.summary.FileWriter(settings.train_dir,
                                        session.graph if checkpoint is None else None)
    else:
        writer = _NoSummaryWriter()
        settings = dataclasses.replace(settings, save_summaries_steps=0, save_summaries_secs=0,
                                       save_checkpoint_steps=0, save_interval_secs=0)
    try:
        return _loop(session, saver, writer, train_graph, settings, step, checkpoint, replica,
                     log)
    finally:
        writer.close()


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


def _loop(session, saver, writer, graph, settings, step, checkpoint, replica, log):
    now = time.time()
    log_cadence = Cadence(settings.log_every_n_steps, start_step=step, start_time=now)
    summary_cadence = Cadence(settings.save_summaries_steps, settings.save_summaries_secs,
                              start_step=step - settings.save_summaries_steps, start_time=now)
    checkpoint_cadence = Cadence(settings.save_checkpoint_steps, settings.save_interval_secs,
                                 start_step=step, start_time=now)
    interval_start, interval_step = now, step
    saved_step = step
    result = TrainResult(step=step, checkpoint=checkpoint)
    stage_index = None
    corrupt_reported = 0
    action = ("saving a checkpoint after this step and stopping" if replica.is_chief
              else "stopping after this step")
    with StopRequest(log, action) as stop:
        while step < settings.max_steps and not stop.requested:
            if graph.plan.stage_index_at(step) != stage_index:
                stage_index = graph.plan.stage_index_at(step)
                log(timestamped(describe_stage(graph, stage_index, settings.max_steps)))
            ops = graph.stages[stage_index]
            want_summary = summary_cadence.due(step + 1, time.time())
            fetches = {"train": ops.train_op, "losses": ops.tower_losses}
            if want_summary:
                fetches["summary"] = ops.summary_op
            try:
                out, step = replica.run_step(session, fetches, step)
            except PeerStopped as ended:
                step = ended.step
                result.stopped_by_peer = step < settings.max_steps
                break
            losses = [float(value) for value in out["losses"]]
            if not all(math.isfinite(value) for value in losses):
                writer.flush()
                raise NonFiniteLossError(step, losses, result.checkpoint)
            result.last_mean_loss = float(np.mean(losses))
            now = time.time()
            if want_summary:
                summary_cadence.mark(step, now)
                writer.add_summary(out["summary"], step)
            if log_cadence.check_and_mark(step, now) or step == settings.max_steps:
                steps_done = step - interval_step
                elapsed = max(now - interval_start, 1e-9)
                examples_per_sec = settings.batch_size * steps_done / elapsed
                log(timestamped(f"step {step}, loss = {result.last_mean_loss:.4f} "
                                f"({examples_per_sec:.1f} examples/sec; "
                                f"{elapsed / steps_done:.3f} sec/batch)"))
                writer.add_summary(tf1.Summary(value=[tf1.Summary.Value(
                    tag="examples_per_sec", simple_value=examples_per_sec)]), step)
                interval_start, interval_step = now, step
                corrupt_reported = _report_corrupt_records(session, graph, corrupt_reported, log)
            if checkpoint_cadence.check_and_mark(step, now):
                replica.before_save(session)
                result.checkpoint = _save(session, saver, settings.train_dir, step)
                saved_step = step
        result.step = step
        if step != saved_step and replica.is_chief:
            replica.before_save(session)
            result.checkpoint = _save(session, saver, settings.train_dir, step)
        result.stopped_by_signal = stop.signal_number
    return result


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


def _save(session, saver, train_dir, step):
    # Saver writes data and index under temporary names and renames them, then rewrites the
    # `checkpoint` state file atomically: an interrupted save never leaves a torn checkpoint.
    return saver.save(session, os.path.join(train_dir, CHECKPOINT_BASENAME), global_step=step,
                      write_meta_graph=False)
