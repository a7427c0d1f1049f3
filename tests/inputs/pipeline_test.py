"""The input pipeline: crops, damaged records, shards from elsewhere, determinism, balanced
sampling."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from data import tfrecord_format
from inception.config import recipe
from inception.config import settings as settings_lib
from inception.inputs import label_weights
from inception.inputs import pipeline
from inception.inputs import preprocessing
from tests import testing_utils
from tests.inputs.records import jpeg_bytes
from tests.inputs.records import record
from tests.inputs.records import stream
from tests.inputs.records import write_shard

tf1 = tf.compat.v1
NUM_CLASSES = 4
SIZE = 32


def original_key_set_record(encoded, label, name):
    """An Example with exactly the keys the original build_image_data.py wrote (no boxes)."""
    def feature(kind, value):
        if kind == "int":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    features = {
        "image/height": feature("int", 40), "image/width": feature("int", 48),
        "image/colorspace": feature("bytes", b"RGB"), "image/channels": feature("int", 3),
        "image/class/label": feature("int", label),
        "image/class/text": feature("bytes", f"class{label}".encode()),
        "image/format": feature("bytes", b"JPEG"),
        "image/filename": feature("bytes", name.encode()),
        "image/encoded": feature("bytes", encoded),
    }
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def read_all(batch):
    """Every (images, labels) of a finite pipeline, and its corrupt-record count."""
    images, labels = [], []
    with tf1.Session() as session:
        session.run([tf1.local_variables_initializer(), batch.initializer])
        while True:
            try:
                image_batch, label_batch = session.run([batch.images, batch.labels])
            except tf.errors.OutOfRangeError:
                break
            images.append(image_batch)
            labels.append(label_batch)
        corrupt = session.run(batch.corrupt_records)
    return np.concatenate(images), np.concatenate(labels), corrupt


def first_batches(shards, seed, count=3, batch_size=4, augmentation=None):
    with tf.Graph().as_default():
        batch = pipeline.build_train_input(pipeline.TrainStream(
            shards, batch_size, SIZE, NUM_CLASSES, seed=seed, shuffle_buffer=16,
            augmentation=augmentation))
        with tf1.Session() as session:
            session.run([tf1.local_variables_initializer(), batch.initializer])
            return [session.run([batch.images, batch.labels]) for _ in range(count)]


class ShardsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.directory = testing_utils.temp_dir("pipeline")
        good = [record(jpeg_bytes(i), i % 3 + 1, f"img{i}.jpg",
                       boxes=(tfrecord_format.BoundingBox(0.1, 0.2, 0.6, 0.9),)) for i in range(6)]
        truncated = record(jpeg_bytes(100)[:300], 2, "truncated.jpg")
        garbage = record(b"this is not an image at all", 1, "garbage.jpg")
        cls.shards = [write_shard(cls.directory, good[:3] + [truncated], index=0, total=2),
                      write_shard(cls.directory, [garbage] + good[3:], index=1, total=2)]
        # Starts and ends like a JPEG, so the completeness check passes; the decoder fails.
        cls.undecodable_bytes = (b"\xff\xd8\xff\xe0" + np.random.RandomState(7).bytes(500)
                                 + b"\xff\xd9")
        cls.with_undecodable = cls.shards + [write_shard(
            testing_utils.temp_dir("undecodable"),
            [good[0], record(cls.undecodable_bytes, 2, "undecodable.jpg"), good[1]])]

    def test_damaged_records_are_skipped_and_counted(self):
        with tf.Graph().as_default():
            batch = pipeline.build_eval_input(self.shards, 4, SIZE, NUM_CLASSES)
            images, labels, corrupt = read_all(batch)
        self.assertEqual(len(labels), 6)
        self.assertEqual(corrupt, 2)
        self.assertEqual(sorted(labels.tolist()), sorted(i % 3 + 1 for i in range(6)))
        self.assertEqual(images.shape, (6, SIZE, SIZE, 3))
        self.assertGreaterEqual(images.min(), -1.0)
        self.assertLessEqual(images.max(), 1.0)

    def test_a_jpeg_that_looks_complete_but_does_not_decode_is_counted_too(self):
        with tf.Graph().as_default():
            self.assertTrue(tf1.Session().run(
                preprocessing.is_complete_jpeg(tf.constant(self.undecodable_bytes))))
            batch = pipeline.build_eval_input(self.with_undecodable, 4, SIZE, NUM_CLASSES)
            _, labels, corrupt = read_all(batch)
        self.assertEqual(len(labels), 8)
        self.assertEqual(corrupt, 3)

    def test_training_survives_damaged_records(self):
        with tf.Graph().as_default():
            batch = pipeline.build_train_input(pipeline.TrainStream(
                self.shards, 4, SIZE, NUM_CLASSES, seed=1, shuffle_buffer=8))
            with tf1.Session() as session:
                session.run([tf1.local_variables_initializer(), batch.initializer])
                for _ in range(6):  # three passes over the 8 records
                    images, labels = session.run([batch.images, batch.labels])
                corrupt = session.run(batch.corrupt_records)
        self.assertEqual(images.shape, (4, SIZE, SIZE, 3))
        self.assertTrue(set(labels.tolist()) <= {1, 2, 3})
        self.assertGreaterEqual(corrupt, 4)  # 2 damaged records per pass, at least 2 passes

    def test_strict_input_names_the_damaged_file(self):
        with tf.Graph().as_default():
            batch = pipeline.build_eval_input(self.shards, 4, SIZE, NUM_CLASSES,
                                              strict=True)
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                        r"damaged or non-JPEG image .*(truncated|garbage)\.jpg"):
                read_all(batch)

    def test_label_outside_the_model_is_an_error(self):
        with tf.Graph().as_default():
            batch = pipeline.build_eval_input(self.shards, 4, SIZE, num_classes=3)
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "check --num_classes"):
                read_all(batch)

    def test_eval_preprocessing_is_deterministic(self):
        results = []
        for _ in range(2):
            with tf.Graph().as_default():
                results.append(read_all(pipeline.build_eval_input(
                    self.shards, 3, SIZE, NUM_CLASSES))[0])
        np.testing.assert_array_equal(results[0], results[1])

    def test_seed_makes_order_and_distortions_reproducible(self):
        first = first_batches(self.shards, seed=7)
        second = first_batches(self.shards, seed=7)
        other = first_batches(self.shards, seed=8)
        for (images_a, labels_a), (images_b, labels_b) in zip(first, second):
            np.testing.assert_array_equal(images_a, images_b)
            np.testing.assert_array_equal(labels_a, labels_b)
        self.assertFalse(all(np.array_equal(a[0], b[0]) for a, b in zip(first, other)))


class PositionTest(unittest.TestCase):
    """The training stream starts at its tracked position (pipeline.InputBatch.position)."""

    @classmethod
    def setUpClass(cls):
        directory = testing_utils.temp_dir("positions")
        good = [record(jpeg_bytes(i), i % 3 + 1, f"img{i}.jpg") for i in range(6)]
        cls.shards = [write_shard(directory, good[:4], index=0, total=2),
                      write_shard(directory, good[4:], index=1, total=2)]

    def batches(self, position, count):
        return stream(self.shards, 6, position, 2, count, seed=3, size=SIZE,
                      num_classes=NUM_CLASSES)[0]

    def test_a_stream_started_at_a_position_reads_what_the_whole_stream_reads_there(self):
        whole = self.batches(0, 8)  # 16 examples: into the third epoch of 6
        for position in (2, 8, 12):  # inside the first epoch, inside the second, at the third
            with self.subTest(position=position):
                started = self.batches(position, 2)
                for (images, labels), (want_images, want_labels) in zip(
                        started, whole[position // 2:]):
                    np.testing.assert_array_equal(labels, want_labels)
                    np.testing.assert_array_equal(images, want_images)

    def test_each_epoch_reads_every_record_once_with_draws_of_its_own(self):
        whole = self.batches(0, 6)
        orders = [np.concatenate([labels for _, labels in whole[start:start + 3]])
                  for start in (0, 3)]
        names = [sorted(order.tolist()) for order in orders]
        self.assertEqual(names[0], names[1])  # every record once an epoch
        images = [np.concatenate([images for images, _ in whole[start:start + 3]])
                  for start in (0, 3)]
        self.assertFalse(np.array_equal(images[0], images[1]))


class OriginalFormatTest(unittest.TestCase):

    def test_shards_with_the_original_key_set_and_no_boxes(self):
        directory = testing_utils.temp_dir("original")
        shard = write_shard(directory, [original_key_set_record(jpeg_bytes(i), i + 1, f"{i}.jpg")
                                        for i in range(3)])
        with tf.Graph().as_default():
            _, labels, corrupt = read_all(pipeline.build_eval_input([shard], 2, SIZE, 4))
        self.assertEqual(labels.tolist(), [1, 2, 3])
        self.assertEqual(corrupt, 0)
        batches = first_batches([shard], seed=3, count=2, batch_size=2)
        self.assertEqual(batches[0][0].shape, (2, SIZE, SIZE, 3))
        self.assertTrue(set(np.concatenate([b[1] for b in batches]).tolist()) <= {1, 2, 3})


class CropTest(unittest.TestCase):

    def test_crops_stay_inside_the_image_and_cover_the_object(self):
        rng = np.random.RandomState(0)
        crop = recipe.ORIGINAL_CROP
        with tf.Graph().as_default():
            shape_in = tf1.placeholder(tf.int32, [3])
            boxes_in = tf1.placeholder(tf.float32, [None, 4])
            seed_in = tf1.placeholder(tf.int64, [2])
            window = preprocessing.crop_window(shape_in, boxes_in, seed_in, crop)
            with tf1.Session() as session:
                for trial in range(200):
                    height, width = rng.randint(20, 400, size=2)
                    y0, x0 = rng.uniform(0, 0.8, size=2)
                    box = [y0, x0, rng.uniform(y0 + 0.1, 1.0), rng.uniform(x0 + 0.1, 1.0)]
                    boxes = [box] if trial % 5 else np.zeros((0, 4))
                    y, x, h, w = session.run(window, {shape_in: [height, width, 3],
                                                      boxes_in: boxes, seed_in: [trial, 1]})
                    self.assertTrue(0 <= y and 0 <= x and h > 0 and w > 0)
                    self.assertLessEqual(y + h, height)
                    self.assertLessEqual(x + w, width)
                    if trial % 5:
                        covered = self.covered_fraction(box, (y, x, h, w), height, width)
                        whole = h == height and w == width
                        self.assertTrue(whole or covered >= crop.min_object_covered - 0.02,
                                        (trial, covered))

    @staticmethod
    def covered_fraction(box, window, height, width):
        y, x, h, w = window
        top, left = max(box[0] * height, y), max(box[1] * width, x)
        bottom, right = min(box[2] * height, y + h), min(box[3] * width, x + w)
        inside = max(0.0, bottom - top) * max(0.0, right - left)
        return inside / ((box[2] - box[0]) * height * (box[3] - box[1]) * width)

    def test_jpeg_completeness_check(self):
        good = jpeg_bytes(1)
        cases = {"good": (good, True), "trailing bytes": (good + b"\0" * 10, True),
                 "truncated": (good[:-50], False), "not jpeg": (b"\x89PNG....", False),
                 "empty": (b"", False)}
        with tf.Graph().as_default():
            encoded = tf1.placeholder(tf.string, [])
            check = preprocessing.is_complete_jpeg(encoded)
            with tf1.Session() as session:
                for name, (data, expected) in cases.items():
                    self.assertEqual(bool(session.run(check, {encoded: data})), expected, name)


class AugmentationTest(unittest.TestCase):
    """RandAugment and random erasing in the pipeline: seeded, changing the images, and
    leaving the order and the original distortions as they were."""

    @classmethod
    def setUpClass(cls):
        directory = testing_utils.temp_dir("augmented")
        cls.shards = [write_shard(directory, [record(jpeg_bytes(i), i % 3 + 1, f"{i}.jpg")
                                              for i in range(8)])]

    def batches(self, seed=7, **values):
        augmentation = settings_lib.AugmentationSettings(**values) if values else None
        return first_batches(self.shards, seed=seed, count=2, augmentation=augmentation)

    def test_no_augmentation_is_the_original_pipeline(self):
        plain, none = self.batches(), self.batches(augment="none")
        for (images_a, labels_a), (images_b, labels_b) in zip(plain, none):
            np.testing.assert_array_equal(images_a, images_b)
            np.testing.assert_array_equal(labels_a, labels_b)

    def test_each_augmentation_is_seeded_and_changes_only_the_images(self):
        plain = self.batches()
        for values in ({"augment": "randaugment", "randaugment_magnitude": 10},
                       {"random_erasing": 1.0}):
            with self.subTest(**values):
                augmented, again = self.batches(**values), self.batches(**values)
                for (images, labels), (same, _), (original, original_labels) in zip(
                        augmented, again, plain):
                    np.testing.assert_array_equal(images, same)
                    np.testing.assert_array_equal(labels, original_labels)
                    self.assertGreater(np.abs(images - original).max(), 0.1)
                    self.assertLessEqual(np.abs(images).max(), 1.0)


class BalancedSamplingTest(unittest.TestCase):
    """--balanced_sampling: epochs of the usual length whose classes are about equal, and a
    stream that still starts anywhere (an exact resume)."""

    COUNTS = {1: 30, 2: 30, 3: 3}  # label 3 cut to a tenth

    @classmethod
    def setUpClass(cls):
        directory = testing_utils.temp_dir("balanced")
        labels = [label for label, count in cls.COUNTS.items() for _ in range(count)]
        good = [record(jpeg_bytes(i, 16, 16), label, f"img{i}.jpg")
                for i, label in enumerate(labels)]
        cls.shards = [write_shard(directory, good[::2], index=0, total=2),
                      write_shard(directory, good[1::2], index=1, total=2)]
        cls.epoch = len(labels)
        cls.counts = [0] + [cls.COUNTS[label] for label in (1, 2, 3)]

    def labels(self, position, count):
        """The labels of `count` examples from `position` on, and the image of the first."""
        with tf.Graph().as_default():
            batch = pipeline.build_train_input(pipeline.TrainStream(
                self.shards, 3, 8, NUM_CLASSES, seed=5, shuffle_buffer=16,
                examples_per_epoch=self.epoch,
                sampling_weights=label_weights.balanced_weights(self.counts)))
            with tf1.Session() as session:
                session.run([tf1.local_variables_initializer(), batch.position.initializer])
                session.run(batch.position.assign(position))
                session.run(batch.initializer)
                batches = [session.run([batch.images, batch.labels])
                           for _ in range(count // 3)]
        return np.concatenate([labels for _, labels in batches]), batches[0][0]

    def test_classes_come_out_about_equal(self):
        labels, _ = self.labels(0, 10 * self.epoch)
        shares = np.bincount(labels, minlength=NUM_CLASSES)[1:] / len(labels)
        # 630 draws: a share's binomial standard deviation is sqrt(1/3 x 2/3 / 630) = 0.019;
        # 0.08 is four of them. Unbalanced, label 3 would have 3/63 = 0.048.
        np.testing.assert_allclose(shares, [1 / 3] * 3, atol=0.08)

    def test_a_stream_started_at_a_position_reads_what_the_whole_stream_reads_there(self):
        whole, _ = self.labels(0, 3 * self.epoch)
        for position in (6, self.epoch + 12, 2 * self.epoch):
            with self.subTest(position=position):
                started, _ = self.labels(position, 30)
                np.testing.assert_array_equal(started, whole[position:position + 30])

    def test_the_counts_must_come_from_the_shards_they_balance(self):
        self.assertEqual(label_weights.label_counts(self.shards, NUM_CLASSES).tolist(),
                         self.counts)


if __name__ == "__main__":
    absltest.main()
