"""The moving averages of training and what a step changes beside its update.

The exponential moving average of every variable, which evaluation and the export use instead
of the weights themselves, and the warmed-up decay of the batch-norm statistics. Tower 0's
batch-norm moving statistics and the input position (the records of the order trained on)
change once the step's update is applied (the statistics in a one-stage plan; a multi-stage
plan leaves them unordered): a step cut short before its update (a cluster's step that a
stopping peer ends) then leaves the state of the step before it, which the checkpoint saved at
that step holds, so a resumed run repeats the cut step exactly.
"""

import tensorflow as tf

from inception.config import recipe
from inception.parallel import towers as towers_lib

tf1 = tf.compat.v1


def warmed_up_decay(max_decay, global_step):
    """min(max_decay, (1 + step) / (10 + step)): moving averages that are useful in short runs.

    With a fixed 0.9997 the batch-norm statistics stay near their initial values for hundreds of
    steps; this warm-up (the rule ExponentialMovingAverage applies with num_updates) lets them
    follow the data early and reach the full decay later.
    """
    step = tf.cast(global_step, tf.float32)
    return tf.minimum(max_decay, (1.0 + step) / (10.0 + step), name="batch_norm_decay")


def averages_of_every_variable(global_step, variables):
    """The ExponentialMovingAverage (recipe.MOVING_AVERAGE_DECAY, warmed up by the global step)
    of `variables` (every trainable variable, and each copy of one with replicated variables:
    sharing.VariableSharing.averaged_variables): all get their average now, whatever the
    stages train, so that checkpoints always hold the averages evaluation restores."""
    moving_average = tf1.train.ExponentialMovingAverage(recipe.MOVING_AVERAGE_DECAY,
                                                        num_updates=global_step)
    moving_average.apply(variables)
    return moving_average


def sync_averages_op(moving_average, variables):
    """An op setting the moving averages of `variables` to their current values (after a
    pretrained restore, or for averages a checkpoint lacks); a no-op for an empty list. Each
    assignment runs where its average lives (wherever --variable_device put it)."""
    with tf.name_scope("sync_averages"):
        return tf.group(*[moving_average.average(v).assign(v) for v in variables])


def statistics_updates(towers, updates_statistics):
    """The batch-norm moving statistics' update ops this process runs each step: tower 0's,
    or none when `updates_statistics` is False: a non-chief worker beside parameter servers,
    where the chief alone updates the shared statistics and input position, so that they
    change in the same order every run."""
    return towers_lib.batch_norm_updates(towers) if updates_statistics else []


def order_statistics(statistics, stage_ops):
    """Makes the `statistics` updates wait for the update of a one-stage plan's step
    (step_graph.StageOps). Added after the fact, as micro_batches.py does, since the update
    exists only once the towers (and their statistics) are built; in a multi-stage plan, one
    stage's order would make the other stages run its update too."""
    if len(stage_ops) != 1:
        return
    for update in statistics:  # ops, or the tensors and variables an assign returns
        op = getattr(update, "op", update)
        op._add_control_inputs([stage_ops[0].update_op])  # pylint: disable=protected-access


def position_advance(input_batch, advances_position, update_op):
    """[the op adding the records the step consumed to the input position once `update_op`
    ran], or [] when the position is not tracked or another process advances it."""
    if input_batch.position is None or not advances_position:
        return []
    with tf.control_dependencies([update_op]):
        return [input_batch.position.assign_add(input_batch.records_per_step,
                                                name="advance_input_position").op]
