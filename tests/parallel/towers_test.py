"""Towers on virtual CPU devices against one device on the same batch."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from common import cli
from inception.model import network
from inception.model.slim_compat import tf_slim as slim
from inception.parallel import gradients
from inception.parallel import towers
from tests import testing_utils

tf1 = tf.compat.v1
BATCH = 8


def build_and_run(num_towers, images, labels, model_fn, var_scope_filter=None):
    """`num_towers` towers on virtual CPUs (testing_utils.run_towers)."""
    return testing_utils.run_towers(images, labels, model_fn,
                                    [f"/cpu:{i}" for i in range(num_towers)],
                                    testing_utils.cpu_session_config(max(num_towers, 1)),
                                    var_scope_filter)


class TowerEquivalenceTest(unittest.TestCase):
    """N towers on B/N examples each == one device on the same B examples."""

    def test_mean_loss_and_gradients_match_one_device(self):
        images, labels = testing_utils.random_batch(BATCH)
        model_fn = testing_utils.small_conv_model_fn()
        single_loss, single_grads, _ = build_and_run(1, images, labels, model_fn)
        self.assertEqual(len(single_grads), 3)
        for num_towers in (2, 4):
            with self.subTest(num_towers=num_towers):
                loss, grads, _ = build_and_run(num_towers, images, labels, model_fn)
                # The towers sum the same float32 per-example terms in another order (N
                # partial means, then their mean): rounding of order 1e-7 per term, on a loss
                # and gradients of order 1; a missing or double-counted term moves them 1e-2.
                np.testing.assert_allclose(loss, single_loss, rtol=0, atol=1e-5)
                self.assertEqual(sorted(grads), sorted(single_grads))
                for name, value in grads.items():
                    np.testing.assert_allclose(value, single_grads[name], rtol=0, atol=1e-5,
                                               err_msg=name)

    def test_single_device_matches_plain_tensorflow(self):
        """The one-device reference itself equals a hand-built loss and tf.gradients."""
        images, labels = testing_utils.random_batch(BATCH)
        model_fn = testing_utils.small_conv_model_fn()
        loss, grads, _ = build_and_run(1, images, labels, model_fn)
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(0)
            data_loss = model_fn(tf.constant(images), tf.constant(labels))["cross_entropy"]
            total = data_loss + tf.add_n(tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES))
            variables = tf1.trainable_variables()
            plain = dict(zip([v.op.name for v in variables], tf.gradients(total, variables)))
            with tf1.Session() as session:
                session.run(tf1.global_variables_initializer())
                plain_loss, plain_grads = session.run([total, plain])
        # The same ops in the same order, built twice: only the thread pool's reduction order
        # can differ (float32 rounding, of order 1e-7 here).
        np.testing.assert_allclose(loss, plain_loss, atol=1e-6)
        for name, value in plain_grads.items():
            np.testing.assert_allclose(grads[name], value, atol=1e-6, err_msg=name)

    def test_towers_differ_when_batches_differ(self):
        """Sanity: the comparison is sensitive (a changed half-batch changes the result)."""
        images, labels = testing_utils.random_batch(BATCH)
        model_fn = testing_utils.small_conv_model_fn()
        loss, _, _ = build_and_run(2, images, labels, model_fn)
        changed = images.copy()
        changed[BATCH // 2:] *= -1.0
        changed_loss, _, _ = build_and_run(2, changed, labels, model_fn)
        self.assertGreater(abs(loss - changed_loss), 1e-4)


class TowerStructureTest(unittest.TestCase):

    def test_variables_created_once_on_cpu0_and_named_by_variable_scope(self):
        images, labels = testing_utils.random_batch(BATCH)
        _, _, one = build_and_run(1, images, labels, testing_utils.small_conv_model_fn())
        _, _, four = build_and_run(4, images, labels, testing_utils.small_conv_model_fn())
        self.assertEqual(one["variables"], four["variables"])
        for name, device in four["variable_devices"].items():
            self.assertIn("CPU:0", device.upper(), name)
            self.assertFalse(name.startswith("tower_"), name)
        self.assertEqual(four["tower_losses_ops"],
                         [f"tower_{i}/total_loss/value" for i in range(4)])

    def test_tower_ops_run_on_their_device(self):
        images, labels = testing_utils.random_batch(BATCH)
        _, _, info = build_and_run(2, images, labels, testing_utils.small_conv_model_fn())
        conv_devices = {}
        for name, device in info["op_devices"].items():
            if name.endswith("Conv2D") and name.startswith("tower_"):
                spec = tf.DeviceSpec.from_string(device)
                conv_devices[name.split("/")[0]] = (spec.device_type.upper(), spec.device_index)
        self.assertEqual(conv_devices, {"tower_0": ("CPU", 0), "tower_1": ("CPU", 1)})

    def test_variable_without_gradient_is_skipped_and_named(self):
        images, labels = testing_utils.random_batch(BATCH)
        model_fn = testing_utils.small_conv_model_fn(unused_variable=True)
        loss, grads, info = build_and_run(2, images, labels, model_fn)
        self.assertEqual(info["skipped"], ["net/unused/weights"])
        self.assertNotIn("net/unused/weights", grads)
        reference_loss, reference, _ = build_and_run(1, images, labels,
                                                     testing_utils.small_conv_model_fn())
        np.testing.assert_allclose(loss, reference_loss, atol=1e-5)
        self.assertEqual(sorted(grads), sorted(reference))

    def test_average_gradients_handles_partial_none(self):
        """None in some towers counts as zero; None in all towers skips the variable."""
        graph = tf.Graph()
        with graph.as_default():
            a = tf1.get_variable("a", [2], initializer=tf1.zeros_initializer())
            b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
            per_tower = [[tf.constant([2.0, 4.0]), None], [None, None]]
            averaged, skipped = gradients.average_gradients(per_tower, [a, b])
            self.assertEqual(skipped, ["b"])
            with tf1.Session() as session:
                np.testing.assert_allclose(session.run(averaged[0][0]), [1.0, 2.0])

    def test_scope_selection_is_the_same_for_any_number_of_towers(self):
        images, labels = testing_utils.random_batch(BATCH)
        model_fn = testing_utils.small_conv_model_fn()
        _, one, _ = build_and_run(1, images, labels, model_fn, var_scope_filter=["net/logits"])
        _, three, _ = build_and_run(2, images, labels, model_fn, var_scope_filter=["net/logits"])
        self.assertEqual(sorted(one), ["net/logits/weights"])
        self.assertEqual(sorted(three), ["net/logits/weights"])

    def test_split_batch_rejects_uneven_batches(self):
        with tf.Graph().as_default():
            with self.assertRaisesRegex(cli.UserError, "multiple of --num_gpus"):
                towers.split_batch((tf.zeros([6, 2]),), 4)

    def test_batch_norm_updates_come_from_tower_zero_only(self):
        def model_fn(images, labels):
            net = slim.conv2d(images, 4, [3, 3], normalizer_fn=slim.batch_norm, scope="conv")
            logits = tf.reduce_mean(net, axis=[1, 2])
            return {"xent": tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))}

        images, labels = testing_utils.random_batch(BATCH)
        with tf.Graph().as_default():
            inputs = towers.split_batch((tf.constant(images), tf.constant(labels)), 2)
            tower_list = towers.build_towers(model_fn, inputs, ["/cpu:0", "/cpu:1"],
                                             testing_utils.on_host(["/cpu:0", "/cpu:1"]))
            updates = towers.batch_norm_updates(tower_list)
            all_updates = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)
            self.assertEqual(len(updates), 2)  # moving mean and moving variance
            self.assertEqual(len(all_updates), 4)
            self.assertTrue(all(op.name.startswith("tower_0/") for op in updates))
            moving = [v.op.name for v in tf1.global_variables() if "moving" in v.op.name]
            self.assertEqual(sorted(moving), ["conv/BatchNorm/moving_mean",
                                              "conv/BatchNorm/moving_variance"])


def tiny_inception_regularization(num_towers, compute_dtype):
    """The regularization loss of the tiny Inception built as `num_towers` towers in
    `compute_dtype` from the same seeded initial weights."""
    with tf.Graph().as_default():
        tf1.set_random_seed(3)
        images = tf.zeros([2 * num_towers, 75, 75, 3])
        labels = tf.zeros([2 * num_towers], tf.int32)
        model_fn = network.make_model_fn(testing_utils.TINY_INCEPTION, 0.99,
                                         network.TowerOptions(compute_dtype=compute_dtype))
        devices = [f"/cpu:{index}" for index in range(num_towers)]
        towers.build_towers(model_fn, towers.split_batch((images, labels), num_towers), devices,
                            testing_utils.on_host(devices))
        regularization = towers.regularization_loss()
        with tf1.Session(config=testing_utils.cpu_session_config(num_towers)) as session:
            session.run(tf1.global_variables_initializer())
            return session.run(regularization)


class RegularizationTest(unittest.TestCase):

    def test_weight_decay_counts_once_whatever_the_towers_and_precision(self):
        """bf16 towers' layers see casts of the variables and add their weight decay again in
        every tower; it must count once, as with one tower."""
        for dtype in (None, tf.bfloat16):
            with self.subTest(dtype=dtype):
                one = tiny_inception_regularization(1, dtype)
                self.assertGreater(one, 0.0)
                # The same terms of the same weights, summed in the same order: equal.
                self.assertEqual(tiny_inception_regularization(2, dtype), one)


if __name__ == "__main__":
    absltest.main()
