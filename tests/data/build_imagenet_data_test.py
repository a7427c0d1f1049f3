"""ImageNet builder and XML -> CSV boxes on a tiny fake ImageNet; what both builders share (on
the ImageNet one); the bundled metadata files; what the builders' entry points load."""

import io
import json
import os
import struct
import subprocess
import sys
import unittest
import warnings
import zlib
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import ExifTags
from PIL import Image
from PIL import ImageFile

from common import image_limits
from data import bounding_boxes
from data import image_convert
from data import imagenet
from data import output_directory
from data import shard_writer
from data import tfrecord_format
from inception.inputs import pipeline
from tests import testing_utils

tf1 = tf.compat.v1

SYNSETS = ["n01440764", "n01443537", "n01484850"]
NAMES = {"n01440764": "tench, Tinca tinca", "n01443537": "goldfish, Carassius auratus",
         "n01484850": "great white shark"}
VALIDATION_SYNSETS = ["n01484850", "n01440764", "n01443537"]  # of val images 1, 2, 3
BOX_CSV = """\
n01440764_1.JPEG,0.1,0.2,0.5,0.6
n01440764_1.JPEG,-0.1,0.3,1.2,0.9
n01443537_1.JPEG,0.5,0.5,0.5,0.9
ILSVRC2012_val_00000002.JPEG,0.25,0.25,0.75,0.75
"""


def write_file(path, text):
    """Writes `text` to `path` (creating its folder); returns `path`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def save_jpeg(path, shade, size=(40, 30)):
    """An RGB JPEG of `size` whose colour depends on `shade` (0..255)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", size, (shade, 255 - shade, 90)).save(path, format="JPEG")


def make_fake_imagenet(root):
    """train/<synset>/<synset>_{1,2}.JPEG, flat validation, metadata files and a box CSV."""
    for index, synset in enumerate(SYNSETS):
        for number in (1, 2):
            save_jpeg(os.path.join(root, "train", synset, f"{synset}_{number}.JPEG"), 40 * index)
    for number in (1, 2, 3):
        save_jpeg(os.path.join(root, "val", f"ILSVRC2012_val_{number:08d}.JPEG"), 60 * number)
    return dict(
        train_dir=os.path.join(root, "train"), validation_dir=os.path.join(root, "val"),
        validation_labels_file=write_file(os.path.join(root, "val_labels.txt"),
                                          "\n".join(VALIDATION_SYNSETS) + "\n"),
        synsets_file=write_file(os.path.join(root, "synsets.txt"), "\n".join(SYNSETS) + "\n"),
        metadata_file=write_file(os.path.join(root, "metadata.txt"), "".join(
            f"{synset}\t{name}\n" for synset, name in [("n00000001", "extra"), *NAMES.items()])),
        bounding_box_file=write_file(os.path.join(root, "boxes.csv"), BOX_CSV))


def build(output_dir, paths, log=lambda line: None, **overrides):
    """Runs the ImageNet builder on the fake tree `paths`, lines to `log`; [SplitResult]."""
    values = dict(paths, output_dir=output_dir, train_shards=2, validation_shards=1,
                  num_threads=1)
    values.update(overrides)
    return imagenet.build_imagenet(imagenet.ImageNetBuildOptions(**values), log=log,
                                   progress_stream=io.StringIO())


def save_huge_png(path, width, height):
    """A black 1-bit PNG of width x height pixels: kilobytes on disk, gigabytes decoded."""
    compressor = zlib.compressobj()
    row = bytes(1 + (width + 7) // 8)  # the filter byte, then 8 pixels a byte
    chunks = [(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)),
              (b"IDAT", b"".join(compressor.compress(row) for _ in range(height))
               + compressor.flush()), (b"IEND", b"")]
    with open(path, "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n" + b"".join(
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
            for kind, body in chunks))


def read_examples(paths):
    """{file name: parsed tf.train.Example features} of every record in `paths`."""
    examples = {}
    for path in paths:
        for serialized in tf.data.TFRecordDataset(path):
            feature = tf.train.Example.FromString(serialized.numpy()).features.feature
            examples[feature["image/filename"].bytes_list.value[0].decode()] = feature
    return examples


