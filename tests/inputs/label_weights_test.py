"""--class_weight: 'balanced' weights are scikit-learn's formula, n_samples / (n_classes x
bincount(y)) over the classes present, computed here from the labels written; a file of
weights by name or number; one-line errors for a label the data set does not have."""

import os
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.inputs import label_weights
from inception.inputs.datasets import DataError
from tests import testing_utils

LABELS = [1] * 10 + [2] * 5 + [3] * 1 + [1] * 2  # label 4 has no example
NUM_CLASSES = 5  # background and labels 1-4


def write_label_shards(folder, labels):
    """Two TFRecord files holding examples with only a label each (all that is counted)."""
    paths = [os.path.join(folder, f"train-0000{i}-of-00002") for i in range(2)]
    for index, path in enumerate(paths):
        with tf.io.TFRecordWriter(path) as writer:
            for label in labels[index::2]:
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "image/class/label": tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[label]))})).SerializeToString())
    return paths


class BalancedTest(unittest.TestCase):

    def test_the_weights_are_scikit_learns_balanced_formula(self):
        shards = write_label_shards(testing_utils.temp_dir("labels"), LABELS)
        lines = []
        counts = label_weights.label_counts(shards, NUM_CLASSES)
        weights, sampling = label_weights.resolve_weights("balanced", False, counts, (),
                                                          NUM_CLASSES, log=lines.append)
        self.assertIsNone(sampling)
        self.assertEqual(lines, [f"class weights (balanced over 3 classes of the training "
                                 f"split): from {min(weights[1:]):.3g} to "
                                 f"{max(weights[1:]):.3g} (label {np.argmax(weights[1:]) + 1})"])
        y = np.array(LABELS)
        present = np.unique(y)
        expected = dict(zip(present, len(y) / (len(present) * np.bincount(y)[present])))
        self.assertEqual(len(weights), NUM_CLASSES)
        for label in range(NUM_CLASSES):
            # both in float64 from the same integers; only the order of operations differs
            self.assertAlmostEqual(weights[label], expected.get(label, 1.0), places=12)

    def test_balanced_sampling_draws_each_record_by_the_same_formula(self):
        shards = write_label_shards(testing_utils.temp_dir("labels"), LABELS)
        counts = label_weights.label_counts(shards, NUM_CLASSES)
        weights, sampling = label_weights.resolve_weights("", True, counts, (), NUM_CLASSES,
                                                          log=lambda line: None)
        self.assertIsNone(weights)
        y = np.array(LABELS)
        present = np.unique(y)
        expected = dict(zip(present, len(y) / (len(present) * np.bincount(y)[present])))
        for label in range(NUM_CLASSES):
            # the same float64 formula as above, written out here
            self.assertAlmostEqual(sampling[label], expected.get(label, 1.0), places=12)


    def test_the_counts_sum_to_the_records_and_a_label_out_of_range_is_one_line(self):
        shards = write_label_shards(testing_utils.temp_dir("labels"), LABELS)
        counts = label_weights.label_counts(shards, NUM_CLASSES)
        self.assertEqual(counts.tolist(), np.bincount(LABELS, minlength=NUM_CLASSES).tolist())
        self.assertEqual(int(counts.sum()), len(LABELS))
        with self.assertRaisesRegex(DataError, r"a training record has the label 3, outside "
                                               r"0 \.\. 2 .* pass the right --num_classes\."):
            label_weights.label_counts(shards, 3)  # labels 1-3 written: 3 has no logit


class FileTest(unittest.TestCase):

    def write(self, text):
        path = os.path.join(testing_utils.temp_dir("weights"), "weights.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def test_labels_by_name_or_number_and_the_rest_weigh_1(self):
        path = self.write("# rare classes count more\ncircle 2.5\n3 4\n\n")
        weights = label_weights.weights_from_file(path, ("circle", "square", "triangle", "ring"),
                                                  NUM_CLASSES)
        self.assertEqual(weights, (1.0, 2.5, 1.0, 4.0, 1.0))

    def test_a_label_the_data_set_does_not_have_is_one_line(self):
        for text, message in (("hexagon 2\n", "names the label 'hexagon', which the data set "
                                              "does not have (its labels: circle, square)"),
                              ("7 2\n", "names the label '7'"),
                              ("circle -1\n", "'-1' is not a positive weight")):
            with self.subTest(text=text):
                with self.assertRaises(DataError) as raised:
                    label_weights.weights_from_file(self.write(text), ("circle", "square"), 3)
                self.assertIn(message, str(raised.exception))
                self.assertNotIn("\n", str(raised.exception))


if __name__ == "__main__":
    absltest.main()
