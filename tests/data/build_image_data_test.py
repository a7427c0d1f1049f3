"""Folder tree -> TFRecord shards: records, conversion, skipped images, bad input, mixed sets."""

import io
import os
import subprocess
import sys
import unittest
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image

from common import image_limits
from data import image_convert
from data import image_folders
from data import shard_writer
from data import tfrecord_format
from inception.inputs import pipeline
from tests import testing_utils

tf1 = tf.compat.v1

ORIGINAL_KEYS = {
    "image/height", "image/width", "image/colorspace", "image/channels", "image/class/label",
    "image/class/synset", "image/class/text", "image/object/bbox/xmin",
    "image/object/bbox/ymin", "image/object/bbox/xmax", "image/object/bbox/ymax",
    "image/object/bbox/label", "image/format", "image/filename", "image/encoded"}
RED = (200, 30, 30)


def save_image(path, mode, size=(32, 24), colour=RED, image_format=None):
    """Writes a solid `colour` image of `size` (width, height) converted to `mode`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image = Image.new("RGB", size, colour).convert(mode)
    image.save(path, format=image_format)
    return path


def save_half_transparent_png(path, size=(32, 24)):
    """Left half opaque red, right half fully transparent (black underneath)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pixels = np.zeros((size[1], size[0], 4), np.uint8)
    pixels[:, : size[0] // 2] = (*RED, 255)
    Image.fromarray(pixels, "RGBA").save(path)
    return path


def save_16_bit_png(path, value, size=(20, 12)):
    """A 16-bit greyscale PNG of constant `value` (0..65535)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.full((size[1], size[0]), value, np.uint16)).save(path)
    return path


def make_tree(root):
    """train/{daisy,rose} and validation/{daisy,rose} with JPEG, PNG, grey and CMYK images.

    Returns {file name: (label name, (width, height))} of the training images.
    """
    images = {
        ("daisy", "rgb.jpg"): ("RGB", (32, 24)), ("daisy", "grey.jpg"): ("L", (20, 30)),
        ("daisy", "cmyk.jpg"): ("CMYK", (28, 28)), ("rose", "rgb2.jpeg"): ("RGB", (40, 16)),
        ("rose", "palette.png"): ("P", (16, 16)), ("rose", "grey.png"): ("L", (24, 24)),
    }
    expected = {}
    for (label, name), (mode, size) in images.items():
        save_image(os.path.join(root, "train", label, name), mode, size)
        expected[name] = (label, size)
    save_half_transparent_png(os.path.join(root, "train", "rose", "alpha.png"))
    expected["alpha.png"] = ("rose", (32, 24))
    save_16_bit_png(os.path.join(root, "train", "daisy", "deep.png"), 32768)
    expected["deep.png"] = ("daisy", (20, 12))
    save_image(os.path.join(root, "validation", "daisy", "v1.jpg"), "RGB")
    save_image(os.path.join(root, "validation", "rose", "v2.png"), "RGB")
    return expected


def build(root, output_dir, **overrides):
    """Runs the folder builder quietly; returns (results, log lines)."""
    values = dict(output_dir=output_dir, train_dir=os.path.join(root, "train"),
                  validation_dir=os.path.join(root, "validation"), train_shards=2,
                  validation_shards=2, num_threads=2)
    values.update(overrides)
    lines = []
    results = image_folders.build_from_folders(image_folders.FolderBuildOptions(**values),
                                               log=lines.append, progress_stream=io.StringIO())
    return results, lines


def read_examples(paths):
    """Every record of `paths` as {key: list of values}, in file order."""
    examples = []
    for path in paths:
        for serialized in tf.data.TFRecordDataset(path):
            features = tf.train.Example.FromString(serialized.numpy()).features.feature
            examples.append({key: _values(feature) for key, feature in features.items()})
    return examples


def _values(feature):
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value) if kind else []


def decode(example):
    """The uint8 [height, width, channels] pixels of an example's JPEG."""
    return tf.io.decode_jpeg(example["image/encoded"][0], channels=0).numpy()


class RoundTripTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = testing_utils.temp_dir("build")
        cls.expected = make_tree(cls.root)
        labels_file = os.path.join(cls.root, "labels.txt")
        with open(labels_file, "w", encoding="utf-8") as handle:
            handle.write("rose\ndaisy\n")  # not alphabetical: the file's order decides labels
        cls.output_dir = os.path.join(cls.root, "out")
        cls.results, cls.lines = build(cls.root, cls.output_dir, labels_file=labels_file)
        cls.train = read_examples(tfrecord_format.list_shards(cls.output_dir, "train"))

    def test_writes_named_shards_and_labels_file(self):
        self.assertEqual(sorted(os.listdir(self.output_dir)), [
            "labels.txt", "train-00000-of-00002", "train-00001-of-00002",
            "validation-00000-of-00002", "validation-00001-of-00002"])
        self.assertEqual(tfrecord_format.read_labels_file(
            os.path.join(self.output_dir, "labels.txt")), ["rose", "daisy"])
        self.assertEqual([(r.split, r.written, r.skipped) for r in self.results],
                         [("train", 8, ()), ("validation", 2, ())])
        self.assertIn("train: 8 images in 2 shards in " + self.output_dir, self.lines)

    def test_records_carry_label_text_filename_and_size(self):
        self.assertEqual(sorted(e["image/filename"][0].decode() for e in self.train),
                         sorted(self.expected))
        label_of = {"rose": 1, "daisy": 2}
        for example in self.train:
            name = example["image/filename"][0].decode()
            label, (width, height) = self.expected[name]
            with self.subTest(image=name):
                self.assertEqual(set(example), ORIGINAL_KEYS)
                self.assertEqual(example["image/class/label"], [label_of[label]])
                self.assertEqual(example["image/class/text"], [label.encode()])
                self.assertEqual(example["image/format"], [b"JPEG"])
                self.assertEqual(example["image/colorspace"], [b"RGB"])
                self.assertEqual(example["image/channels"], [3])
                self.assertEqual((example["image/height"], example["image/width"]),
                                 ([height], [width]))
                self.assertEqual(decode(example).shape, (height, width, 3))
                self.assertEqual(example["image/object/bbox/xmin"], [])

    def test_rgb_jpeg_passes_through_and_others_become_rgb_jpeg(self):
        by_name = {e["image/filename"][0].decode(): e for e in self.train}
        with open(os.path.join(self.root, "train", "daisy", "rgb.jpg"), "rb") as handle:
            self.assertEqual(by_name["rgb.jpg"]["image/encoded"][0], handle.read())
        for name in ("grey.jpg", "cmyk.jpg", "palette.png", "grey.png", "alpha.png", "deep.png"):
            encoded = by_name[name]["image/encoded"][0]
            self.assertTrue(tf.io.is_jpeg(encoded).numpy(), name)
            self.assertEqual(decode(by_name[name]).shape[-1], 3, name)
        # Re-encoding (4:2:0 chroma) moves a saturated colour's mean by several of 255 levels, a
        # flat grey or white by one or two: 12 and 3 still tell these colours apart.
        for name in ("cmyk.jpg", "palette.png"):  # colour survives the conversion
            mean = decode(by_name[name]).reshape(-1, 3).mean(axis=0)
            np.testing.assert_allclose(mean, RED, atol=12, err_msg=name)
        alpha = decode(by_name["alpha.png"]).astype(float)
        np.testing.assert_allclose(alpha[:, :14].mean(axis=(0, 1)), RED, atol=12)
        np.testing.assert_allclose(alpha[:, 18:].mean(axis=(0, 1)), (255, 255, 255), atol=3)
        deep = decode(by_name["deep.png"]).reshape(-1, 3).mean(axis=0)  # mid-grey, not white
        np.testing.assert_allclose(deep, (128, 128, 128), atol=3)

    def test_order_is_shuffled_with_a_fixed_seed(self):
        labels = [e["image/class/label"][0] for e in self.train]
        self.assertNotEqual(labels, sorted(labels))
        self.assertNotEqual(labels, sorted(labels, reverse=True))
        again = os.path.join(testing_utils.temp_dir("build"), "again")
        build(self.root, again, labels_file=os.path.join(self.root, "labels.txt"))
        for name in os.listdir(self.output_dir):
            with open(os.path.join(self.output_dir, name), "rb") as first, \
                    open(os.path.join(again, name), "rb") as second:
                self.assertEqual(first.read(), second.read(), name)

    def test_shards_feed_the_training_input_pipeline(self):
        shards = tfrecord_format.list_shards(self.output_dir, "train")
        with tf.Graph().as_default():
            batch = pipeline.build_train_input(pipeline.TrainStream(
                shards, batch_size=4, image_size=48, num_classes=3, seed=1))
            with tf1.Session() as session:
                session.run(tf1.local_variables_initializer())
                session.run(batch.initializer)
                for _ in range(3):
                    images, labels, corrupt = session.run(
                        [batch.images, batch.labels, batch.corrupt_records])
                    self.assertEqual(images.shape, (4, 48, 48, 3))
                    self.assertTrue(np.all(images >= -1.0) and np.all(images <= 1.0))
                    self.assertTrue(set(labels.tolist()) <= {1, 2}, labels)
                    self.assertEqual(corrupt, 0)


class LabelsAndSkippedImagesTest(unittest.TestCase):

    def test_labels_default_to_sorted_train_folders(self):
        root = testing_utils.temp_dir("build")
        make_tree(root)
        output_dir = os.path.join(root, "out")
        build(root, output_dir, validation_dir="")
        self.assertEqual(tfrecord_format.read_labels_file(os.path.join(output_dir, "labels.txt")),
                         ["daisy", "rose"])
        examples = read_examples(tfrecord_format.list_shards(output_dir, "train"))
        for example in examples:
            expected = {b"daisy": 1, b"rose": 2}[example["image/class/text"][0]]
            self.assertEqual(example["image/class/label"], [expected])
        self.assertEqual(tfrecord_format.list_shards(output_dir, "validation"), [])

    def test_undecodable_images_are_skipped_named_and_counted(self):
        root = testing_utils.temp_dir("build")
        make_tree(root)
        daisy = os.path.join(root, "train", "daisy")
        with open(os.path.join(daisy, "rgb.jpg"), "rb") as handle:
            truncated = handle.read()[:120]
        with open(os.path.join(daisy, "truncated.jpg"), "wb") as handle:
            handle.write(truncated)
        with open(os.path.join(daisy, "notes.txt"), "w", encoding="utf-8") as handle:
            handle.write("not an image")
        output_dir = os.path.join(root, "out")
        results, lines = build(root, output_dir)
        train = results[0]
        self.assertEqual(train.written, 8)
        self.assertEqual(sorted(os.path.basename(path) for path, _ in train.skipped),
                         ["notes.txt", "truncated.jpg"])
        self.assertIn("skipped 2 image(s) that could not be decoded or were too large:", lines)
        self.assertTrue(any(os.path.join(daisy, "truncated.jpg") in line for line in lines))
        self.assertIn(f"  {os.path.join(daisy, 'notes.txt')}: not an image file (no image format "
                      "recognizes it)", lines)
        self.assertFalse(any("BytesIO" in line for line in lines), lines)
        examples = read_examples(tfrecord_format.list_shards(output_dir, "train"))
        self.assertEqual(len(examples), 8)


class BadInputTest(unittest.TestCase):

    def setUp(self):
        self.root = testing_utils.temp_dir("build")
        make_tree(self.root)
        self.output_dir = os.path.join(self.root, "out")

    def assert_refused(self, pattern, **overrides):
        """The build fails with `pattern` and leaves no shard, partial shard or labels.txt."""
        with self.assertRaisesRegex(shard_writer.BuildError, pattern):
            build(self.root, self.output_dir, **overrides)
        leftovers = os.listdir(self.output_dir) if os.path.isdir(self.output_dir) else []
        self.assertEqual([name for name in leftovers if name.startswith(("train", "validation",
                                                                         "labels"))], [])

    def test_missing_label_folder(self):
        labels_file = os.path.join(self.root, "labels.txt")
        with open(labels_file, "w", encoding="utf-8") as handle:
            handle.write("daisy\ntulip\n")
        self.assert_refused(r"label 'tulip' has no folder .*tulip in the train directory; add "
                            r"the folder", labels_file=labels_file)

    def test_empty_label_folder(self):
        os.makedirs(os.path.join(self.root, "train", "tulip"))
        self.assert_refused(r"the label folder .*tulip holds no images; add images",
                            validation_dir="")
        save_image(os.path.join(self.root, "train", "tulip", "old", "t.jpg"), "RGB")
        self.assert_refused(r"tulip holds no images \(only sub-folders, e.g. old: images must "
                            r"sit directly in the label folder\)", validation_dir="")

    def test_label_whose_every_image_fails_to_decode(self):
        with open(os.path.join(self.root, "train", "daisy", "rgb.jpg"), "rb") as handle:
            truncated = handle.read()[:120]
        os.makedirs(os.path.join(self.root, "train", "tulip"))
        for name, data in (("cut.jpg", truncated), ("notes.txt", b"text")):
            with open(os.path.join(self.root, "train", "tulip", name), "wb") as handle:
                handle.write(data)
        save_image(os.path.join(self.root, "validation", "tulip", "ok.jpg"), "RGB")
        self.assert_refused(r"^every train image of label 'tulip' was skipped \(2 file\(s\), "
                            r"e.g. .*cut.jpg: [^\n]+\); nothing was published: replace")

    def test_shards_not_divisible_by_threads(self):
        self.assert_refused(r"--validation_shards=3 is not a multiple of --num_threads=2",
                            validation_shards=3)

    def test_output_directory_with_shards(self):
        os.makedirs(self.output_dir)
        existing = os.path.join(self.output_dir, "train-00000-of-00004")
        with open(existing, "wb") as handle:
            handle.write(b"earlier")
        with self.assertRaisesRegex(shard_writer.BuildError,
                                    r"already contains 1 train shard.*use another "
                                    r"--output_directory or delete them"):
            build(self.root, self.output_dir)
        self.assertEqual(os.listdir(self.output_dir), ["train-00000-of-00004"])
        with open(existing, "rb") as handle:
            self.assertEqual(handle.read(), b"earlier")

    def test_failure_midway_publishes_nothing(self):
        convert = image_convert.to_rgb_jpeg
        seen_while_writing = []

        def failing_convert(data, *args):
            seen_while_writing.append(sorted(os.listdir(self.output_dir)))
            if len(seen_while_writing) == 5:
                raise RuntimeError("disk on fire")
            return convert(data, *args)

        with mock.patch.object(image_convert, "to_rgb_jpeg", failing_convert):
            with self.assertRaisesRegex(RuntimeError, "disk on fire"):
                build(self.root, self.output_dir, num_threads=1)
        partial = [name for names in seen_while_writing for name in names]
        self.assertTrue(partial and all(".partial-" in name for name in partial), partial)
        self.assertFalse(any(tfrecord_format.SHARD_PATTERN.match(name) for name in partial))
        self.assertEqual(os.listdir(self.output_dir), [])


class DataSetGuardsTest(unittest.TestCase):
    """Mixed data sets refused, dropped sub-folders named."""

    def test_mixed_build_refused_even_after_labels_file_removed(self):
        root = testing_utils.temp_dir("build")
        folders = {"validation": "birds cats dogs", "ab": "a b", "bc": "birds cats",
                   "bcd": "birds cats dogs"}
        for split, labels in folders.items():
            for label in labels.split():
                save_image(os.path.join(root, split, label, f"{label}.png"), "RGB")
        out = os.path.join(root, "out")
        build(root, out, train_dir="")

        def refused(train, pattern):
            with self.assertRaisesRegex(shard_writer.BuildError, pattern):
                build(root, out, train_dir=os.path.join(root, train), validation_dir="")

        refused("ab", r"labels.txt already exists and lists other labels; use another "
                r"--output_directory, or remove every shard there and labels.txt.$")
        os.remove(os.path.join(out, "labels.txt"))
        before = sorted(os.listdir(out))
        refused("ab", r"^\S+out holds validation shards of another data set \(validation-"
                r"0000\d-of-00002 has label \d = '\w+', this build('s label \d is '[ab]'| has "
                r"labels 1 to 2)\); use another --output_directory, or remove every shard")
        refused("bc", r"has label 3 = 'dogs', this build has labels 1 to 2\)")
        self.assertEqual(sorted(os.listdir(out)), before)  # nothing written, nothing removed
        build(root, out, train_dir=os.path.join(root, "bcd"), validation_dir="")
        self.assertEqual(len(tfrecord_format.list_shards(out, "train")), 2)

    def test_sub_folders_of_label_folders_are_named(self):
        root = testing_utils.temp_dir("build")
        make_tree(root)
        for nested in ("train/daisy/extra", "train/rose/old", "validation/daisy/more"):
            save_image(os.path.join(root, nested, "x.jpg"), "RGB")
        results, lines = build(root, os.path.join(root, "out"))
        self.assertEqual([r.written for r in results], [8, 2])
        note = "note: ignoring {} sub-folder(s) of the {} label folders in {} (images are read "
        self.assertIn(note.format(2, "train", os.path.join(root, "train")) + "only from the "
                      "folder itself; move them up to use them): daisy/extra, rose/old", lines)
        self.assertTrue(any(line.startswith(note.format(1, "validation", os.path.join(
            root, "validation"))) and line.endswith(": daisy/more") for line in lines), lines)
        self.assertTrue(shard_writer.describe_dropped_folders("x", list("abcdefg")).endswith(
            ": a, b, c, d, e and 2 more"))


class EntryPointTest(unittest.TestCase):

    def run_builder(self, *args, cwd_for_paths):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
                   BUILD_WORKING_DIRECTORY=cwd_for_paths)
        return subprocess.run([sys.executable, "-m", "data.build_image_data", *args],
                              capture_output=True, text=True, timeout=120, env=env, check=False)

    def test_builds_from_relative_paths_with_a_progress_bar(self):
        root = testing_utils.temp_dir("build")
        make_tree(root)
        result = self.run_builder("--train_directory=train", "--validation_directory=validation",
                                  "--output_directory=out", "--max_image_pixels=770",
                                  cwd_for_paths=root)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("images/sec)", result.stderr)
        self.assertIn(f"train: 7 images in 2 shards in {os.path.join(root, 'out')}",
                      result.stdout)  # cmyk.jpg, 28 x 28, is over the limit
        self.assertIn(f"  {os.path.join(root, 'train', 'daisy', 'cmyk.jpg')}: "
                      f"{image_limits.too_large_message(28, 28, 770)}", result.stdout)
        self.assertEqual(len(tfrecord_format.list_shards(os.path.join(root, "out"), "train")), 2)

    def test_bad_input_is_one_line_error(self):
        root = testing_utils.temp_dir("build")
        make_tree(root)
        result = self.run_builder("--train_directory=train", "--output_directory=out",
                                  "--train_shards=3", cwd_for_paths=root)
        self.assertEqual(result.returncode, 1)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        self.assertEqual(errors, ["error: --train_shards=3 is not a multiple of "
                                  "--num_threads=2; each thread writes the same number of "
                                  "shards, so pick a shard count divisible by the thread "
                                  "count."])
        self.assertFalse(os.path.exists(os.path.join(root, "out")))


if __name__ == "__main__":
    absltest.main()