def boxes_of(feature):
    """[(xmin, ymin, xmax, ymax)] of an example, rounded to 4 decimals."""
    keys = ("xmin", "ymin", "xmax", "ymax")
    columns = [feature[f"image/object/bbox/{key}"].float_list.value for key in keys]
    return [tuple(round(value, 4) for value in box) for box in zip(*columns)]


class ImageNetBuildTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = testing_utils.temp_dir("build")
        cls.paths = make_fake_imagenet(cls.root)
        cls.output_dir = os.path.join(cls.root, "out")
        cls.results = build(cls.output_dir, cls.paths)
        cls.train = read_examples(tfrecord_format.list_shards(cls.output_dir, "train"))
        cls.validation = read_examples(tfrecord_format.list_shards(cls.output_dir, "validation"))

    def test_labels_synsets_and_names(self):
        self.assertEqual([(r.split, r.written) for r in self.results],
                         [("train", 6), ("validation", 3)])
        self.assertEqual(tfrecord_format.read_labels_file(
            os.path.join(self.output_dir, "labels.txt")), SYNSETS)
        self.assertEqual(len(self.train), 6)
        for name, feature in self.train.items():
            synset = name.split("_")[0]
            self.assertEqual(feature["image/class/label"].int64_list.value,
                             [SYNSETS.index(synset) + 1])
            self.assertEqual(feature["image/class/synset"].bytes_list.value, [synset.encode()])
            self.assertEqual(feature["image/class/text"].bytes_list.value,
                             [NAMES[synset].encode()])

    def test_flat_validation_images_take_the_labels_file_synsets(self):
        for number, synset in enumerate(VALIDATION_SYNSETS, start=1):
            feature = self.validation[f"ILSVRC2012_val_{number:08d}.JPEG"]
            self.assertEqual(feature["image/class/synset"].bytes_list.value, [synset.encode()])
            self.assertEqual(feature["image/class/label"].int64_list.value,
                             [SYNSETS.index(synset) + 1])

    def test_boxes_are_clipped_labelled_and_only_where_listed(self):
        tench = self.train["n01440764_1.JPEG"]
        self.assertEqual(boxes_of(tench), [(0.1, 0.2, 0.5, 0.6), (0.0, 0.3, 1.0, 0.9)])
        self.assertEqual(tench["image/object/bbox/label"].int64_list.value, [1, 1])
        self.assertEqual(boxes_of(self.train["n01443537_1.JPEG"]), [])  # no area: dropped
        self.assertEqual(boxes_of(self.train["n01440764_2.JPEG"]), [])
        shark = self.validation["ILSVRC2012_val_00000002.JPEG"]
        self.assertEqual(boxes_of(shark), [(0.25, 0.25, 0.75, 0.75)])
        self.assertEqual(shark["image/object/bbox/label"].int64_list.value, [1])

    def test_shards_with_boxes_feed_the_training_input_pipeline(self):
        shards = tfrecord_format.list_shards(self.output_dir, "train")
        with tf.Graph().as_default():
            batch = pipeline.build_train_input(pipeline.TrainStream(
                shards, batch_size=3, image_size=32, num_classes=len(SYNSETS) + 1, seed=1))
            with tf1.Session() as session:
                session.run(tf1.local_variables_initializer())
                session.run(batch.initializer)
                images, labels = session.run([batch.images, batch.labels])
        self.assertEqual(images.shape, (3, 32, 32, 3))
        self.assertTrue(set(labels.tolist()) <= {1, 2, 3})


