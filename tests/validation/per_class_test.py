"""Per-class results: scores against direct loops over the examples, the orderings and their
ties, the CSV and log formats, the confusion image (6 and 1001 classes) and the summary as
TensorBoard's own reader and text plugin see it."""

import csv
import io
import math
import os

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.plugins.text import text_plugin
from tensorboard.util import tensor_util

from inception.validation import per_class

tf1 = tf.compat.v1
NAMES = ("cat", "dog", "bird", "fish")


def random_examples(seed, size):
    """Labels 1..5 (6 never true) and predictions in {0, 1, 2, 4, 5, 6} (3 never predicted)
    over 7 classes, so background is only predicted and two ratios are undefined."""
    rng = np.random.RandomState(seed)
    return rng.choice([1, 2, 3, 4, 5], size), rng.choice([0, 1, 2, 4, 5, 6], size)


def loop_counts(labels, predictions):
    """{label: (examples, predicted, correct)} by walking the pairs one by one."""
    counts = {}
    for label, prediction in zip(labels.tolist(), predictions.tolist()):
        for key, column in ((label, 0), (prediction, 1)):
            counts.setdefault(key, [0, 0, 0])[column] += 1
        if label == prediction:
            counts[label][2] += 1
    return {label: tuple(value) for label, value in counts.items()}


def log_example():
    """Background, cat, dog, bird, fish: recalls 0.40, 6/11, 0.60, 1.0; the confusions "dog
    as bird" and "bird as cat" tie at 2."""
    return np.array([[0, 0, 0, 0, 0],
                     [0, 4, 5, 1, 0],
                     [0, 3, 6, 2, 0],
                     [0, 2, 0, 3, 0],
                     [0, 0, 0, 0, 5]], dtype=np.int64)


