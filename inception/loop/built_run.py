"""A training run's graph, finalized before its session opens, and how the session starts:
the saver, the start (fresh, resumed, or waiting for the chief), the variable checks, and the
input started once the variables hold their values."""

import dataclasses
import os

import tensorflow as tf

from common import cli
from inception.loop import guards
from inception.loop import resume
from inception.parallel import copies as copies_lib
from inception.run import health
from inception.run.directory import RunDirectory
from inception.step import step_graph as step_graph_lib

tf1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class BuiltRun:
    """The finalized graph of a run and what starts, checks and saves it."""
    graph: tf.Graph
    train_graph: step_graph_lib.TrainGraph
    saver: tf1.train.Saver
    start: object  # callable(session) -> step
    health: guards.VariableHealth
    local_init: tf.Operation
    keep_position: object  # callable(session, restore): resume.keeping_input_position


def build_run(build_graph, loop, worker, checkpoint, make_initializer, log):
    """The run's BuiltRun: its graph (`build_graph()`, inside `worker`'s device scope), the
    Saver of every saved variable, and how it starts: resumed from `checkpoint`, fresh (then
    `make_initializer()`'s initializer runs), or, on a non-chief worker, by waiting for the
    chief. `loop`: settings.LoopSettings."""
    graph = tf.Graph()
    with graph.as_default(), worker.device_scope():
        train_graph = build_graph()
        saved_variables = copies_lib.saved_variables(tf1.global_variables())
        # Relative names in TensorFlow's `checkpoint` file: the directory stays usable when it
        # is copied or moved (run/directory.py).
        saver = tf1.train.Saver(
            saved_variables, max_to_keep=loop.keep_checkpoints, name="saver",
            keep_checkpoint_every_n_hours=loop.keep_checkpoint_every_n_hours or 1e6,
            save_relative_paths=True)
        if not worker.is_chief:
            start = worker.wait_until_ready
        elif checkpoint:
            start = resume.prepare_resume(checkpoint, train_graph, saved_variables, log)
        else:
            # Only a rollback reads the starting weights back (loop/rollback.py).
            kept = (RunDirectory(loop.train_dir).start_prefix()
                    if loop.on_nan == "rollback" else None)
            start = resume.prepare_fresh_start(train_graph, make_initializer, saved_variables,
                                               kept)
        health = guards.VariableHealth(saved_variables)
        local_init = tf1.local_variables_initializer()
        keep_position = resume.keeping_input_position(train_graph)
        worker.build(train_graph)
        graph.finalize()
    if checkpoint:
        saver.recover_last_checkpoints(RunDirectory(loop.train_dir).listed())
    return BuiltRun(graph, train_graph, saver, start, health, local_init, keep_position)


def start_session(session, built, checkpoint, worker, log):
    """Initializes or restores, starts the input (the first batch staged on the devices) and
    the worker; returns the step training continues from."""
    step = built.start(session)
    if checkpoint:
        reached = health.recorded_progress(RunDirectory(os.path.dirname(checkpoint)))
        redone = (f"; the run had reached step {reached}, so the {reached - step} step(s) "
                  "since that checkpoint are trained again" if reached and reached > step
                  else "")
        log(cli.timestamped(f"resumed from {checkpoint} (step {step}){redone}"))
    resume.start_input(session, built.train_graph, built.local_init)
    worker.begin(session)
    return step