class ImageNetBadInputTest(unittest.TestCase):

    def setUp(self):
        self.root = testing_utils.temp_dir("build")
        self.paths = make_fake_imagenet(self.root)
        self.output_dir = os.path.join(self.root, "out")

    def assert_refused(self, pattern, **overrides):
        """The build fails with `pattern` before creating the output directory."""
        with self.assertRaisesRegex(shard_writer.BuildError, pattern):
            build(self.output_dir, self.paths, **overrides)
        self.assertFalse(os.path.exists(self.output_dir))

    def test_validation_labels_must_match_the_images(self):
        write_file(self.paths["validation_labels_file"], "n01440764\n")
        self.assert_refused(r"holds 3 files but .* lists 1 synsets")

    def test_validation_label_outside_the_synsets(self):
        write_file(self.paths["validation_labels_file"], "n01440764\nn09999999\nn01440764\n")
        self.assert_refused(r"line 2 names 'n09999999', which is not in --labels_file")

    def test_synset_without_a_name(self):
        write_file(self.paths["metadata_file"], "n01440764\ttench\n")
        self.assert_refused(r"has no name for 2 synset\(s\) \(e.g. n01443537\)")

    def test_synset_without_a_training_folder(self):
        write_file(self.paths["synsets_file"], "\n".join(SYNSETS + ["n01491361"]) + "\n")
        write_file(self.paths["metadata_file"], "n01491361\ttiger shark\n" + "".join(
            f"{synset}\t{name}\n" for synset, name in NAMES.items()))
        self.assert_refused(r"label 'n01491361' has no folder")

    def test_malformed_box_csv(self):
        write_file(self.paths["bounding_box_file"], "n01440764_1.JPEG,0.1,0.2,0.5\n")
        self.assert_refused(r"boxes.csv line 1 is not `filename,xmin,ymin,xmax,ymax`")


class SharedWriterTest(unittest.TestCase):
    """Other splits' labels, stale partial files, EXIF orientation, the pixel limit."""

    setUp = ImageNetBadInputTest.setUp  # a fresh fake ImageNet per test

    def test_other_splits_are_compared_by_synset(self):
        build(self.output_dir, self.paths, train_dir="")
        os.remove(os.path.join(self.output_dir, "labels.txt"))
        swapped = write_file(os.path.join(self.root, "s.txt"), "n01443537\nn01440764\nn01484850\n")
        with self.assertRaisesRegex(shard_writer.BuildError, r"holds validation shards of "
                                    r"another data set \(validation-00000-of-00001 has label "
                                    r"([12]) = 'n0144\d+', this build's label \1 is 'n0144"):
            build(self.output_dir, self.paths, validation_dir="", synsets_file=swapped)
        build(self.output_dir, self.paths, validation_dir="")  # texts differ, synsets agree

    def test_stale_partial_files_are_removed_and_others_kept(self):
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()
        host = output_directory.temporary_shard_path("x")[len("x.partial-"):].rsplit("-", 1)[0]
        stale = [f"train-00000-of-00002.partial-{dead}",
                 f"validation-00003-of-00004.partial-{host}-{dead}"]
        kept = [f"train-00001-of-00002.partial-{os.getpid()}",  # a build still running
                f"train-00000-of-00002.partial-other-machine-{dead}", f"notes.partial-{dead}",
                f"train-00000-of-00002.partial-{dead}.bak", "train-00000-of-00002.partial-x"]
        for name in stale + kept:
            write_file(os.path.join(self.output_dir, name), "half a shard")
        os.makedirs(os.path.join(self.paths["validation_dir"], "extra"))
        lines = []
        build(self.output_dir, self.paths, log=lines.append)
        self.assertEqual(sorted(name for name in os.listdir(self.output_dir)
                                if ".partial-" in name), sorted(kept))
        self.assertIn(f"removed 2 partial shard file(s) left in {self.output_dir} by builds "
                      "that were killed; kept 2 of builds still running or on other machines "
                      "(delete those by hand once no build writes there)", lines)
        self.assertIn("extra", [line.rsplit(": ", 1)[-1] for line in lines if "flat" in line])

    def test_exif_rotation_is_applied_to_pixels_size_and_boxes(self):
        pixels = np.zeros((20, 40, 3), np.uint8)  # stored wider than tall: red left, blue right
        pixels[:, :20], pixels[:, 20:] = (220, 20, 20), (20, 20, 220)
        for name, orientation in (("n01440764_1", 6), ("n01440764_2", 1)):  # 6: turn 90° right
            exif = Image.Exif()
            exif[ExifTags.Base.Orientation] = orientation
            Image.fromarray(pixels).save(os.path.join(self.paths["train_dir"], "n01440764",
                                                      f"{name}.JPEG"), exif=exif, quality=95)
        build(self.output_dir, self.paths)
        train = read_examples(tfrecord_format.list_shards(self.output_dir, "train"))
        portrait = train["n01440764_1.JPEG"]
        encoded = portrait["image/encoded"].bytes_list.value[0]
        upright = tf.io.decode_jpeg(encoded).numpy().astype(float)
        self.assertEqual([portrait[f"image/{key}"].int64_list.value for key in ("height", "width")]
                         + [upright.shape], [[40], [20], (40, 20, 3)])
        # Re-encoding moves colours by several levels; the halves differ by 200 in red and blue.
        np.testing.assert_allclose(upright[:18].mean(axis=(0, 1)), (220, 20, 20), atol=12)
        np.testing.assert_allclose(upright[22:].mean(axis=(0, 1)), (20, 20, 220), atol=12)
        self.assertNotIn(ExifTags.Base.Orientation, Image.open(io.BytesIO(encoded)).getexif())
        self.assertEqual(boxes_of(portrait), [(0.4, 0.1, 0.8, 0.5), (0.1, 0.0, 0.7, 1.0)])
        for name in ("n01440764_2.JPEG", "n01443537_1.JPEG"):  # upright tag, no tag: unchanged
            with open(os.path.join(self.paths["train_dir"], name[:9], name), "rb") as handle:
                self.assertEqual(train[name]["image/encoded"].bytes_list.value[0], handle.read())

    def test_oversized_images_are_refused_from_the_header_before_decoding(self):
        huge = os.path.join(self.paths["train_dir"], "n01443537", "huge.png")
        save_huge_png(huge, 20000, 20000)  # 400 megapixels: above twice Pillow's own limit
        loaded, load = [], ImageFile.ImageFile.load
        with mock.patch.object(Image, "MAX_IMAGE_PIXELS", image_limits.MAX_IMAGE_PIXELS), \
                mock.patch.object(ImageFile.ImageFile, "load", lambda image: (
                    loaded.append(image.size), load(image))[1]), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = build(self.output_dir, self.paths)
            save_huge_png(huge, 12000, 12000)  # 144 megapixels: Pillow alone would warn
            with open(huge, "rb") as handle, self.assertRaisesRegex(
                    image_convert.UndecodableImageError, r"^the image is 12000 x 12000 pixels"):
                image_convert.to_rgb_jpeg(handle.read())
        self.assertEqual((results[0].written, results[0].skipped), (6, ((huge, image_limits.
                         too_large_message(20000, 20000, image_limits.MAX_IMAGE_PIXELS)),)))
        self.assertIn((40, 30), loaded)
        self.assertFalse({(20000, 20000), (12000, 12000)} & set(loaded), loaded)
        self.assertFalse([w for w in caught if w.category is Image.DecompressionBombWarning])


