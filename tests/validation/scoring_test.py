"""Scoring one checkpoint: metrics against a hand computation, ties in the top k, and the
moving averages evaluation restores (the job around it: job_test)."""

import dataclasses
import os
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import recipe
from inception.inputs import datasets
from inception.inputs import pipeline
from inception.run import checkpoint_io
from inception.validation import scoring
from tests import testing_utils
from tests import tiny_eval

tf1 = tf.compat.v1
NUM_CLASSES = tiny_eval.TINY_EVAL.num_classes
DATA = testing_utils.DemoData(train=1, validation=7)


def eval_features_and_labels(shards):
    """Image means and labels of the evaluation pipeline (one pass)."""
    with tf.Graph().as_default():
        batch = pipeline.build_eval_input(shards, 100, tiny_eval.TINY_EVAL.image_size,
                                          NUM_CLASSES)
        with tf1.Session() as session:
            session.run([tf1.local_variables_initializer(), batch.initializer])
            images, labels = session.run([batch.images, batch.labels])
    return images.mean(axis=(1, 2, 3)), labels


def hand_scores(logits, labels):
    """precision@1, recall@5 (ranking the labels 1 and up: the background, 0, is never a
    prediction) and mean cross-entropy (over every logit) computed with NumPy."""
    ranked = np.array(logits, np.float64)
    ranked[:, 0] = -np.inf
    top1 = np.mean(np.argmax(ranked, axis=1) == labels)
    ranks = np.array([np.sum(row > row[label]) for row, label in zip(ranked, labels)])
    top5 = np.mean(ranks < 5)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -np.mean(log_softmax[np.arange(len(labels)), labels])
    return top1, top5, loss


class MetricsTest(unittest.TestCase):

    def test_scores_match_a_hand_computation_with_a_partial_last_batch(self):
        directory = testing_utils.temp_dir("metrics")
        rng = np.random.RandomState(3)
        raw = {"w": rng.normal(size=NUM_CLASSES).astype(np.float32),
               "b": rng.normal(size=NUM_CLASSES).astype(np.float32)}
        averaged = {"w": rng.normal(scale=4.0, size=NUM_CLASSES).astype(np.float32),
                    "b": rng.normal(size=NUM_CLASSES).astype(np.float32)}
        path = tiny_eval.write_tiny_checkpoint(directory, raw, averaged, step=42)
        shards = datasets.resolve_dataset("demo", DATA.path).shards("validation")
        graph = tiny_eval.tiny_eval_graph(DATA.path, batch_size=3)
        result = scoring.evaluate_checkpoint(graph, path, show_progress=False)

        features, labels = eval_features_and_labels(shards)
        self.assertEqual(len(labels), 7)
        logits = features[:, None] * averaged["w"] + averaged["b"]
        top1, top5, loss = hand_scores(logits, labels)
        self.assertEqual(result.step, 42)
        self.assertEqual(result.num_examples, 7)  # batches of 3, 3 and 1
        self.assertAlmostEqual(result.precision_at_1, top1, places=6)
        self.assertAlmostEqual(result.recall_at_5, top5, places=6)
        # Counts are exact; the loss is TensorFlow's float32 cross-entropy of 7 examples
        # against NumPy's float64: float32 rounding (7 digits) of a loss of order 1.
        self.assertAlmostEqual(result.loss, loss, places=4)
        raw_logits = features[:, None] * raw["w"] + raw["b"]
        self.assertNotAlmostEqual(hand_scores(raw_logits, labels)[2], result.loss, places=3)

    def test_num_examples_limits_the_count(self):
        path, graph = tiny_eval.uniform_checkpoint_and_graph(DATA.path, "limit", step=1,
                                                                 max_examples=5)
        result = scoring.evaluate_checkpoint(graph, path, show_progress=False)
        self.assertEqual(result.num_examples, 5)

    def test_result_line_format(self):
        result = scoring.EvalResult(step=3, precision_at_1=0.5, recall_at_5=0.75, loss=1.0,
                                    num_examples=8)
        self.assertEqual(result.line(), "precision @ 1 = 0.5000 recall @ 5 = 0.7500 [8 examples]")
        # 5 classes (and the background's logit): every class is in the top 5.
        few = scoring.EvalResult(step=3, precision_at_1=0.5, recall_at_5=1.0, loss=1.0,
                                 num_examples=8, confusion=np.zeros((6, 6), np.int64))
        self.assertEqual(few.line(), "precision @ 1 = 0.5000 recall @ 5 = 1.0000 (always, with "
                                     "5 classes) [8 examples]")
        many = dataclasses.replace(few, confusion=np.zeros((7, 7), np.int64))
        self.assertEqual(many.line(), "precision @ 1 = 0.5000 recall @ 5 = 1.0000 [8 examples]")


