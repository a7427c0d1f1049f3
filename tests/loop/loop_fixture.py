"""The small model's training loop for the loop's tests: faults on demand (a NaN loss in one
tower, a NaN gradient, an Inf statistic, NaN batches), and run() of session_loop on it."""

import numpy as np
import tensorflow as tf

from inception.config import settings as settings_lib
from inception.loop import session_loop
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
BATCH = 8
NUM_TOWERS = 2


def small_model_factory(nan_tower=None, nan_from_step=None, nan_gradient_from_step=None,
                        inf_statistic_at_step=None):
    """make_model_fn(bn_decay) for train_graph. Faults on demand, from a global step on: a NaN
    loss in one tower; a finite loss whose gradient is NaN (tower 0: the update poisons the
    weights while the loss still looks fine); a non-trainable statistic set to Inf."""
    base = testing_utils.small_conv_model_fn()

    def make_model_fn(bn_decay):
        del bn_decay

        def model_fn(images, labels):
            terms = base(images, labels)
            scope = tf1.get_default_graph().get_name_scope()
            step = tf1.train.get_global_step()
            if nan_tower is not None and scope.startswith(f"tower_{nan_tower}"):
                poisoned = tf.where(step + 1 >= nan_from_step, np.float32("nan"), 0.0)
                terms = {name: value + poisoned for name, value in terms.items()}
            if nan_gradient_from_step is not None and scope.startswith("tower_0"):
                terms = {name: _nan_gradient(value, step + 1 >= nan_gradient_from_step)
                         for name, value in terms.items()}
            if inf_statistic_at_step is not None:
                _inf_statistic(step + 1 >= inf_statistic_at_step)
            return terms
        return model_fn
    return make_model_fn


def _nan_gradient(value, when):
    """`value` itself, whose gradient is NaN while `when` holds."""
    @tf.custom_gradient
    def identity(x):
        return tf.identity(x), lambda dy: tf.where(when, np.float32("nan"), dy)
    return identity(value)


def _inf_statistic(when):
    """A non-trainable variable (like a batch-norm statistic) that becomes Inf when `when`;
    its update runs with tower 0's step, as batch norm's do."""
    with tf1.variable_scope(tf1.get_variable_scope(), reuse=tf1.AUTO_REUSE):
        statistic = tf1.get_variable("net/statistic", [], initializer=tf1.zeros_initializer(),
                                     trainable=False)
    if tf1.get_default_graph().get_name_scope().startswith("tower_0"):
        tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, statistic.assign(
            tf.where(when, np.float32("inf"), 0.0)))


def poisoned_batches(first, last=None):
    """The small model's batches, the `first`..`last` (1-based, inclusive; None: every later
    one) made of NaN: faults tied to the data, not to the step."""
    def poison(images, labels, number):
        bad = number >= first if last is None else (number >= first) & (number <= last)
        return tf.where(bad, images * np.float32("nan"), images), labels
    return testing_utils.numbered_batches(poison, BATCH)


def build_graph_fn(input_fn=None, **factory_args):
    def build():
        return step_graph.build_train_graph(
            (input_fn or testing_utils.synthetic_input)(BATCH),
            small_model_factory(**factory_args),
            testing_utils.optimization(initial_learning_rate=0.01),
            testing_utils.sharing_of([f"/cpu:{i}" for i in range(NUM_TOWERS)]), 64)
    return build


def loop_settings(train_dir, max_steps, **overrides):
    values = dict(train_dir=train_dir, max_steps=max_steps, log_every_n_steps=1,
                  save_summaries_steps=1, save_checkpoint_steps=5, save_interval_secs=0)
    values.update(overrides)
    return settings_lib.LoopSettings(**values)


def run(train_dir, max_steps, log=None, settings=None, input_fn=None, **factory_args):
    return session_loop.run_training(build_graph_fn(input_fn, **factory_args),
                                     testing_utils.cpu_session_config(NUM_TOWERS),
                                     loop_settings(train_dir, max_steps, **(settings or {})),
                                     log=log if log is not None else (lambda line: None))