ANNOTATION = """<annotation>
  <folder>{synset}</folder><filename>{name}</filename>
  <size><width>200</width><height>100</height><depth>3</depth></size>
  {objects}
</annotation>"""
OBJECT = ("<object><name>{synset}</name><bndbox><xmin>{0}</xmin><ymin>{1}</ymin>"
          "<xmax>{2}</xmax><ymax>{3}</ymax></bndbox></object>")


def write_annotation(directory, name, synset, *boxes):
    """An ILSVRC-style XML for a 200x100 image with pixel `boxes` (xmin, ymin, xmax, ymax)."""
    objects = "".join(OBJECT.format(*box, synset=synset) for box in boxes)
    return write_file(os.path.join(directory, synset, f"{name}.xml"),
                      ANNOTATION.format(synset=synset, name=name, objects=objects))


class ProcessBoundingBoxesTest(unittest.TestCase):

    def test_xml_annotations_become_normalised_clipped_csv_lines(self):
        root = testing_utils.temp_dir("build")
        annotations = os.path.join(root, "bbox")
        write_annotation(annotations, "n01440764_1", "n01440764", (20, 10, 120, 60),
                         (-5, 50, 250, 100))
        write_annotation(annotations, "n01443537_2", "n01443537", (0, 0, 100, 100))
        write_annotation(annotations, "n01443537_3", "n01443537")  # no objects
        broken = write_file(os.path.join(annotations, "n01443537", "broken.xml"), "<annotation")
        output = os.path.join(root, "boxes.csv")
        summary = bounding_boxes.convert_annotations(annotations, output)
        with open(output, encoding="utf-8") as handle:
            self.assertEqual(handle.read().splitlines(), [
                "n01440764_1.JPEG,0.1000,0.1000,0.6000,0.6000",
                "n01440764_1.JPEG,0.0000,0.5000,1.0000,1.0000",
                "n01443537_2.JPEG,0.0000,0.0000,0.5000,1.0000"])
        self.assertEqual((summary.files, summary.images_with_boxes, summary.boxes), (4, 2, 3))
        self.assertEqual([path for path, _ in summary.skipped], [broken])
        self.assertEqual(bounding_boxes.read_box_csv(output)["n01443537_2.JPEG"],
                         (tfrecord_format.BoundingBox(0.0, 0.0, 0.5, 1.0),))

    def test_entry_points_from_xml_to_shards(self):
        root = testing_utils.temp_dir("build")
        paths = make_fake_imagenet(root)
        write_annotation(os.path.join(root, "bbox"), "n01484850_2", "n01484850",
                         (100, 25, 200, 75))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
                   BUILD_WORKING_DIRECTORY=root)

        def run(module, *args):
            result = subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                                    text=True, timeout=120, env=env, check=False)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            return result

        save_jpeg(os.path.join(root, "train", "n01440764", "n01440764_2.JPEG"), 0, (80, 60))
        run("data.process_bounding_boxes", "--annotations_directory=bbox",
            "--output_file=xml_boxes.csv")
        result = run("data.build_imagenet_data", "--train_directory=train",
                     "--validation_directory=val", "--output_directory=out",
                     f"--validation_labels_file={paths['validation_labels_file']}",
                     f"--labels_file={paths['synsets_file']}",
                     f"--imagenet_metadata_file={paths['metadata_file']}",
                     "--bounding_box_file=xml_boxes.csv", "--train_shards=2",
                     "--validation_shards=2", "--num_threads=2", "--max_image_pixels=1200")
        self.assertIn("train: 1 of 6 images have bounding boxes", result.stdout)
        self.assertIn(image_limits.too_large_message(80, 60, 1200), result.stdout)  # 40 x 30 pass
        train = read_examples(tfrecord_format.list_shards(os.path.join(root, "out"), "train"))
        self.assertEqual(boxes_of(train["n01484850_2.JPEG"]), [(0.5, 0.25, 1.0, 0.75)])


