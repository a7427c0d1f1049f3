"""The trainer's own graph (launch.graph_builder) with accumulation and Mixup / CutMix: every
tower and every micro-batch mixes its batch by a draw of its own, and the loss of each takes
the labels at the ratio its images were mixed by (recovered here from the images alone)."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import recipe
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.driver import resolution
from inception.step import micro_batches
from tests import testing_utils

tf1 = tf.compat.v1
TOWERS, MICRO_BATCHES = 2, 2


def built_and_run(**augmentation):
    """Builds the trainer's graph (2 towers x 2 micro-batches, batch 4 per micro-batch) and
    runs one step's worth of it; returns per tower and micro-batch (input images, mixed
    images, labels, logits, its cross-entropy term), in tower order."""
    settings = settings_lib.train_settings(
        train_dir=testing_utils.temp_dir("graph_builder"),
        data_dir=testing_utils.tiny_demo_data(train=16, validation=4), dataset="demo",
        **testing_utils.tiny_model(aux_head=True), batch_size=4, num_towers=TOWERS,
        accumulate_steps=MICRO_BATCHES, seed=3, eval_every_n_steps=0, **augmentation)
    run = resolution.resolve_run(settings.validate(), log=lambda line: None)
    with tf.Graph().as_default() as graph:
        built = launch.graph_builder(run, None)()
        inputs = [op.outputs[0] for op in graph.get_operations()
                  if op.name.split("/")[-1].startswith(micro_batches.HELD_INPUT_NAME)
                  and op.outputs[0].shape.rank == 4]
        mixed = [tower.outputs.images for tower in built.towers]
        labels = [tower.outputs.labels for tower in built.towers]
        logits = [tower.outputs.logits for tower in built.towers]
        # Each tower's data terms are built under its name scope (towers.py): tower_<i>/.
        cross_entropy = [graph.get_tensor_by_name(f"tower_{index}/cross_entropy/value:0")
                         for index in range(TOWERS * MICRO_BATCHES)]
        with tf1.Session(graph=graph, config=run.placement.session_config()) as session:
            session.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
            session.run(built.input_initializer)  # it reads the input position: after those
            values = session.run([inputs, mixed, labels, logits, cross_entropy])
    return list(zip(*values))


def blend_ratio(images, mixed):
    """lam of mixed = lam * images + (1 - lam) * images reversed, by least squares."""
    difference = images - images[::-1]
    return float(np.sum((mixed - images[::-1]) * difference) / np.sum(difference ** 2))


def smoothed_loss(logits, targets):
    smoothed = targets * (1 - recipe.LABEL_SMOOTHING) + recipe.LABEL_SMOOTHING / targets.shape[1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(np.mean(-(smoothed * log_softmax).sum(axis=1)))


def targets_at(labels, ratio, num_classes):
    one_hot = np.eye(num_classes, dtype=np.float64)[labels]
    return ratio * one_hot + (1 - ratio) * one_hot[::-1]


class MixingThroughTheTrainerTest(unittest.TestCase):

    def test_mixup_draws_a_ratio_for_each_tower_and_micro_batch_and_the_loss_takes_it(self):
        towers = built_and_run(mixup_alpha=0.4)
        self.assertEqual(len(towers), TOWERS * MICRO_BATCHES)
        ratios = []
        for images, mixed, labels, logits, cross_entropy in towers:
            ratio = blend_ratio(images, mixed)
            # The images are exactly that blend (float32 rounding of values in [-1, 1]).
            np.testing.assert_allclose(mixed, ratio * images + (1 - ratio) * images[::-1],
                                       atol=1e-5)
            # The loss of the tower, from its logits and the labels mixed at that ratio
            # (float32 softmax against this float64 one: 1e-5 relative is ample).
            expected = smoothed_loss(logits.astype(np.float64),
                                     targets_at(labels, ratio, logits.shape[1]))
            self.assertAlmostEqual(float(cross_entropy), expected, delta=1e-5 * expected)
            ratios.append(round(ratio, 6))
        self.assertEqual(len(set(ratios)), len(ratios), ratios)  # a draw of its own each

    def test_cutmix_pastes_a_box_of_its_own_in_each_tower_and_micro_batch(self):
        towers = built_and_run(cutmix_alpha=1.0)
        boxes = []
        for images, mixed, labels, logits, cross_entropy in towers:
            # Each pixel is its own image's or the reversed batch's: the pasted box.
            from_other = np.all(mixed == images[::-1], axis=(0, 3)) & \
                ~np.all(mixed == images, axis=(0, 3))
            kept = np.all(mixed == images, axis=(0, 3))
            self.assertTrue(np.all(from_other | kept))
            ratio = 1.0 - from_other.mean()  # the area left to the image itself
            expected = smoothed_loss(logits.astype(np.float64),
                                     targets_at(labels, ratio, logits.shape[1]))
            self.assertAlmostEqual(float(cross_entropy), expected, delta=1e-5 * expected)
            boxes.append(tuple(np.flatnonzero(from_other.any(axis=1))[[0, -1]])
                         if from_other.any() else ())
        self.assertGreater(len(set(boxes)), 1, boxes)


if __name__ == "__main__":
    absltest.main()
