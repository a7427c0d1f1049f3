"""Inputs prefetched to the towers' devices one step ahead train exactly what inputs read in
the step do."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.loop import session_loop
from inception.parallel import gpu_prefetch
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
BATCH = 8
DEVICES = ["/cpu:0", "/cpu:1"]


def build(prefetch_inputs):
    """The small model's training graph on 2 virtual CPU towers over a batch sequence."""
    return step_graph.build_train_graph(
        testing_utils.synthetic_input(BATCH),
        lambda decay: testing_utils.small_conv_model_fn(),
        testing_utils.optimization(initial_learning_rate=0.01),
        testing_utils.sharing_of(DEVICES), 64,
        step_graph.StepOptions(prefetch_inputs=prefetch_inputs))


def tower_losses(prefetch_inputs, steps=5):
    """Each step's tower losses, and the device of each staging op."""
    with tf.Graph().as_default() as graph:
        tf1.set_random_seed(0)
        built = build(prefetch_inputs)
        staging_devices = {op.name: op.device for op in graph.get_operations()
                           if op.type in ("Stage", "Unstage")}
        with tf1.Session(config=testing_utils.cpu_session_config(len(DEVICES))) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            if built.input_fill is not None:
                session.run(built.input_fill)
            losses = [session.run([built.stages[0].train_op, built.stages[0].tower_losses])[1]
                      for _ in range(steps)]
    return np.array(losses), staging_devices, built.input_fill


class StagingTest(unittest.TestCase):

    def test_staged_steps_see_the_same_batches_as_unstaged_ones(self):
        staged, staging_devices, fill = tower_losses(prefetch_inputs=True)
        plain, no_staging, no_fill = tower_losses(prefetch_inputs=False)
        # Five different batches (the synthetic input cycles 64 examples 8 at a time): a
        # one-batch shift would change every step's losses.
        self.assertEqual(len({tuple(step) for step in plain}), 5)
        np.testing.assert_array_equal(staged, plain)
        self.assertIsNotNone(fill)
        self.assertIsNone(no_fill)
        self.assertEqual(no_staging, {})
        placed = {name.split("/")[0]: tf.DeviceSpec.from_string(device).device_index
                  for name, device in staging_devices.items()}
        self.assertEqual(placed, {"prefetch_tower_0": 0, "prefetch_tower_1": 1})
        self.assertEqual(len(staging_devices), 4)  # a put and a take per tower

    def test_the_training_loop_fills_the_staging_area_before_the_first_step(self):
        # Without the fill, the first step would wait for ever on an empty staging area.
        result = session_loop.run_training(
            lambda: build(prefetch_inputs=True), testing_utils.cpu_session_config(len(DEVICES)),
            settings_lib.LoopSettings(train_dir=testing_utils.temp_dir("staged"), max_steps=3),
            log=lambda line: None)
        self.assertEqual(result.step, 3)
        self.assertTrue(np.isfinite(result.last_mean_loss))

    def test_staged_tensors_keep_dtype_and_shape(self):
        with tf.Graph().as_default():
            images, labels = tf.zeros([4, 8, 8, 3]), tf.zeros([4], tf.int32)
            staged = gpu_prefetch.prefetch_to_devices([(images, labels)], ["/cpu:0"])
            (taken_images, taken_labels), = staged.tower_inputs
            self.assertEqual((taken_images.dtype, taken_images.shape.as_list()),
                             (tf.float32, [4, 8, 8, 3]))
            self.assertEqual((taken_labels.dtype, taken_labels.shape.as_list()),
                             (tf.int32, [4]))
            with tf1.Session() as session:
                session.run(staged.put_op)
                value = session.run(taken_images)
            np.testing.assert_array_equal(value, np.zeros([4, 8, 8, 3]))


if __name__ == "__main__":
    absltest.main()
