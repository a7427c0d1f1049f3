"""Models that fail on purpose, for the tests of what the training does about it."""

import tensorflow as tf

from tests import testing_utils

tf1 = tf.compat.v1


def poisoned_on_tower_1_at_step(step):
    """The small conv model, whose tower 1's loss is NaN at global step `step` (a NaN image
    would not do: the ReLU turns NaN into 0): its gradients, and so the all-reduced sum, are
    not finite then."""
    model_fn = testing_utils.small_conv_model_fn()

    def poisoned(images, labels):
        terms = model_fn(images, labels)
        if not tf1.get_default_graph().get_name_scope().startswith("tower_1"):
            return terms
        poison = tf.where(tf.equal(tf1.train.get_global_step(), step), float("nan"), 1.0)
        return {name: loss * poison for name, loss in terms.items()}
    return poisoned
