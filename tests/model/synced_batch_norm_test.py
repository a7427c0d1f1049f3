"""--sync_batch_norm against an independent computation: one step of a tiny Inception v3 on 4
virtual CPU towers whose batch norm is synchronized equals one device on the whole batch with
tf-slim's own batch norm (logits, gradients, moving statistics), with the variables on one
device and replicated; without synchronization the 4 towers differ from it (the check can
fail). Also: the same variables under the same names, groups of 2, and micro-batches. The
tight comparison is on a small batch-norm model; every network of the registry (tiny, and
amplifying rounding through its depth), on 2 towers, within a looser bound."""

import functools
import unittest
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from absl.testing import parameterized

from inception.config import settings as settings_lib
from inception.inputs import pipeline
from inception.model import network
from inception.model import registry
from inception.model import synced_batch_norm
from inception.parallel import all_reduce
from inception.step import step_graph
from tests import skips
from tests import testing_utils
from tests.model import small_models

tf1 = tf.compat.v1
ONE = ["/cpu:0"]
TWO = ["/cpu:0", "/cpu:1"]
FOUR = ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
RING = all_reduce.AllReduceSpec(all_reduce.RING, num_buffers=2)
BATCH = 16
TINY = testing_utils.TINY_INCEPTION
# The small model (two conv + batch-norm layers): tf-slim's fused kernel over 16 images against
# this module's sums over 4 towers of 4, in another order; float32 values of order 1 agree to
# a few ulps per layer: measured at most 2e-7 apart on a Xeon with AMX. Without
# synchronization they differ by 1e-2 and more (test_unsynced_towers_differ).
TOLERANCE = 2e-5
# The tiny Inception amplifies rounding through its ~95 layers (batch norm over 16 values of
# 1x1 maps at the end): this module on one device against tf-slim's kernel, no collective,
# already differs by 1.1e-3 in the logits (each layer's output agrees to 1e-6 relative at the
# first layer and the gap doubles every few layers). Measured on a Xeon with AMX, 4 synced
# towers against one device: logits 6.4e-4, moving statistics 1.9e-4, gradients 0.83 (of
# gradients up to 32); unsynchronized towers: 2.6, 2.9 and 235. The test takes 2 towers (on a
# Xeon with AVX-512: synced 5.3e-4, 1.7e-4, 0.83; unsynchronized 3.5, 1.6 and 66, a gap of
# batch statistics over 8 examples instead of 16, not of rounding).
INCEPTION_TOLERANCE = 1e-2
INCEPTION_GRADIENT_TOLERANCE = 5.0
# The tiny ResNet-50 (a quarter of its channels, 75 px), measured the same way on a Xeon with
# AVX-512, 2 synced towers against one device: logits 1.4e-4, moving statistics 0.031 (its
# stem sees pixels on a 0-255 scale: variances in the thousands), gradients 0.089 (of up to
# 6.8); unsynchronized towers: 1.3, 249 and 9.6.
TINY_RESNET = settings_lib.ModelSettings(num_classes=5, image_size=75, depth_multiplier=0.25,
                                         dataset="synthetic", network="resnet_v1_50")
# {network: (its tiny settings, tolerance of the logits, of the moving statistics, of the
# gradients)}
NETWORKS = {"inception_v3": (TINY, INCEPTION_TOLERANCE, INCEPTION_TOLERANCE,
                             INCEPTION_GRADIENT_TOLERANCE),
            "resnet_v1_50": (TINY_RESNET, 1e-2, 1.0, 1.0)}


def one_step(devices, make_model_fn, input_batch, spec=None, accumulate_steps=1,
             checkpoint=None):
    """One SGD step (rate 1: the update is minus the gradient) over `devices` of the model of
    `make_model_fn(batch_norm_decay)` on `input_batch()`; from the trainable weights at
    `checkpoint` when given. Returns (logits [BATCH, classes] in batch order, {trainable name:
    gradient}, {moving statistic name: value after the step}, every global variable's name
    but the replicated copies')."""
    with tf.Graph().as_default():
        with mock.patch.object(network, "mask_dropout", testing_utils.no_dropout):
            built = step_graph.build_train_graph(
                input_batch(), make_model_fn,
                testing_utils.optimization(initial_learning_rate=1.0, optimizer="sgd",
                                           accumulate_steps=accumulate_steps),
                testing_utils.sharing_of(devices, spec), 64)
        logits = tf.concat([tower.outputs.logits for tower in built.towers], 0)
        trainable = tf1.trainable_variables()
        names = sorted(v.op.name for v in tf1.global_variables()
                       if not v.op.name.startswith("replica_"))
        moving = {v.op.name: v for v in tf1.global_variables() if "moving_" in v.op.name
                  and not v.op.name.startswith("replica_")}
        with tf1.Session(config=testing_utils.cpu_session_config(4)) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            if checkpoint:
                tf1.train.Saver(trainable).restore(session, checkpoint)
            if built.fill_copies is not None:
                session.run(built.fill_copies)
            before = session.run(trainable)
            _, logit_values = session.run([built.stages[0].train_op, logits])
            gradients = {v.op.name: old - new
                         for v, old, new in zip(trainable, before, session.run(trainable))}
            return logit_values, gradients, session.run(moving), names


def fixed_batch(size):
    """() -> an InputBatch of the same BATCH random images of `size` px every step."""
    def make():
        images, labels = testing_utils.random_batch(BATCH, size=size, seed=5)
        iterator = tf1.data.make_initializable_iterator(
            tf.data.Dataset.from_tensors((images, labels)).repeat())
        image_batch, label_batch = iterator.get_next()
        return pipeline.InputBatch(images=image_batch, labels=label_batch,
                                   corrupt_records=tf.constant(0, tf.int64),
                                   initializer=iterator.initializer)
    return make


