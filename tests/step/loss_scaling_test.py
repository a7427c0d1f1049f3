"""Dynamic loss scaling (fp16 towers): gradients unscaled again, non-finite steps skipped,
and the scale's growth and halving by the recipe's factor."""

import contextlib
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import recipe
from inception.inputs import pipeline
from inception.parallel import gradients as gradients_lib
from inception.parallel import towers
from inception.step import loss_scaling
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
BATCH = 8


def scaled_gradients(loss_scale):
    """{variable: averaged gradient} of the small model on 2 towers, with a loss scale."""
    images, labels = testing_utils.random_batch(BATCH)
    with tf.Graph().as_default():
        tf1.set_random_seed(0)
        inputs = towers.split_batch((tf.constant(images), tf.constant(labels)), 2)
        tower_list = towers.build_towers(testing_utils.small_conv_model_fn(), inputs,
                                         ["/cpu:0", "/cpu:1"],
                                         testing_utils.on_host(["/cpu:0", "/cpu:1"]))
        scale = None if loss_scale is None else tf.constant(loss_scale)
        gradients = gradients_lib.build_gradients(tower_list, tf1.trainable_variables(),
                                           towers.regularization_loss(), loss_scale=scale)
        fetch = {v.op.name: g for g, v in gradients.grads_and_vars}
        with tf1.Session(config=testing_utils.cpu_session_config(2)) as session:
            session.run(tf1.global_variables_initializer())
            return session.run(fetch)


@contextlib.contextmanager
def fed_updates(initial_scale, **growth):
    """LossScale.apply_if_finite on a variable v = 1.0 whose update subtracts a fed gradient, in a
    session; yields (update(gradient value), read() -> {"scale", "good_steps", "v", "step"}).
    `growth`: apply_if_finite's growth_interval, when given."""
    with tf.Graph().as_default():
        variable = tf1.get_variable("v", initializer=1.0)
        step = tf1.train.get_or_create_global_step()
        gradient = tf1.placeholder(tf.float32, [])
        scale = loss_scaling.create_loss_scale(initial_scale)
        update = scale.apply_if_finite(
            [(gradient, variable)],
            lambda: [variable.assign_sub(gradient), step.assign_add(1)], step, **growth)
        state = {"scale": scale.scale, "good_steps": scale.good_steps, "v": variable,
                 "step": step}
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            yield (lambda value: session.run(update, {gradient: value}),
                   lambda: session.run(state))


class LossScalingTest(unittest.TestCase):

    def test_scaled_gradients_are_unscaled_again(self):
        plain = scaled_gradients(None)
        scaled = scaled_gradients(1024.0)
        for name, value in plain.items():
            # Scaling by 1024 and back is exact in float32 (a power of two); what remains is
            # the scaled graph's own summation order: float32 rounding, relative 1e-7 to 1e-6.
            np.testing.assert_allclose(scaled[name], value, rtol=1e-5, atol=1e-7, err_msg=name)

    def test_non_finite_gradients_skip_the_update_and_halve_the_scale(self):
        images, labels = testing_utils.random_batch(BATCH)
        poisoned = images.copy()
        poisoned[0, 0, 0, 0] = np.inf  # what an fp16 overflow does to the gradients
        with tf.Graph().as_default():
            dataset = tf.data.Dataset.from_tensors((poisoned, labels)).concatenate(
                tf.data.Dataset.from_tensors((images, labels)).repeat())
            iterator = tf1.data.make_initializable_iterator(dataset)
            image_batch, label_batch = iterator.get_next()
            input_batch = pipeline.InputBatch(image_batch, label_batch,
                                              tf.constant(0, tf.int64),
                                              iterator.initializer)
            built = step_graph.build_train_graph(
                input_batch, lambda decay: testing_utils.small_conv_model_fn(),
                testing_utils.optimization(), testing_utils.sharing_of(["/cpu:0", "/cpu:1"]), 64,
                step_graph.StepOptions(initial_loss_scale=1024.0))
            weights = [v for v in tf1.trainable_variables() if v.op.name == "net/conv/kernel"][0]
            scale = [v for v in tf1.global_variables() if v.op.name == "loss_scale/scale"][0]
            step_op = built.stages[0].train_op
            with tf1.Session(config=testing_utils.cpu_session_config(2)) as session:
                session.run([tf1.global_variables_initializer(), built.input_initializer])
                before = session.run(weights)
                session.run(step_op)
                self.assertEqual(session.run(built.global_step), 1)
                np.testing.assert_array_equal(session.run(weights), before)
                self.assertEqual(session.run(scale), 512.0)
                session.run(step_op)
                self.assertEqual(session.run(built.global_step), 2)
                self.assertFalse(np.array_equal(session.run(weights), before))
                self.assertTrue(np.all(np.isfinite(session.run(weights))))
                self.assertEqual(session.run(scale), 512.0)

    def test_scale_grows_after_a_run_of_good_steps(self):
        with fed_updates(8.0, growth_interval=3) as (update, read):
            for value in (1.0, 1.0):
                update(value)
            self.assertEqual(read()["scale"], 8.0)
            update(1.0)
            self.assertEqual(read()["scale"], 16.0)  # third good step in a row
            update(float("inf"))
            self.assertEqual(read()["scale"], 8.0)
            self.assertEqual(read()["v"], -2.0)  # the inf step changed nothing
            self.assertEqual(read()["step"], 4)


