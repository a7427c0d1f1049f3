"""Data sets: resolving a name and directory (shards, or a folder of images read through its
cached shards) to classes and sizes, counting shard records, and each kind of data set's
training defaults (the trainer's use of them: driver/launch_test)."""

import io
import os
import unittest
from unittest import mock

import tensorflow as tf
from absl.testing import absltest
from PIL import Image

from data import cache_stamp
from data import demo_data
from data import tfrecord_format
from inception.config import recipe
from inception.inputs import datasets
from tests import testing_utils

DEMO_DIR = None
DEMO_COUNTS = {"train": 12, "validation": 5}


def setUpModule():
    global DEMO_DIR  # pylint: disable=global-statement
    DEMO_DIR = testing_utils.tiny_demo_data(**DEMO_COUNTS)


def write_records(directory, name, count):
    """A TFRecord file `name` in `directory` holding `count` small records; returns its path.
    Counting reads record framing only, so the payloads need not be Examples."""
    path = os.path.join(directory, name)
    with tf.io.TFRecordWriter(path) as writer:
        for index in range(count):
            writer.write(f"record {index} of {name}".encode())
    return path


def own_data(labels=("cat", "dog", "owl"), train=(3, 4), validation=(2,)):
    """A directory of hand-written shards (records per shard for each split) and, unless
    `labels` is None, a labels.txt."""
    directory = testing_utils.temp_dir("own_data")
    for split, counts in (("train", train), ("validation", validation)):
        for index, count in enumerate(counts):
            write_records(directory, tfrecord_format.shard_name(split, index, len(counts)),
                          count)
    if labels is not None:
        tfrecord_format.write_labels_file(os.path.join(directory, tfrecord_format.LABELS_FILE),
                                          labels)
    return directory


class ResolveTest(unittest.TestCase):

    def test_demo_has_its_labels_plus_background_and_counts_its_shards(self):
        dataset = datasets.resolve_dataset("demo", DEMO_DIR)
        self.assertEqual((dataset.name, dataset.data_dir), ("demo", DEMO_DIR))
        self.assertEqual(dataset.label_names, demo_data.CLASS_NAMES)
        self.assertEqual(dataset.num_classes, len(demo_data.CLASS_NAMES) + 1)
        self.assertEqual(dataset.known_examples, {})  # generated with any counts: counted
        for split, count in DEMO_COUNTS.items():
            self.assertEqual(dataset.num_examples(split), count, split)

    def test_no_name_and_no_directory_is_the_cached_demo(self):
        lines = []
        with mock.patch.object(demo_data, "ensure_demo_data", return_value=DEMO_DIR) as ensure:
            dataset = datasets.resolve_dataset("", "", log=lines.append)
        ensure.assert_called_once_with(log=lines.append)
        self.assertEqual((dataset.name, dataset.data_dir), ("demo", DEMO_DIR))

    def test_a_directory_with_labels_is_custom_data(self):
        directory = own_data()
        dataset = datasets.resolve_dataset("", directory)
        self.assertEqual(dataset.name, "custom")
        self.assertEqual(dataset.label_names, ("cat", "dog", "owl"))
        self.assertEqual(dataset.num_classes, 4)
        self.assertEqual(dataset.num_examples("train"), 7)  # 3 + 4 over two shards
        self.assertEqual(dataset.num_examples("validation"), 2)
        # --num_classes that agrees with labels.txt changes nothing.
        self.assertEqual(datasets.resolve_dataset("custom", directory, num_labels=3), dataset)

    def test_num_classes_that_disagrees_with_the_labels_file(self):
        directory = own_data()
        with self.assertRaises(datasets.DataError) as caught:
            datasets.resolve_dataset("", directory, num_labels=5)
        self.assertEqual(str(caught.exception),
                         f"--num_classes=5 but {directory}/labels.txt lists 3 labels; drop "
                         "--num_classes or fix the file.")

    def test_num_classes_stands_in_for_a_missing_labels_file(self):
        dataset = datasets.resolve_dataset("", own_data(labels=None), num_labels=7)
        self.assertEqual((dataset.num_classes, dataset.label_names), (8, ()))

    def test_known_sets_take_their_label_count_and_sizes_without_reading(self):
        empty = testing_utils.temp_dir("known")  # no shards: nothing may be counted
        for name, known in datasets.KNOWN_DATASETS.items():
            with self.subTest(name=name):
                dataset = datasets.resolve_dataset(name, empty)
                self.assertEqual(dataset.num_classes, known.num_labels + 1)
                for split, count in known.examples.items():
                    self.assertEqual(dataset.num_examples(split), count)
                with self.assertRaisesRegex(datasets.DataError, "no 'test-\\*-of-\\*' shards"):
                    dataset.num_examples("test")
        self.assertEqual(datasets.resolve_dataset("imagenet", empty).num_examples("train"),
                         1281167)

    def test_names_and_directories_that_cannot_be_used(self):
        cases = [(("bogus", DEMO_DIR), "unknown --dataset='bogus'; use one of "),
                 (("imagenet", ""), "--dataset=imagenet needs --data_dir="),
                 (("flowers", "/nonexistent/shards"), "--data_dir=/nonexistent/shards does not "
                                                      "exist")]
        for (name, data_dir), message in cases:
            with self.subTest(name=name):
                with self.assertRaisesRegex(datasets.DataError, "^" + message):
                    datasets.resolve_dataset(name, data_dir)

    def test_defaults_are_the_recipe_of_each_kind_of_data(self):
        expected = {"demo": recipe.DEMO_DEFAULTS, "imagenet": recipe.IMAGENET_DEFAULTS,
                    "flowers": recipe.OWN_DATA_DEFAULTS, "custom": recipe.OWN_DATA_DEFAULTS}
        directory = own_data()
        for name, defaults in expected.items():
            with self.subTest(name=name):
                dataset = datasets.resolve_dataset(name, DEMO_DIR if name == "demo"
                                                   else directory)
                self.assertIs(dataset.defaults, recipe.defaults_for(name))
                self.assertIs(dataset.defaults, defaults)


