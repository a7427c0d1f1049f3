"""The model's one build choice: dropout as a mask multiply, only while our network is built."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tf_slim.layers import layers as slim_layers
from tf_slim.nets import inception_v3

from inception.config import settings as settings_lib
from inception.model import network
from inception.model.slim_compat import tf_slim as slim

tf1 = tf.compat.v1
SETTINGS = settings_lib.ModelSettings(num_classes=5, image_size=75, depth_multiplier=0.1,
                                      dataset="demo")


def select_ops(build):
    """Names of the SelectV2 ops a graph built by `build()` holds, and the graph."""
    with tf.Graph().as_default() as graph:
        build()
    return [op.name for op in graph.get_operations() if op.type == "SelectV2"], graph


class DropoutTest(unittest.TestCase):

    def test_our_network_builds_dropout_without_select(self):
        selects, graph = select_ops(lambda: network.inception_logits(
            tf.zeros([2, 75, 75, 3]), SETTINGS, is_training=True))
        self.assertEqual(selects, [])
        self.assertIsNotNone(graph.get_operation_by_name("InceptionV3/Logits/Dropout_1b/mul"))

    def test_plain_tf_slim_would_build_select_and_is_left_alone(self):
        # The SelectV2 is what stops Grappler's GPU layout optimizer; the swap must not outlive
        # our build (it is a model choice, not a process-wide patch).
        def plain():
            with slim.arg_scope(inception_v3.inception_v3_arg_scope()):
                inception_v3.inception_v3(tf.zeros([2, 75, 75, 3]), num_classes=5,
                                          depth_multiplier=0.1, create_aux_logits=False)
        select_ops(lambda: network.inception_logits(tf.zeros([1, 75, 75, 3]), SETTINGS, True))
        selects, _ = select_ops(plain)
        self.assertTrue(any("Dropout_1b" in name for name in selects), selects)
        self.assertIsNot(slim_layers.dropout, network.mask_dropout)

    def test_mask_dropout_keeps_and_scales_like_dropout(self):
        with tf.Graph().as_default():
            x = tf.constant(np.random.RandomState(0).normal(size=(20000, 1, 1, 10)), tf.float32)
            train = network.mask_dropout(x, keep_prob=0.8, seed=1)
            rows = network.mask_dropout(x, keep_prob=0.8, noise_shape=[20000, 1, 1, 1], seed=2)
            evaluate = network.mask_dropout(x, keep_prob=0.8, is_training=False)
            grad = tf.gradients(tf.reduce_sum(train), x)[0]
            with tf1.Session() as session:
                x_, t, r, e, g = session.run([x, train, rows, evaluate, grad])
        kept = t != 0
        self.assertLess(abs(kept.mean() - 0.8), 0.01)
        # One float32 multiply by 1 / 0.8 against NumPy's float32 division: 1 ulp apart.
        np.testing.assert_allclose(t[kept], x_[kept] / 0.8, rtol=1e-6)
        np.testing.assert_allclose(g, kept / 0.8, rtol=1e-6)
        row_kept = (r != 0).any(axis=(1, 2, 3))
        np.testing.assert_allclose(r[row_kept], x_[row_kept] / 0.8, rtol=1e-6)
        self.assertTrue((r[~row_kept] == 0).all())
        self.assertLess(abs(row_kept.mean() - 0.8), 0.02)
        np.testing.assert_array_equal(e, x_)


if __name__ == "__main__":
    absltest.main()