class BatchScoresTest(unittest.TestCase):

    def test_ties_count_as_in_the_top_k_and_the_background_is_never_ranked(self):
        # The background's logit (first) is the highest of every row, and ranks nowhere.
        rows = [([9, 5, 1, 1, 1, 1, 1, 1], 1),  # the one highest: top 1
                ([9, 3, 3, 0, 0, 0, 0, 0], 2),  # tied for the highest: top 1 too
                ([9, 0, 4, 3, 0, 0, 0, 0], 3),  # second: top 5 only
                ([9, 6, 5, 4, 3, 2, 2, 0], 6),  # tied for 5th and 6th place: top 5
                ([9, 6, 5, 4, 3, 2, 1, 0], 6),  # 6th: neither
                ([9, 1, 1, 1, 1, 1, 1, 1], 7)]  # all tied: top 1
        logits = np.array([row for row, _ in rows], np.float32)
        labels = np.array([label for _, label in rows], np.int32)
        with tf.Graph().as_default():
            scores = scoring.batch_scores(tf.constant(logits), tf.constant(labels))
            with tf1.Session() as session:
                top1, top5, loss_sum = session.run(scores)
        self.assertEqual((int(top1), int(top5)), (3, 5))
        in_top_k = [tf.math.in_top_k(labels - 1, logits[:, 1:], k).numpy().sum()
                    for k in (1, 5)]
        self.assertEqual([int(top1), int(top5)], in_top_k)
        # float32 cross-entropies of 4.0 to 8.1 (the background's logit in every softmax)
        # summed over 6 rows against NumPy's float64: the sum (about 39.2) has a float32 ulp
        # of 3.8e-6, and each of the 6 terms is rounded too: 2e-5 allows a few ulps.
        self.assertAlmostEqual(loss_sum, hand_scores(logits.astype(np.float64), labels)[2] * 6,
                               delta=2e-5)


class RestoreMapTest(unittest.TestCase):

    @staticmethod
    def model_variables():
        """A trainable weight and a non-trainable statistic, as batch norm has."""
        weight = tf1.get_variable("model/w", initializer=[1.0, 2.0])
        statistic = tf1.get_variable("model/moving_mean", initializer=[3.0], trainable=False)
        return weight, statistic

    def test_trainable_variables_restore_from_their_averages_the_rest_as_they_are(self):
        with tf.Graph().as_default():
            weight, statistic = self.model_variables()
            step = tf1.train.get_or_create_global_step()
            self.assertEqual(checkpoint_io.restore_map_with_averages(tf1.global_variables()),
                             {"model/w/ExponentialMovingAverage": weight,
                              "model/moving_mean": statistic, "global_step": step})
            self.assertEqual(checkpoint_io.restore_map_with_averages([statistic]),
                             {"model/moving_mean": statistic})

    def test_the_averages_training_writes_are_the_weights_evaluation_gets(self):
        directory = testing_utils.temp_dir("averages")
        with tf.Graph().as_default():
            weight, statistic = self.model_variables()
            averages = tf1.train.ExponentialMovingAverage(recipe.MOVING_AVERAGE_DECAY)
            averages.apply([weight])
            with tf1.Session() as session:
                session.run(tf1.global_variables_initializer())
                session.run([averages.average(weight).assign([5.0, 6.0]),
                             statistic.assign([7.0])])
                path = tf1.train.Saver().save(session, os.path.join(directory, "model.ckpt"))
        with tf.Graph().as_default():
            weight, statistic = self.model_variables()
            saver = tf1.train.Saver(checkpoint_io.restore_map_with_averages(tf1.global_variables()))
            with tf1.Session() as session:
                saver.restore(session, path)
                np.testing.assert_array_equal(session.run(weight), [5.0, 6.0])
                np.testing.assert_array_equal(session.run(statistic), [7.0])


if __name__ == "__main__":
    absltest.main()
