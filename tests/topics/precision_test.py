"""Mixed precision: dynamic loss scaling (fp16) and the bf16 rewrite on CPUs that have it
(mixed_precision_test covers towers built in bf16 / fp16, the GPU path)."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.driver import launch
from inception.inputs import pipeline
from inception.parallel import devices
from inception.parallel import loss_scaling
from inception.parallel import step_graph
from inception.parallel import towers
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
                                         ["/cpu:0", "/cpu:1"])
        scale = None if loss_scale is None else tf.constant(loss_scale)
        gradients = towers.build_gradients(tower_list, tf1.trainable_variables(),
                                           towers.regularization_loss(), loss_scale=scale)
        fetch = {v.op.name: g for g, v in gradients.grads_and_vars}
        with tf1.Session(config=testing_utils.cpu_session_config(2)) as session:
            session.run(tf1.global_variables_initializer())
            return session.run(fetch)


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
                testing_utils.optimization(), ["/cpu:0", "/cpu:1"], 64,
                initial_loss_scale=1024.0)
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
        with tf.Graph().as_default():
            variable = tf1.get_variable("v", initializer=1.0)
            step = tf1.train.get_or_create_global_step()
            gradient = tf1.placeholder(tf.float32, [])
            scale = loss_scaling.create_loss_scale(8.0)
            update = loss_scaling.apply_if_finite(
                [(gradient, variable)],
                lambda: [variable.assign_sub(gradient), step.assign_add(1)], step, scale,
                growth_interval=3)
            with tf1.Session() as session:
                session.run(tf1.global_variables_initializer())
                for value in (1.0, 1.0):
                    session.run(update, {gradient: value})
                self.assertEqual(session.run(scale.scale), 8.0)
                session.run(update, {gradient: 1.0})
                self.assertEqual(session.run(scale.scale), 16.0)  # third good step in a row
                session.run(update, {gradient: float("inf")})
                self.assertEqual(session.run(scale.scale), 8.0)
                self.assertEqual(session.run(variable), -2.0)  # the inf step changed nothing
                self.assertEqual(session.run(step), 4)


class Bf16RewriteTest(unittest.TestCase):

    def test_bf16_rewrite_runs_convolutions_in_bf16_and_trains(self):
        data_dir = testing_utils.tiny_demo_data(train=16, validation=4)

        def first_loss(precision):
            return launch.train(settings_lib.train_settings(
                train_dir=testing_utils.temp_dir(precision), data_dir=data_dir, dataset="demo",
                max_steps=1, image_size=107, depth_multiplier=0.1, batch_size=4, num_towers=2,
                seed=5, precision=precision), log=lambda line: None).last_mean_loss

        if not devices.cpu_supports_bf16():
            self.skipTest("this CPU has no bf16 instructions (devices_test checks the error)")
        losses = {precision: first_loss(precision) for precision in ("fp32", "bf16")}
        self.assertTrue(np.isfinite(losses["bf16"]))
        # Same seed, same batch, same initial weights: bf16 arithmetic (8-bit mantissa, batch
        # norm over 2 examples per tower here) moves the first loss by about 10%, no more.
        self.assertAlmostEqual(losses["bf16"], losses["fp32"], delta=0.15 * losses["fp32"])

        with tf.Graph().as_default():
            images, _ = testing_utils.random_batch(2, size=16)
            kernel = tf1.get_variable("k", [3, 3, 3, 4])
            output = tf.reduce_sum(tf.nn.conv2d(tf.constant(images), kernel, 1, "SAME"))
            config = devices.apply_precision(tf1.ConfigProto(), "bf16",
                                             devices.plan_towers(1, physical_gpus=0))
            metadata = tf1.RunMetadata()
            with tf1.Session(config=config) as session:
                session.run(tf1.global_variables_initializer())
                session.run(output, options=tf1.RunOptions(output_partition_graphs=True),
                            run_metadata=metadata)
        conv_types = {node.attr["T"].type for graph in metadata.partition_graphs
                      for node in graph.node if "Conv2D" in node.op}
        self.assertEqual(conv_types, {tf.bfloat16.as_datatype_enum})


if __name__ == "__main__":
    absltest.main()
