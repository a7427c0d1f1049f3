"""How a run's session starts: fresh (initialize, then an optional pretrained restore) or
resumed from a checkpoint (which may lack optimizer state of a changed plan). Either way, with
replicated variables every device's copies are then filled from the variables (a checkpoint
holds one copy), and then the input starts (start_input). The training loop and the
learning-rate range test both start this way."""

import os

import tensorflow as tf

from common import error_lines
from inception.run import checkpoint_io
from inception.step import averages

tf1 = tf.compat.v1


def prepare_fresh_start(train_graph, make_initializer, saved_variables=None,
                        start_prefix=None):
    """Ops for a fresh start: initialize, run the initializer (e.g. a pretrained restore), then
    start every moving average at its variable's value. Returns callable(session) -> step 0.

    With `start_prefix`, the first call also saves those weights there (`saved_variables`), and
    every later call (a rollback before the first checkpoint) restores them: running the seeded
    initializers again would draw other weights.
    """
    init_op = tf1.global_variables_initializer()
    initialize = make_initializer() if make_initializer else None
    sync = averages.sync_averages_op(train_graph.moving_average,
                                           tf1.trainable_variables())
    keeper = (tf1.train.Saver(saved_variables, name="start_weights") if start_prefix
              else None)
    saved = []

    def start(session):
        if saved:
            keeper.restore(session, start_prefix)
        else:
            session.run(init_op)
            if initialize is not None:
                initialize(session)
            session.run(sync)
            if keeper is not None:
                _save_start(keeper, session, start_prefix)
                saved.append(start_prefix)
        fill_copies(session, train_graph)
        return 0
    return start


def _save_start(keeper, session, prefix):
    try:
        tf.io.gfile.makedirs(os.path.dirname(prefix))
        keeper.save(session, prefix, write_meta_graph=False, write_state=False)
    except (tf.errors.OpError, OSError, ValueError) as error:
        raise checkpoint_io.CheckpointError(
            f"could not save the starting weights as {prefix} "
            f"({error_lines.file_error_cause(error)}); free some space or fix the directory, "
            "then rerun the same command.") from None


def start_input(session, train_graph, local_init):
    """Starts the input of `train_graph` once its variables hold their values: the local
    variables (`local_init`), the pipeline's iterator and the first batch staged on the devices
    (gpu_prefetch)."""
    session.run([local_init, train_graph.input_initializer])
    if train_graph.input_fill is not None:
        session.run(train_graph.input_fill)


def keeping_input_position(train_graph):
    """callable(session, restore): runs `restore(session)`, then gives the input position
    (pipeline.InputBatch.position) back the value it had before. A rollback restores older
    weights while the input goes on with the next batches, so a checkpoint saved later must
    hold where the input really is."""
    position = train_graph.input_position
    if position is None:
        return lambda session, restore: restore(session)
    value = tf1.placeholder(tf.int64, [], name="kept_input_position")
    assign = position.assign(value)

    def restore_keeping(session, restore):
        kept = session.run(position)
        restore(session)
        session.run(assign, {value: kept})
    return restore_keeping


def fill_copies(session, train_graph):
    """Sets every device's copies to the variables' values (replicated variables; nothing
    otherwise): after anything that initializes or restores the variables."""
    if train_graph.fill_copies is not None:
        session.run(train_graph.fill_copies)


def prepare_resume(checkpoint, train_graph, saved_variables, log):
    """Ops to resume from `checkpoint`. Optimizer state and moving averages the checkpoint
    lacks (the training plan changed, e.g. a head-only run resumed to train everything) start
    fresh; a missing model variable or global step is a CheckpointError.
    Returns callable(session) -> the checkpoint's step."""
    stored = checkpoint_io.stored_shapes(checkpoint)
    essential = {v.op.name for v in tf1.trainable_variables() + tf1.model_variables()}
    essential.add(train_graph.global_step.op.name)
    missing = sorted(name for name in saved_variables if name not in stored)
    hint = ("the model changed since it was written; use the flags it was trained with, or a "
            "new --train_dir")
    for name in missing:
        if name in essential:
            raise checkpoint_io.CheckpointError(f"checkpoint {checkpoint} has no variable {name}; "
                                                f"{hint}.")
    present = {name: v for name, v in saved_variables.items() if name in stored}
    checkpoint_io.check_restorable(checkpoint, present, hint=hint)
    restorer = tf1.train.Saver(present, name="resume")
    init_missing = tf1.variables_initializer([saved_variables[name] for name in missing])
    averaged = {train_graph.moving_average.average_name(v): v for v in tf1.trainable_variables()}
    sync = averages.sync_averages_op(
        train_graph.moving_average, [averaged[name] for name in missing if name in averaged])

    position = train_graph.input_position
    if position is not None and position.op.name in missing:
        missing.remove(position.op.name)  # initialized with the others, and noted on its own

    def start(session):
        session.run(init_missing)
        restorer.restore(session, checkpoint)
        session.run(sync)
        fill_copies(session, train_graph)
        if missing:
            log(f"note: {len(missing)} optimizer or averaging variables are not in {checkpoint} "
                "(the training plan changed); they start fresh.")
        if position is not None and position.op.name not in stored:
            log(f"note: {checkpoint} was written before checkpoints held the input's position; "
                "the input starts over from its first epoch.")
        return int(session.run(train_graph.global_step))
    return start