def small_step(devices, groups=None, spec=None, accumulate_steps=1, compute_dtype=None):
    """one_step of bn_model_fn on 8x8 images."""
    return one_step(devices, lambda decay: small_models.small_batch_norm_model_fn(
        groups, compute_dtype), fixed_batch(8),
                    spec, accumulate_steps)


def groups_of(size, towers):
    """BatchNormGroups of `size` among `towers` towers of one process."""
    return synced_batch_norm.BatchNormGroups(group_size=size, towers_per_worker=towers)


def largest_gap(got, want):
    """The largest absolute difference between the values of two {name: array}."""
    return max(float(np.max(np.abs(got[name] - value))) for name, value in want.items())


class SmallModelTest(unittest.TestCase):
    """Logits, gradients and moving statistics of the small model, exactly enough."""

    @classmethod
    def setUpClass(cls):
        cls.reference = small_step(ONE)

    def assert_close(self, got, want, tolerance=TOLERANCE):
        logits, gradients, moving, names = got
        np.testing.assert_allclose(logits, want[0], rtol=0, atol=tolerance)
        self.assertEqual(names, want[3])
        self.assertLess(largest_gap(gradients, want[1]), tolerance)
        self.assertLess(largest_gap(moving, want[2]), tolerance)

    def test_four_synced_towers_equal_one_device(self):
        for spec in (None, RING):  # variables on one device; replicated
            with self.subTest(replicated=spec is not None):
                self.assert_close(small_step(FOUR, groups_of(4, 4), spec), self.reference)

    def test_unsynced_towers_differ(self):
        got = small_step(FOUR)
        for index in (0, 2):  # the logits, the moving statistics
            gap = (np.max(np.abs(got[0] - self.reference[0])) if index == 0
                   else largest_gap(got[2], self.reference[2]))
            self.assertGreater(gap, 100 * TOLERANCE)

    def test_groups_of_two_normalize_over_their_half(self):
        """Groups of 2 among 4 towers: the first two towers (the batch's first half) normalize
        over that half, as 2 synced towers do over each micro-batch of 2."""
        logits = small_step(FOUR, groups_of(2, 4))[0]
        halves = small_step(TWO, synced_batch_norm.BatchNormGroups(2, 2, micro_batches=2),
                            accumulate_steps=2)[0]
        np.testing.assert_allclose(logits, halves, rtol=0, atol=TOLERANCE)
        self.assertGreater(np.max(np.abs(logits - self.reference[0])), 100 * TOLERANCE)

    def test_bfloat16_towers_keep_float32_statistics(self):
        """Towers built in bf16 (as on GPUs) normalize in float32: the moving statistics stay
        float32 variables, within bf16's rounding of the fp32 run (8 bits of mantissa: 4e-3
        relative per rounding, a few roundings deep; measured 3.6e-3 apart in the logits and
        5.7e-5 in the moving statistics, against 0.29 and 1.3e-2 for unsynchronized towers)."""
        skips.skip_without_cpu_bf16(self)
        got = small_step(FOUR, groups_of(4, 4), RING, compute_dtype=tf.bfloat16)
        self.assertEqual(got[3], self.reference[3])
        self.assertLess(largest_gap(got[2], self.reference[2]), 1e-3)
        np.testing.assert_allclose(got[0], self.reference[0], rtol=0, atol=3e-2)

    def test_keys_of_each_tower(self):
        groups = synced_batch_norm.BatchNormGroups(group_size=2, towers_per_worker=2,
                                                   first_device=2, micro_batches=3)
        keys = [(groups.for_tower(index).group_key, groups.for_tower(index).first_key)
                for index in range(6)]
        group = all_reduce.BATCH_NORM_GROUP_KEYS + 1  # devices 2 and 3 of the cluster
        start, block = all_reduce.BATCH_NORM_INSTANCE_KEYS, synced_batch_norm.KEYS_PER_MICRO_BATCH
        self.assertEqual(keys, [(group, start + block * (index // 2)) for index in range(6)])


class TinyNetworksTest(parameterized.TestCase):
    """Every network of the registry: 2 synced towers as one device, within its amplified
    rounding."""

    @parameterized.parameters(*NETWORKS)
    def test_two_synced_towers_near_one_device_unsynced_far(self, name):
        settings, logits_bound, moving_bound, gradient_bound = NETWORKS[name]
        checkpoint = testing_utils.save_initial_weights(ONE, testing_utils.cpu_session_config(4),
                                                        settings)

        def step(devices, groups=None):
            return one_step(devices, functools.partial(
                registry.make_model_fn, settings,
                options=network.TowerOptions(batch_norm_groups=groups)),
                            fixed_batch(settings.image_size), checkpoint=checkpoint)
        # Two towers: the tiny Inception's graph costs about 10 s of CPU per tower to build.
        reference, synced, unsynced = step(ONE), step(TWO, groups_of(2, 2)), step(TWO)
        self.assertEqual(synced[3], reference[3])  # the same variables, the same names
        np.testing.assert_allclose(synced[0], reference[0], rtol=0, atol=logits_bound)
        self.assertLess(largest_gap(synced[2], reference[2]), moving_bound)
        self.assertLess(largest_gap(synced[1], reference[1]), gradient_bound)
        self.assertGreater(largest_gap(unsynced[1], reference[1]), 5 * gradient_bound)
        self.assertGreater(np.max(np.abs(unsynced[0] - reference[0])), 10 * logits_bound)
        self.assertGreater(largest_gap(unsynced[2], reference[2]), 10 * moving_bound)


if __name__ == "__main__":
    absltest.main()