class BundledMetadataTest(unittest.TestCase):

    def test_the_1000_synsets_in_standard_order_with_names(self):
        synsets = imagenet.read_synsets(imagenet.DEFAULT_SYNSETS_FILE)
        self.assertEqual(len(synsets), 1000)
        self.assertEqual(synsets, sorted(synsets))
        self.assertEqual((synsets[0], synsets[-1]), ("n01440764", "n15075141"))
        names = imagenet.read_human_names(imagenet.DEFAULT_METADATA_FILE, synsets)
        self.assertEqual(names["n01440764"], "tench, Tinca tinca")
        self.assertEqual(names["n15075141"], "toilet tissue, toilet paper, bathroom tissue")
        self.assertTrue(all(name and "\t" not in name for name in names.values()))


def modules_loaded_by_import(module):
    """{"tensorflow", "tf_slim", "inception"}: whether each is in sys.modules after a fresh
    process imports `module`."""
    script = ("import json, sys\n"
              f"import {module}\n"
              "names = ('tensorflow', 'tf_slim', 'inception')\n"
              "print(json.dumps({name: name in sys.modules for name in names}))\n")
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=300, check=False,
                               env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    if completed.returncode != 0:
        raise AssertionError(f"importing {module} failed: {completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


class BuilderImportsTest(unittest.TestCase):
    """Building shards needs TensorFlow but never tf-slim or the application; converting boxes
    needs neither. Each module in its own process: importing one defines its flags."""

    def test_shard_builders_load_no_tf_slim_and_nothing_of_inception(self):
        for module in ("data.build_image_data", "data.build_imagenet_data"):
            loaded = modules_loaded_by_import(module)
            self.assertFalse(loaded["tf_slim"], module)
            self.assertFalse(loaded["inception"], module)

    def test_the_box_converter_loads_no_tensorflow(self):
        loaded = modules_loaded_by_import("data.process_bounding_boxes")
        self.assertEqual(loaded, {"tensorflow": False, "tf_slim": False, "inception": False})


if __name__ == "__main__":
    absltest.main()