class ScaleScheduleTest(unittest.TestCase):
    """The scale against recipe.py: times LOSS_SCALE_FACTOR after a growth interval of good
    steps in a row, divided by it (never below 1) on each non-finite step."""

    def assert_good_steps(self, update, read, count, scale):
        """`count` good steps leave `scale` as it is and are counted."""
        for _ in range(count):
            before = read()
            update(0.5)
            self.assertEqual(read()["scale"], scale)
            self.assertEqual(read()["good_steps"], before["good_steps"] + 1)

    def test_growth_after_the_interval_and_halving_down_to_one(self):
        factor, interval = recipe.LOSS_SCALE_FACTOR, 4
        with fed_updates(factor, growth_interval=interval) as (update, read):
            self.assert_good_steps(update, read, interval - 1, factor)
            update(0.5)
            self.assertEqual((read()["scale"], read()["good_steps"]), (factor * factor, 0))
            self.assert_good_steps(update, read, interval - 1, factor * factor)
            update(float("nan"))  # an overflow also restarts the count
            self.assertEqual((read()["scale"], read()["good_steps"]), (factor, 0))
            self.assert_good_steps(update, read, interval - 1, factor)
            for _ in range(3):
                before = read()
                update(float("-inf"))
                self.assertEqual(read()["scale"], 1.0)  # factor / factor, then the floor
                self.assertEqual(read()["v"], before["v"])
                self.assertEqual(read()["step"], before["step"] + 1)
            self.assertEqual(read()["v"], 1.0 - 0.5 * (3 * interval - 2))  # the good steps only

    def test_the_defaults_are_the_recipe(self):
        with fed_updates(recipe.INITIAL_LOSS_SCALE) as (update, read):
            self.assertEqual(read()["scale"], recipe.INITIAL_LOSS_SCALE)
            for _ in range(recipe.LOSS_SCALE_GROWTH_INTERVAL - 1):
                update(0.0)
            self.assertEqual(read()["scale"], recipe.INITIAL_LOSS_SCALE)
            update(0.0)
            self.assertEqual(read()["scale"],
                             recipe.INITIAL_LOSS_SCALE * recipe.LOSS_SCALE_FACTOR)
        with tf.Graph().as_default():
            scale = loss_scaling.create_loss_scale()
            with tf1.Session() as session:
                session.run(tf1.global_variables_initializer())
                self.assertEqual(session.run(scale.scale), recipe.INITIAL_LOSS_SCALE)


if __name__ == "__main__":
    absltest.main()
