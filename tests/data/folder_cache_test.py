"""An image folder's cached shards: the builder's records, reuse without reading, rebuilds on a
changed file, crash safety, the validation fraction's split, and what is an image folder."""

import io
import os
import shutil
import unittest
from unittest import mock

import tensorflow as tf
from absl.testing import absltest
from PIL import Image

from data import cache_stamp
from data import folder_cache
from data import image_folders
from data import shard_writer
from data import tfrecord_format
from data.errors import BuildError
from tests import testing_utils

NO_SUCH_PID = 4_999_999  # above Linux's largest possible process id


def save_jpeg(path, shade):
    """A 16x16 JPEG at `path` whose grey level `shade` makes its bytes differ from the others."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", (16, 16), (shade, 255 - shade, shade // 2)).save(path, format="JPEG")
    return path


def make_label_folders(root, counts):
    """`root/<label>/img<i>.jpg` for each label's count of images in `counts`."""
    for number, (label, count) in enumerate(sorted(counts.items())):
        for index in range(count):
            save_jpeg(os.path.join(root, label, f"img{index}.jpg"), 20 * number + 7 * index)
    return root


def make_split_folder(counts=None):
    """A folder with train/ (daisy 3, rose 3) and validation/ (2 each) label folders."""
    folder = testing_utils.temp_dir("flowers")
    make_label_folders(os.path.join(folder, "train"), counts or {"daisy": 3, "rose": 3})
    make_label_folders(os.path.join(folder, "validation"), {"daisy": 2, "rose": 2})
    return folder


def serialized_records(shard_dir):
    """{shard name: [serialized records]} of every shard in `shard_dir`."""
    shards = [path for split in folder_cache.SPLITS
              for path in tfrecord_format.list_shards(shard_dir, split)]
    return {os.path.basename(path): [record.numpy() for record in tf.data.TFRecordDataset(path)]
            for path in shards}


def examples(shard_dir, split):
    """[(label, file name)] of the records of `split`'s shards, sorted."""
    found = []
    for path in tfrecord_format.list_shards(shard_dir, split):
        for record in tf.data.TFRecordDataset(path):
            feature = tf.train.Example.FromString(record.numpy()).features.feature
            found.append((feature["image/class/label"].int64_list.value[0],
                          feature["image/filename"].bytes_list.value[0].decode()))
    return sorted(found)


def build(folder, fraction=0.0):
    """cached_shards quietly; returns (shard directory, log lines)."""
    lines = []
    shard_dir = folder_cache.cached_shards(folder, fraction, log=lines.append,
                                           progress_stream=io.StringIO())
    return shard_dir, lines


class CacheTestCase(unittest.TestCase):
    """Each test gets its own empty project cache directory."""

    def setUp(self):
        self.cache = testing_utils.temp_dir("cache")
        patcher = mock.patch.dict(os.environ, {"INCEPTION_CACHE_DIR": self.cache})
        patcher.start()
        self.addCleanup(patcher.stop)


