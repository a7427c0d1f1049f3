"""The model's one build choice (dropout as a mask multiply, only while our network is built),
and Mixup/CutMix in the tower against NumPy."""

import unittest
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tensorflow.python.framework import tensor as tensor_lib
from tf_slim.layers import layers as slim_layers
from tf_slim.nets import inception_v3

from inception.config import recipe
from inception.config import settings as settings_lib
from inception.model import network
from inception.model.slim_compat import tf_slim as slim
from tests import testing_utils

tf1 = tf.compat.v1
SETTINGS = settings_lib.ModelSettings(num_classes=5, **testing_utils.tiny_model(),
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


def mixed_tower(mixup_alpha, cutmix_alpha, step, seed=3, batch=4):
    """One tiny Inception tower of make_model_fn with Mixup/CutMix at global step `step`:
    (input images, labels, images the network got, its logits, the cross-entropy term)."""
    augmentation = settings_lib.AugmentationSettings(mixup_alpha=mixup_alpha,
                                                     cutmix_alpha=cutmix_alpha)
    rng = np.random.RandomState(0)
    images = rng.uniform(-1, 1, (batch, 75, 75, 3)).astype(np.float32)
    labels = np.array([1, 2, 3, 4][:batch], np.int32)
    with tf.Graph().as_default():
        global_step = tf1.train.get_or_create_global_step()
        model_fn = network.make_model_fn(
            SETTINGS, 0.9, network.TowerOptions(augmentation=augmentation, seed=seed))
        outputs = model_fn(tf.constant(images), tf.constant(labels))
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            session.run(global_step.assign(step))
            got, logit_values, loss = session.run(
                [outputs.images, outputs.logits, outputs.loss_terms["cross_entropy"]])
    return images, labels, got, logit_values, loss


def smoothed_loss(logits, targets):
    """The mean cross-entropy against `targets` smoothed once by the recipe's 0.1, in NumPy."""
    smoothed = targets * (1 - recipe.LABEL_SMOOTHING) + recipe.LABEL_SMOOTHING / targets.shape[1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(np.mean(-(smoothed * log_softmax).sum(axis=1)))


class VariableHashingTest(unittest.TestCase):

    def test_the_network_is_built_hashing_by_identity_and_eager_equality_comes_back(self):
        switch = []
        build = inception_v3.inception_v3

        def spy(*args, **kwargs):
            switch.append(tensor_lib.Tensor._USE_EQUALITY)  # pylint: disable=protected-access
            return build(*args, **kwargs)
        with tf.Graph().as_default(), mock.patch.object(inception_v3, "inception_v3", spy):
            network.inception_logits(tf.zeros([1, 75, 75, 3]), SETTINGS, is_training=True)
        self.assertEqual(switch, [False])
        # Eager code afterwards compares by value again (TensorFlow 2's default).
        self.assertIsInstance(tf.constant(1) == 1, tf.Tensor)


class MixingTest(unittest.TestCase):
    """Mixup/CutMix inside each tower: the network gets the mixed images, the loss the mixed
    labels, smoothed once."""

    def test_mixup_mixes_images_and_labels_at_one_ratio(self):
        images, labels, got, logits, loss = mixed_tower(0.4, 0.0, step=5)
        other = images[::-1]
        # got = lam * x + (1 - lam) * x_reversed: solve for lam on the rows that differ.
        rows = np.abs(images - other) > 0.1
        lam = np.median((got - other)[rows] / (images - other)[rows])
        self.assertTrue(0.0 < lam < 1.0)
        # float32 arithmetic of values within [-1, 1]: a few ulps.
        np.testing.assert_allclose(got, lam * images + (1 - lam) * other, atol=1e-5)
        eye = np.eye(SETTINGS.num_classes, dtype=np.float64)
        targets = lam * eye[labels] + (1 - lam) * eye[labels[::-1]]
        # The network's float32 logits and softmax against float64 NumPy: 1e-5 relative; one
        # smoothing too many (or none) moves the loss by 1e-2.
        self.assertAlmostEqual(loss, smoothed_loss(logits.astype(np.float64), targets), places=4)

    def test_the_mix_follows_the_seed_and_the_step(self):
        first = mixed_tower(0.4, 0.0, step=5)[2]
        again = mixed_tower(0.4, 0.0, step=5)[2]
        later = mixed_tower(0.4, 0.0, step=6)[2]
        np.testing.assert_array_equal(first, again)
        self.assertFalse(np.allclose(first, later))

    def test_cutmix_pastes_a_box_and_weighs_the_labels_by_its_area(self):
        images, labels, got, logits, loss = mixed_tower(0.0, 1.0, step=2)
        from_other = np.all(got == images[::-1], axis=-1) & ~np.all(got == images, axis=-1)
        pasted = from_other[0].mean()  # the same box in every row
        self.assertTrue(0.0 < pasted < 1.0)
        eye = np.eye(SETTINGS.num_classes, dtype=np.float64)
        targets = (1 - pasted) * eye[labels] + pasted * eye[labels[::-1]]
        self.assertAlmostEqual(loss, smoothed_loss(logits.astype(np.float64), targets), places=4)

    def test_without_mixing_the_network_gets_the_images_and_one_hot_labels(self):
        images, labels, got, logits, loss = mixed_tower(0.0, 0.0, step=5)
        np.testing.assert_array_equal(got, images)
        targets = np.eye(SETTINGS.num_classes)[labels]
        self.assertAlmostEqual(loss, smoothed_loss(logits.astype(np.float64), targets), places=4)


if __name__ == "__main__":
    absltest.main()
