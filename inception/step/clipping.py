"""Gradient clipping by global norm (--clip_gradient_norm): the averaged gradients of an update,
after loss scaling is undone, scaled down together when their global norm is above the bound
(tf.clip_by_global_norm), and a count of the updates it clipped, for the log and TensorBoard.
"""

import dataclasses

import tensorflow as tf

from inception.parallel.devices import HOST_DEVICE

tf1 = tf.compat.v1

COUNTER_NAME = "clipped_updates"


@dataclasses.dataclass(frozen=True)
class Clipping:
    """The clipped gradients of one stage, and the count of clipped updates, this one's
    included (running it counts this update)."""
    gradients: object  # gradients.AveragedGradients
    count: tf.Tensor


@dataclasses.dataclass(frozen=True)
class ClippedUpdates:
    """The bound, and the int64 local variable counting this process's updates it clipped
    (not checkpointed: the log reports the updates of this run)."""
    clip_norm: float
    counter: tf.Variable


def counter_if(clip_norm, device=HOST_DEVICE):
    """ClippedUpdates of `clip_norm` with a new counter on `device`, or None when `clip_norm` is
    0 (no clipping)."""
    if not clip_norm:
        return None
    with tf.device(device):
        return ClippedUpdates(clip_norm, tf1.get_variable(
            COUNTER_NAME, [], tf.int64, tf1.zeros_initializer(), trainable=False,
            collections=[tf1.GraphKeys.LOCAL_VARIABLES]))


def clip_gradients(gradients, clipped_updates):
    """Clipping of gradients.AveragedGradients `gradients` to the global norm of ClippedUpdates
    `clipped_updates`, whose counter counts the update when it clipped; every device's copy of
    them (replicated variables) is clipped alike, by its own norm of the same values."""
    clip_norm, counter = clipped_updates.clip_norm, clipped_updates.counter
    pairs = list(gradients.grads_and_vars)
    clipped, norm = tf.clip_by_global_norm([grad for grad, _ in pairs], clip_norm)
    grads_and_vars = list(zip(clipped, [variable for _, variable in pairs]))
    every_copy = []
    copies = list(gradients.every_copy)
    for start in range(len(pairs), len(copies), len(pairs)):
        device_pairs = copies[start:start + len(pairs)]
        with tf.device(device_pairs[0][1].device):
            device_grads, _ = tf.clip_by_global_norm([grad for grad, _ in device_pairs],
                                                     clip_norm)
        every_copy.extend(zip(device_grads, [copy for _, copy in device_pairs]))
    if copies:
        every_copy = grads_and_vars + every_copy
    count = counter.assign_add(tf.cast(norm > clip_norm, tf.int64))
    return Clipping(dataclasses.replace(gradients, grads_and_vars=grads_and_vars,
                                        every_copy=every_copy), count)
