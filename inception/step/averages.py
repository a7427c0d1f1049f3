"""The moving averages of training: the exponential moving average of every variable, which
evaluation and the export use instead of the weights themselves, and the warmed-up decay of
the batch-norm statistics."""

import tensorflow as tf

from inception.config import recipe

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