def random_confusion(num_classes, seed, examples=20000):
    """Mostly right predictions with random confusions, summed over two batches."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(1, num_classes, examples)
    wrong = rng.rand(examples) < 0.3
    predictions = np.where(wrong, rng.randint(0, num_classes, examples), labels)
    half = examples // 2
    return (per_class.confusion_counts(labels[:half], predictions[:half], num_classes)
            + per_class.confusion_counts(labels[half:], predictions[half:], num_classes))


class ScoresTest(absltest.TestCase):

    def test_scores_match_direct_loops_over_the_examples(self):
        labels, predictions = random_examples(seed=11, size=500)
        confusion = per_class.confusion_counts(labels, predictions, 7)
        expected = loop_counts(labels, predictions)
        scores = per_class.class_scores(confusion, NAMES)
        self.assertEqual([s.label for s in scores], sorted(expected))
        for score in scores:
            examples, predicted, correct = expected[score.label]
            self.assertEqual((score.examples, score.predicted, score.correct),
                             (examples, predicted, correct))
            self.assertEqual(score.name, per_class.label_name(score.label, NAMES))
            for value, numerator, denominator in ((score.precision, correct, predicted),
                                                  (score.recall, correct, examples)):
                if denominator:
                    self.assertAlmostEqual(value, numerator / denominator, places=12)
                else:
                    self.assertTrue(math.isnan(value), score)
        by_label = {s.label: s for s in scores}
        self.assertTrue(math.isnan(by_label[3].precision))
        self.assertTrue(math.isnan(by_label[6].recall))
        self.assertTrue(math.isnan(by_label[0].recall))

    def test_counts_summed_over_batches_equal_those_of_the_concatenation(self):
        labels, predictions = random_examples(seed=5, size=301)
        whole = per_class.confusion_counts(labels, predictions, 7)
        parts = (per_class.confusion_counts(labels[:120], predictions[:120], 7)
                 + per_class.confusion_counts(labels[120:], predictions[120:], 7))
        self.assertEqual(whole.dtype, np.int64)
        self.assertEqual(whole.shape, (7, 7))
        np.testing.assert_array_equal(parts, whole)
        self.assertEqual(whole.sum(), 301)
        self.assertEqual(whole[2, 4], np.sum((labels == 2) & (predictions == 4)))

    def test_out_of_range_labels_and_mismatched_lengths_are_refused(self):
        with self.assertRaises(ValueError):
            per_class.confusion_counts([1, 7], [1, 1], 7)
        with self.assertRaises(ValueError):
            per_class.confusion_counts([1, 2], [-1, 1], 7)
        with self.assertRaises(ValueError):
            per_class.confusion_counts([1, 2], [1], 7)
        np.testing.assert_array_equal(per_class.confusion_counts([], [], 3), np.zeros((3, 3)))

    def test_label_names_background_and_numbers(self):
        self.assertEqual(per_class.label_name(0, NAMES), "background")
        self.assertEqual(per_class.label_name(2, NAMES), "dog")
        self.assertEqual(per_class.label_name(5, NAMES), "5")
        self.assertEqual(per_class.label_name(7, ()), "7")

    def test_background_is_listed_only_with_examples_or_predictions(self):
        confusion = per_class.confusion_counts([1, 2, 2], [1, 1, 2], 5)
        self.assertEqual([s.label for s in per_class.class_scores(confusion, NAMES)], [1, 2])
        confusion[3, 0] += 1
        self.assertEqual([s.label for s in per_class.class_scores(confusion, NAMES)],
                         [0, 1, 2, 3])


class OrderingTest(absltest.TestCase):

    def test_worst_classes_lowest_recall_then_more_examples_then_lower_label(self):
        scores = [per_class.ClassScores(1, "a", 0, 3, 0),
                  per_class.ClassScores(2, "b", 4, 2, 2),
                  per_class.ClassScores(3, "c", 4, 5, 2),
                  per_class.ClassScores(4, "d", 8, 2, 2),
                  per_class.ClassScores(5, "e", 2, 1, 1),
                  per_class.ClassScores(6, "f", 3, 3, 3)]
        worst = per_class.worst_classes(scores, count=5)
        self.assertEqual([s.label for s in worst], [4, 2, 3, 5, 6])
        self.assertEqual([s.label for s in per_class.worst_classes(scores)], [4, 2, 3])

    def test_confused_pairs_largest_first_then_lower_true_then_lower_predicted(self):
        confusion = np.zeros((5, 5), dtype=np.int64)
        confusion[np.diag_indices(5)] = 50
        for (true, predicted), count in {(3, 1): 4, (2, 4): 4, (2, 1): 4, (1, 2): 6,
                                         (4, 0): 1}.items():
            confusion[true, predicted] = count
        pairs = per_class.confused_pairs(confusion, NAMES, count=10)
        self.assertEqual([(p.true_label, p.predicted_label, p.count) for p in pairs],
                         [(1, 2, 6), (2, 1, 4), (2, 4, 4), (3, 1, 4), (4, 0, 1)])
        self.assertEqual(pairs[0], per_class.ConfusedPair(1, "cat", 2, "dog", 6))
        self.assertEqual(pairs[-1].predicted_name, "background")
        self.assertLen(per_class.confused_pairs(confusion, NAMES), 3)
        self.assertEqual(per_class.confused_pairs(np.eye(4, dtype=np.int64), NAMES), [])


class TextTest(absltest.TestCase):

    def test_log_line_names_the_worst_classes_and_most_confused_pairs(self):
        confusion = log_example()
        scores = per_class.class_scores(confusion, NAMES)
        pairs = per_class.confused_pairs(confusion, NAMES)
        expected = ("worst classes: cat 0.40 (4/10), dog 0.55 (6/11), bird 0.60 (3/5); "
                    "most confused: cat as dog 5, dog as cat 3, dog as bird 2")
        self.assertEqual(per_class.log_line(scores, pairs), expected)
        self.assertEqual(per_class.log_line(per_class.worst_classes(scores), pairs), expected)
        self.assertEqual(per_class.log_line(per_class.class_scores(np.diag([0, 1, 2]), NAMES),
                                            []),
                         "worst classes: dog 1.00 (2/2), cat 1.00 (1/1); most confused: none")

    def test_csv_round_trip_with_undefined_ratios_and_a_comma_in_a_name(self):
        names = ("cat, tabby", 'dog "rex"', "bird")
        confusion = per_class.confusion_counts([1, 1, 1, 2, 2, 4], [1, 1, 3, 1, 2, 1], 5)
        path = os.path.join(self.create_tempdir().full_path, "per_class.csv")
        self.assertEqual(per_class.write_csv(path, per_class.class_scores(confusion, names)),
                         path)
        self.assertEqual(os.listdir(os.path.dirname(path)), ["per_class.csv"])
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        self.assertEqual(list(rows[0]), list(per_class.CSV_FIELDS))
        self.assertEqual(rows[0], {"label": "1", "name": "cat, tabby", "examples": "3",
                                   "predicted": "4", "correct": "2", "precision": "0.5000",
                                   "recall": "0.6667"})
        self.assertEqual(rows[1]["name"], 'dog "rex"')
        self.assertEqual((rows[1]["precision"], rows[1]["recall"]), ("1.0000", "0.5000"))
        self.assertEqual(rows[2], {"label": "3", "name": "bird", "examples": "0",
                                   "predicted": "1", "correct": "0", "precision": "0.0000",
                                   "recall": ""})
        self.assertEqual(rows[3], {"label": "4", "name": "4", "examples": "1",
                                   "predicted": "0", "correct": "0", "precision": "",
                                   "recall": "0.0000"})
        self.assertLen(rows, 4)

    def test_markdown_report_tables(self):
        names = ("cat", "dog|puppy", "bird", "fish")
        confusion = log_example()
        report = per_class.markdown_report(per_class.class_scores(confusion, names),
                                           per_class.confused_pairs(confusion, names, 10),
                                           worst=2, pairs_count=4)
        lines = report.splitlines()
        self.assertIn("| label | name | examples | precision | recall |", lines)
        self.assertIn("| 1 | cat | 10 | 0.4444 | 0.4000 |", lines)
        self.assertIn("| 2 | dog\\|puppy | 11 | 0.5455 | 0.5455 |", lines)
        self.assertNotIn("bird | 5 |", report)
        self.assertIn("| 1 | cat | 2 | dog\\|puppy | 5 |", lines)
        self.assertEqual(sum(line.startswith("| ") for line in lines), 2 + 1 + 4 + 1)
        empty = per_class.markdown_report(per_class.class_scores(np.eye(3), names), [])
        self.assertIn("No example was confused.", empty)


def decoded(png):
    """The PIL image of PNG bytes, fully decoded."""
    image = Image.open(io.BytesIO(png))
    image.load()
    return image


class ImageTest(absltest.TestCase):

    def test_six_classes_draw_as_a_png_of_the_size_returned(self):
        labels, predictions = random_examples(seed=2, size=200)
        confusion = per_class.confusion_counts(labels, predictions, 7)
        self.assertEqual(per_class.shown_labels(confusion), [0, 1, 2, 3, 4, 5, 6])
        png, height, width = per_class.confusion_image(confusion, NAMES)
        image = decoded(png)
        self.assertEqual(image.format, "PNG")
        self.assertEqual(image.mode, "RGBA")
        self.assertEqual(image.size, (width, height))
        self.assertGreater(min(width, height), 200)

    def test_past_max_classes_only_the_most_confused_pairs_are_shown(self):
        confusion = np.diag([20, 20, 20, 20, 20, 20, 20]).astype(np.int64)
        for (true, predicted), count in {(1, 2): 9, (3, 1): 7, (4, 5): 5, (2, 3): 4}.items():
            confusion[true, predicted] = count
        self.assertEqual(per_class.shown_labels(confusion, max_classes=7), list(range(7)))
        # The third pair would make five classes; the fourth would fit but is not taken,
        # so the drawing shows a prefix of the ranking.
        self.assertEqual(per_class.shown_labels(confusion, max_classes=4), [1, 2, 3])
        self.assertEqual(per_class.shown_labels(confusion, max_classes=5), [1, 2, 3, 4, 5])
        self.assertEqual(per_class.shown_labels(np.eye(7, dtype=np.int64), max_classes=3),
                         [0, 1, 2])
        png, height, width = per_class.confusion_image(confusion, NAMES, max_classes=4)
        self.assertEqual(decoded(png).size, (width, height))

    def test_1001_classes_draw_at_most_max_classes_of_the_most_confused(self):
        confusion = random_confusion(1001, seed=7)
        shown = per_class.shown_labels(confusion, max_classes=50)
        self.assertBetween(len(shown), 49, 50)
        self.assertEqual(shown, sorted(set(shown)))
        top = per_class.confused_pairs(confusion, (), count=10)
        self.assertContainsSubset({top[0].true_label, top[0].predicted_label}, shown)
        png, height, width = per_class.confusion_image(confusion, ())
        self.assertEqual(decoded(png).size, (width, height))
        self.assertLess(max(width, height), 3000)


class SummaryTest(absltest.TestCase):

    def test_tensorboard_reads_the_image_and_renders_the_text(self):
        confusion = log_example()
        value = per_class.summary(confusion, NAMES, tag_prefix="eval_validation")
        self.assertEqual([v.tag for v in value.value],
                         ["eval_validation/confusion_matrix", "eval_validation/per_class"])
        image = value.value[0].image
        self.assertEqual(decoded(image.encoded_image_string).size, (image.width, image.height))
        self.assertEqual(image.colorspace, 4)
        self.assertEqual(value.value[1].metadata.plugin_data.plugin_name, "text")
        logdir = self.create_tempdir().full_path
        with tf.Graph().as_default():
            writer = tf1.summary.FileWriter(logdir)
            writer.add_summary(value, global_step=42)
            writer.close()
        events = plugin_event_accumulator.EventAccumulator(logdir, size_guidance={"tensors": 0})
        events.Reload()
        self.assertCountEqual(events.PluginTagToContent("text"), ["eval_validation/per_class"])
        self.assertCountEqual(events.PluginTagToContent("images"),
                              ["eval_validation/confusion_matrix"])
        [text] = events.Tensors("eval_validation/per_class")
        self.assertEqual(text.step, 42)
        html = text_plugin.text_array_to_html(tensor_util.make_ndarray(text.tensor_proto),
                                              enable_markdown=True)
        self.assertIn("<table>", html)
        self.assertIn("cat", html)
        [drawn] = events.Tensors("eval_validation/confusion_matrix")
        width, height, png = tensor_util.make_ndarray(drawn.tensor_proto).tolist()
        self.assertEqual(decoded(png).size, (int(width), int(height)))


if __name__ == "__main__":
    absltest.main()