def image_folder(root, labels=("cat", "dog", "owl"), per_label=2):
    """`root/<label>/<i>.jpg`: `per_label` tiny JPEGs for each label; returns `root`."""
    for number, label in enumerate(labels):
        os.makedirs(os.path.join(root, label))
        for index in range(per_label):
            Image.new("RGB", (16, 16), (40 * number, 30 * index, 90)).save(
                os.path.join(root, label, f"{index}.jpg"), format="JPEG")
    return root


class ImageFolderTest(unittest.TestCase):
    """--data_dir=<a folder of images>: the run keeps the folder and reads its cached shards."""

    def setUp(self):
        self.cache = testing_utils.temp_dir("cache")
        for patcher in (mock.patch.dict(os.environ, {"INCEPTION_CACHE_DIR": self.cache}),
                        mock.patch("sys.stderr", io.StringIO())):  # the builds' progress bars
            patcher.start()
            self.addCleanup(patcher.stop)

    def test_train_and_validation_folders_read_their_cached_shards(self):
        folder = testing_utils.temp_dir("photos")
        image_folder(os.path.join(folder, "train"), per_label=3)
        image_folder(os.path.join(folder, "validation"))
        lines = []
        dataset = datasets.resolve_dataset("", folder, log=lines.append)
        cache = cache_stamp.cache_path(folder, 0.0)
        self.assertTrue(cache.startswith(self.cache))
        self.assertEqual((dataset.name, dataset.data_dir, dataset.shard_dir),
                         ("custom", folder, cache))
        self.assertEqual((dataset.num_classes, dataset.label_names), (4, ("cat", "dog", "owl")))
        self.assertEqual(dataset.shards("train"), tfrecord_format.list_shards(cache, "train"))
        self.assertEqual(len(dataset.shards("validation")), 2)
        self.assertEqual((dataset.num_examples("train"), dataset.num_examples("validation")),
                         (9, 6))
        self.assertIn("building TFRecord shards of the 15 images", lines[0])
        # Evaluation of the run: the stored folder and the stored label count, nothing else.
        lines.clear()
        self.assertEqual(datasets.resolve_dataset("custom", folder, 3, log=lines.append),
                         dataset)
        self.assertEqual(lines, [f"using the cached shards of {folder} in {cache} (its train/ "
                                 "and validation/ folders; its files are unchanged)"])
        self.assertEqual(datasets.labels_dir(folder), cache)  # export and classify

    def test_label_folders_take_a_fraction_that_evaluation_finds_in_the_cache(self):
        folder = image_folder(testing_utils.temp_dir("photos"))
        with self.assertRaisesRegex(datasets.DataError, "pass --validation_fraction=0.2 to "):
            datasets.resolve_dataset("", folder)
        self.assertEqual(datasets.labels_dir(folder), folder)  # nothing built yet
        dataset = datasets.resolve_dataset("", folder, log=lambda line: None,
                                           validation_fraction=0.5)
        self.assertEqual((dataset.data_dir, dataset.num_classes), (folder, 4))
        self.assertEqual((dataset.num_examples("train"), dataset.num_examples("validation")),
                         (3, 3))
        evaluated = datasets.resolve_dataset("custom", folder, 3, log=lambda line: None)
        self.assertEqual(evaluated.shard_dir, dataset.shard_dir)
        self.assertEqual(datasets.labels_dir(folder), dataset.shard_dir)

    def test_a_shards_directory_is_read_where_it_is(self):
        directory = own_data()
        image_folder(os.path.join(directory, "extra"), labels=("cat",), per_label=1)
        dataset = datasets.resolve_dataset("", directory)
        self.assertEqual(dataset.shard_dir, directory)
        self.assertEqual(datasets.labels_dir(directory), directory)
        self.assertFalse(os.path.exists(cache_stamp.cache_root()))

    def test_a_validation_fraction_for_shards_is_refused_in_one_line(self):
        for name, directory in (("", own_data()), ("demo", DEMO_DIR)):
            with self.subTest(name=name or "custom"):
                with self.assertRaises(datasets.DataError) as raised:
                    datasets.resolve_dataset(name, directory, validation_fraction=0.2)
                message = str(raised.exception)
                self.assertIn(f"{directory} holds TFRecord shards", message)
                self.assertIn("drop --validation_fraction", message)
                self.assertNotIn("\n", message)