class SplitFolderTest(CacheTestCase):

    def test_cache_holds_the_records_the_builder_writes_by_hand(self):
        folder = make_split_folder()
        shard_dir, lines = build(folder)
        self.assertEqual(os.path.dirname(shard_dir), os.path.join(self.cache, "image-folders"))
        self.assertRegex(os.path.basename(shard_dir),
                         f"^{os.path.basename(folder)}-[0-9a-f]{{12}}$")
        self.assertEqual(lines[0], f"building TFRecord shards of the 10 images in {folder} (its "
                                   f"train/ and validation/ folders) into {shard_dir}; they are "
                                   "reused until its files change")
        self.assertIn(f"train: 6 images in 2 shards in {shard_dir}", lines)  # not the temporary
        self.assertEqual(os.listdir(os.path.dirname(shard_dir)), [os.path.basename(shard_dir)])
        by_hand = os.path.join(testing_utils.temp_dir("by_hand"), "shards")
        image_folders.build_from_folders(image_folders.FolderBuildOptions(
            output_dir=by_hand, train_dir=os.path.join(folder, "train"),
            validation_dir=os.path.join(folder, "validation"), train_shards=2,
            validation_shards=2, num_threads=2), log=lambda line: None,
            progress_stream=io.StringIO())
        cached = serialized_records(shard_dir)
        self.assertEqual(sorted(cached), ["train-00000-of-00002", "train-00001-of-00002",
                                          "validation-00000-of-00002",
                                          "validation-00001-of-00002"])
        self.assertEqual(cached, serialized_records(by_hand))
        self.assertEqual(sum(map(len, cached.values())), 10)
        self.assertEqual(*(tfrecord_format.read_labels_file(os.path.join(
            directory, tfrecord_format.LABELS_FILE)) for directory in (shard_dir, by_hand)))

    def test_a_second_call_reuses_the_cache_without_reading_an_image(self):
        folder = make_split_folder()
        shard_dir, _ = build(folder)
        before = {name: os.stat(os.path.join(shard_dir, name)) for name in os.listdir(shard_dir)}
        with mock.patch.object(image_folders, "build_from_folders",
                               side_effect=AssertionError("built again")), \
                mock.patch("builtins.open", wraps=open) as opened:
            again, lines = build(folder)
        self.assertEqual(again, shard_dir)
        self.assertEqual(lines, [f"using the cached shards of {folder} in {shard_dir} (its "
                                 "train/ and validation/ folders; its files are unchanged)"])
        read = [call.args[0] for call in opened.call_args_list]
        self.assertEqual([path for path in read if str(path).startswith(folder)], [])
        after = {name: os.stat(os.path.join(shard_dir, name)) for name in os.listdir(shard_dir)}
        self.assertEqual({name: (s.st_ino, s.st_mtime_ns) for name, s in after.items()},
                         {name: (s.st_ino, s.st_mtime_ns) for name, s in before.items()})

    def test_adding_an_image_rebuilds_with_one_more_record(self):
        folder = make_split_folder()
        shard_dir, _ = build(folder)
        self.assertEqual(len(examples(shard_dir, "train")), 6)
        save_jpeg(os.path.join(folder, "train", "rose", "new.jpg"), 99)
        again, lines = build(folder)
        self.assertEqual(again, shard_dir)
        self.assertTrue(lines[0].startswith(f"rebuilding TFRecord shards of the 11 images in "
                                            f"{folder}"), lines[0])
        self.assertIn((2, "new.jpg"), examples(shard_dir, "train"))
        self.assertEqual(len(examples(shard_dir, "train")), 7)
        self.assertEqual(cache_stamp.read_stamp(shard_dir)["images"], 11)

    def test_a_changed_or_removed_file_rebuilds(self):
        folder = make_split_folder()
        shard_dir, _ = build(folder)
        daisy = os.path.join(folder, "train", "daisy", "img0.jpg")
        stat = os.stat(daisy)
        os.utime(daisy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # same size, newer
        self.assertTrue(build(folder)[1][0].startswith("rebuilding"))
        os.remove(daisy)
        _, lines = build(folder)
        self.assertTrue(lines[0].startswith("rebuilding TFRecord shards of the 9 images"))
        self.assertNotIn((1, "img0.jpg"), examples(shard_dir, "train"))

    def test_a_killed_build_leaves_the_old_cache_and_nothing_that_looks_built(self):
        folder = make_split_folder()
        shard_dir, _ = build(folder)
        leftover = f"{shard_dir}.tmp-{NO_SUCH_PID}"  # `kill -9` just before its rename
        shutil.copytree(shard_dir, leftover)
        save_jpeg(os.path.join(folder, "validation", "daisy", "new.jpg"), 50)
        real_build = image_folders.build_from_folders

        def killed(options, **kwargs):
            real_build(options, **kwargs)
            raise KeyboardInterrupt()  # after writing every shard, before the fingerprint

        with mock.patch.object(image_folders, "build_from_folders", side_effect=killed):
            with self.assertRaises(KeyboardInterrupt):
                build(folder)
        self.assertEqual(os.listdir(os.path.dirname(shard_dir)), [os.path.basename(shard_dir)])
        self.assertEqual(cache_stamp.read_stamp(shard_dir)["images"], 10)  # the old cache
        self.assertEqual(len(examples(shard_dir, "validation")), 4)
        _, lines = build(folder)
        self.assertTrue(lines[0].startswith("rebuilding TFRecord shards of the 11 images"))
        self.assertEqual(len(examples(shard_dir, "validation")), 5)

    def test_shard_counts_follow_the_image_count(self):
        counts = {0: 2, 1: 2, 1024: 2, 2048: 2, 2049: 4, 5000: 6, 10_000: 10}
        self.assertEqual({n: folder_cache.shard_count(n) for n in counts}, counts)


class FractionTest(CacheTestCase):

    def test_each_label_is_split_at_fixed_evenly_spaced_positions(self):
        folder = make_label_folders(testing_utils.temp_dir("pets"), {"cat": 5, "dog": 5})
        shard_dir, lines = build(folder, 0.4)
        self.assertIn("(0.4 of each label's images for validation)", lines[0])
        self.assertEqual(tfrecord_format.read_labels_file(
            os.path.join(shard_dir, tfrecord_format.LABELS_FILE)), ["cat", "dog"])
        held = [f"img{index}.jpg" for index in (1, 3)]  # 2 of 5: positions 1 and 3
        kept = [f"img{index}.jpg" for index in (0, 2, 4)]
        self.assertEqual(examples(shard_dir, "validation"),
                         [(label, name) for label in (1, 2) for name in held])
        self.assertEqual(examples(shard_dir, "train"),
                         [(label, name) for label in (1, 2) for name in kept])
        elsewhere = testing_utils.temp_dir("other_cache")
        with mock.patch.dict(os.environ, {"INCEPTION_CACHE_DIR": elsewhere}):
            second, _ = build(folder, 0.4)
        self.assertTrue(second.startswith(elsewhere))
        self.assertEqual(serialized_records(second), serialized_records(shard_dir))

    def test_counts_round_to_the_fraction_and_keep_both_splits(self):
        cases = {(10, 0.2): 2, (10, 0.25): 3, (3, 0.1): 1, (2, 0.9): 1, (7, 0.5): 4}
        for (count, fraction), expected in cases.items():
            with self.subTest(count=count, fraction=fraction):
                sources = [shard_writer.ImageSource(f"{i}.jpg", 1, "a")
                           for i in range(count)]
                train, validation = folder_cache.split_by_fraction(sources, fraction, ["a"])
                self.assertEqual((len(train), len(validation)), (count - expected, expected))
                self.assertEqual(sorted(train + validation, key=lambda s: s.path),
                                 sorted(sources, key=lambda s: s.path))
        with self.assertRaisesRegex(BuildError, "^label 'a' has only 1 image"):
            folder_cache.split_by_fraction(sources[:1], 0.5, ["a"])

    def test_without_a_fraction_the_folders_one_cache_is_used(self):
        folder = make_label_folders(testing_utils.temp_dir("pets"), {"cat": 3, "dog": 3})
        shard_dir, _ = build(folder, 0.4)
        again, lines = build(folder)  # e.g. evaluation of a run trained on the folder
        self.assertEqual((again, lines), (shard_dir, [
            f"using the cached shards of {folder} in {shard_dir} (0.4 of each label's images "
            "for validation; its files are unchanged; no --validation_fraction given, so the "
            "split of its last build: pass one to split it otherwise)"]))
        _, lines = build(folder, 0.4)  # asked for: nothing to say of it
        self.assertEqual(lines, [f"using the cached shards of {folder} in {shard_dir} (0.4 of "
                                 "each label's images for validation; its files are unchanged)"])
        self.assertEqual(folder_cache.find_cache(folder), shard_dir)
        other, _ = build(folder, 0.2)
        self.assertNotEqual(other, shard_dir)
        self.assertEqual(folder_cache.find_cache(folder, 0.2), other)
        self.assertEqual(folder_cache.find_cache(folder), "")
        with self.assertRaisesRegex(BuildError, f"^{folder} has shards cached for validation "
                                                "fractions 0.2, 0.4 "):
            build(folder)

    def test_label_folders_without_a_fraction_say_what_to_pass(self):
        folder = make_label_folders(testing_utils.temp_dir("pets"), {"cat": 2, "dog": 2})
        with self.assertRaises(BuildError) as caught:
            build(folder)
        self.assertEqual(str(caught.exception), (
            f"{folder} holds label folders but no train/ and validation/ sub-folders; pass "
            "--validation_fraction=0.2 to hold out a fifth of each label's images for "
            "validation, or make train/ and validation/ sub-folders of label folders."))
        only_train = testing_utils.temp_dir("only_train")
        make_label_folders(os.path.join(only_train, "train"), {"cat": 2, "dog": 2})
        with self.assertRaisesRegex(BuildError, "has a train/ but no validation/ folder; pass "
                                                "--validation_fraction=0.2"):
            build(only_train)
        shard_dir, _ = build(only_train, 0.5)
        self.assertEqual(examples(shard_dir, "validation"), [(1, "img1.jpg"), (2, "img1.jpg")])
        # The flag's own check refuses the same values: one rule, in common/holdout.py.
        caches = os.path.join(self.cache, "image-folders")
        cached_before = sorted(os.listdir(caches))
        for fraction in (1.0, 0.95, -0.1):
            with self.assertRaisesRegex(BuildError, f"^--validation_fraction={fraction:g} must "
                                                    r"be in \[0, 0.9\]"):
                build(folder, fraction)
        # Nothing was cached for the refused fractions (cache folders are named by a hash).
        self.assertEqual(sorted(os.listdir(caches)), cached_before)
        self.assertEqual(len(cached_before), 1)


class LooksLikeImageFolderTest(unittest.TestCase):

    def test_label_folders_of_images_directly_or_under_the_splits(self):
        self.assertTrue(folder_cache.looks_like_image_folder(
            make_label_folders(testing_utils.temp_dir("flat"), {"cat": 1})))
        self.assertTrue(folder_cache.looks_like_image_folder(make_split_folder()))

    def test_a_shards_directory_and_other_folders_are_not(self):
        shards = make_label_folders(testing_utils.temp_dir("shards"), {"cat": 1})
        open(os.path.join(shards, tfrecord_format.shard_name("train", 0, 1)), "wb").close()
        loose = testing_utils.temp_dir("loose")
        save_jpeg(os.path.join(loose, "a.jpg"), 1)  # images, but no label folders
        not_images = testing_utils.temp_dir("not_images")
        os.makedirs(os.path.join(not_images, "notes"))
        open(os.path.join(not_images, "notes", "a.txt"), "wb").close()
        for path in (shards, loose, not_images, testing_utils.temp_dir("empty"), "",
                     "/nonexistent/folder", "gs://bucket/images"):
            with self.subTest(path=path):
                self.assertFalse(folder_cache.looks_like_image_folder(path))


if __name__ == "__main__":
    absltest.main()
