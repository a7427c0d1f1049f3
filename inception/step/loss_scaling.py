"""Dynamic loss scaling for fp16 towers (--precision=fp16 on GPUs).

fp16 gradients of small losses underflow to zero. Each tower's loss is multiplied by a scale
before its gradients are taken and the averaged gradients are divided by it again. When any
gradient is not finite (the scale was too large), the update is skipped and the scale halved;
after a number of good steps in a row it doubles (the constants: config/recipe.py). The global
step advances either way, so step counts and checkpoints stay in line with the loop.
"""

import dataclasses

import tensorflow as tf

from inception.config import recipe

tf1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class LossScale:
    """The scale (float32 scalar variable) and the count of good steps since it last changed."""
    scale: tf.Variable
    good_steps: tf.Variable

    def apply_if_finite(self, grads_and_vars, apply_fn, global_step,
                        growth_interval=recipe.LOSS_SCALE_GROWTH_INTERVAL):
        """Runs `apply_fn()` (which must advance `global_step`) only if all gradients are
        finite, otherwise advances `global_step` alone; then adapts the scale. Returns the op.
        A method, so that whoever applies an update (parallel/sharing.py) needs no import of
        this module to guard it."""
        finite = all_finite([grad for grad, _ in grads_and_vars])

        def skip():
            return tf.group(global_step.assign_add(1))

        def apply():
            return tf.group(*tf.nest.flatten(apply_fn()))

        update = tf.cond(finite, apply, skip)
        with tf.control_dependencies([update]):
            return _adapt_scale(finite, self, growth_interval)


def create_loss_scale(initial_scale=recipe.INITIAL_LOSS_SCALE):
    """Non-trainable variables of the scale, saved in checkpoints so a resumed run keeps it."""
    with tf1.variable_scope("loss_scale"):
        scale = tf1.get_variable("scale", initializer=float(initial_scale), trainable=False)
        good_steps = tf1.get_variable("good_steps", initializer=tf.constant(0, tf.int64),
                                      trainable=False)
    return LossScale(scale, good_steps)


def all_finite(grads):
    """A bool scalar: True when every gradient tensor is free of NaN and Inf."""
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(grad)) for grad in grads])


def _adapt_scale(finite, loss_scale, growth_interval):
    grown = loss_scale.good_steps + 1 >= growth_interval
    factor = recipe.LOSS_SCALE_FACTOR
    new_scale = tf.where(finite, tf.where(grown, loss_scale.scale * factor, loss_scale.scale),
                         tf.maximum(loss_scale.scale / factor, 1.0))
    new_good = tf.where(tf.logical_and(finite, tf.logical_not(grown)),
                        loss_scale.good_steps + 1, tf.zeros_like(loss_scale.good_steps))
    return tf.group(loss_scale.scale.assign(new_scale), loss_scale.good_steps.assign(new_good))