class CountTest(unittest.TestCase):

    def test_records_are_summed_over_files(self):
        directory = testing_utils.temp_dir("count")
        paths = [write_records(directory, f"file{index}", count)
                 for index, count in enumerate((5, 0, 2))]
        self.assertEqual(datasets.count_records(paths), 7)
        self.assertEqual(datasets.count_records([]), 0)

    def test_counting_while_a_function_is_traced_runs_eagerly(self):
        path = write_records(testing_utils.temp_dir("count_graph"), "file", 4)
        counted = tf.function(lambda: tf.constant(datasets.count_records([path])))
        self.assertEqual(int(counted()), 4)  # a number at trace time, not a symbolic tensor

    def test_a_damaged_file_is_named(self):
        path = write_records(testing_utils.temp_dir("damaged"), "train-00000-of-00001", 3)
        with open(path, "r+b") as handle:
            handle.truncate(os.path.getsize(path) - 5)  # the last record cut short
        with self.assertRaisesRegex(datasets.DataError,
                                    f"^cannot read {path}: .*; rebuild the shard or remove it"):
            datasets.count_records([path])
        dataset = datasets.resolve_dataset("custom", os.path.dirname(path), num_labels=2)
        with self.assertRaisesRegex(datasets.DataError, f"^cannot read {path}: "):
            dataset.num_examples("train")

    def test_shards_without_records(self):
        directory = own_data(train=(0, 0))
        dataset = datasets.resolve_dataset("", directory)
        with self.assertRaises(datasets.DataError) as caught:
            dataset.num_examples("train")
        self.assertEqual(str(caught.exception),
                         f"the 'train' shards in {directory} hold no records; rebuild them or "
                         "pass another --data_dir.")
        self.assertEqual(dataset.num_examples("validation"), 2)

    def test_shards_are_sorted_and_partial_files_ignored(self):
        directory = own_data(train=(1, 1, 1))
        write_records(directory, "train-00003-of-00003.tmp", 9)  # a build still writing
        dataset = datasets.resolve_dataset("", directory)
        self.assertEqual([os.path.basename(path) for path in dataset.shards("train")],
                         [tfrecord_format.shard_name("train", i, 3) for i in range(3)])
        self.assertEqual(dataset.num_examples("train"), 3)
        with self.assertRaisesRegex(datasets.DataError, f"no 'test-\\*-of-\\*' shards in "
                                                        f"{directory}; build them with"):
            dataset.shards("test")

    def test_counting_many_shards_is_announced(self):
        many, few = own_data(train=(1,) * 5), own_data(train=(1,) * 4)
        lines = []
        self.assertEqual(datasets.resolve_dataset("", few).num_examples("train",
                                                                        log=lines.append), 4)
        self.assertEqual(lines, [])  # a few shards count quickly, without a word
        self.assertEqual(datasets.resolve_dataset("", many).num_examples("train",
                                                                         log=lines.append), 5)
        self.assertEqual(len(lines), 1)
        self.assertIn(f"counting the 'train' records in 5 shards of {many}", lines[0])


if __name__ == "__main__":
    absltest.main()
