"""A short real run of the trainer on generated demo shards: events, resume, bad input."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

import tensorflow as tf
from absl.testing import absltest

from data import demo_data
from data import tfrecord_format
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.inputs import datasets
from inception.parallel import devices
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from tests import testing_utils

TINY = dict(**testing_utils.tiny_model(aux_head=True), batch_size=4, num_towers=2,
            log_every_n_steps=1, save_summaries_steps=1, save_checkpoint_steps=100)
DATA = testing_utils.DemoData(train=24, validation=10)


def tiny_options(train_dir, **overrides):
    values = dict(TINY, train_dir=train_dir, data_dir=DATA.path,
                  dataset="demo", eval_every_n_steps=0, max_steps=3)
    values.update(overrides)
    return settings_lib.train_settings(**values)


class ShortRunTest(unittest.TestCase):

    def test_short_run_writes_mean_loss_and_tower_scalars_then_resumes(self):
        train_dir = testing_utils.temp_dir("short_run")
        lines = []
        result = launch.train(tiny_options(train_dir), log=lines.append)
        self.assertEqual(result.step, 3)
        self.assertTrue(any("2 tower(s) on virtual CPU devices" in line for line in lines))
        step_lines = [line for line in lines if re.search(r": step \d+, loss = ", line)]
        self.assertEqual(len(step_lines), 3)
        self.assertRegex(step_lines[0], r"step 1, loss = \d+\.\d+ \(\d+\.\d examples/sec; "
                                        r"\d+\.\d+ sec/batch; input wait \d+%\)")

        scalars = testing_utils.read_scalars(train_dir)
        for tag in ("loss/mean_loss", "loss/tower_0/total_loss", "loss/tower_1/total_loss",
                    "loss/tower_0/cross_entropy", "loss/tower_0/aux_loss", "train/learning_rate",
                    "train/examples_per_sec", "train/batch_norm_decay", "metrics/precision_at_1",
                    "train/corrupt_records"):
            self.assertIn(tag, scalars)
        self.assertEqual([step for step, _ in scalars["loss/mean_loss"]], [1, 2, 3])
        for step in (1, 2, 3):
            towers = [dict(scalars[f"loss/tower_{i}/total_loss"])[step] for i in range(2)]
            # The graph's float32 mean against this float64 one: rounding of 2^-24 relative.
            mean = dict(scalars["loss/mean_loss"])[step]
            self.assertAlmostEqual(mean, sum(towers) / 2, delta=1e-6 * mean)

        with open(os.path.join(train_dir, SETTINGS_FILE), encoding="utf-8") as handle:
            stored = json.load(handle)
        self.assertEqual(stored, {"dataset": "demo", "data_dir": DATA.path, "image_size": 107,
                                  "depth_multiplier": 0.1, "num_classes": 6,
                                  "network": "inception_v3",
                                  "synthetic_input": False,
                                  "update": {"replicas": 1, "towers": 2, "batch_size": 4,
                                             "accumulate_steps": 1}})

        lines = []
        resumed = launch.train(settings_lib.train_settings(
            train_dir=train_dir, max_steps=5, batch_size=4, num_towers=2,
            save_checkpoint_steps=100, eval_every_n_steps=0), log=lines.append)
        self.assertEqual(resumed.step, 5)
        self.assertTrue(any("resumed from" in line and "(step 3)" in line for line in lines))
        reader = tf.train.load_checkpoint(RunDirectory(train_dir).newest())
        self.assertEqual(int(reader.get_tensor("global_step")), 5)


def shards_with_a_damaged_record():
    """A data directory of 7 demo records and one cut short, named broken.jpg."""
    data_dir = testing_utils.temp_dir("damaged")
    records = [demo_data.make_record("train", index) for index in range(8)]
    damaged = dataclasses.replace(records[0], encoded_jpeg=records[0].encoded_jpeg[:400],
                                  filename="broken.jpg")
    path = os.path.join(data_dir, tfrecord_format.shard_name("train", 0, 1))
    with tf.io.TFRecordWriter(path) as writer:
        for record in records[1:] + [damaged]:
            writer.write(tfrecord_format.make_example(record).SerializeToString())
    tfrecord_format.write_labels_file(os.path.join(data_dir, "labels.txt"),
                                      demo_data.CLASS_NAMES)
    return data_dir


class DamagedRecordsTest(unittest.TestCase):

    def test_damaged_records_are_skipped_named_and_counted_in_the_log(self):
        data_dir = shards_with_a_damaged_record()
        lines = []
        train_dir = testing_utils.temp_dir("damaged_run")
        launch.train(tiny_options(train_dir, data_dir=data_dir, dataset="", max_steps=4,
                                  num_towers=1),  # what is read does not depend on the towers
                     log=lines.append)
        notes = [line for line in lines if "damaged input record(s) skipped so far" in line]
        self.assertTrue(notes, lines)
        self.assertRegex(notes[0], r"^note: [1-9]\d* damaged")  # reading runs ahead
        scalars = testing_utils.read_scalars(train_dir)
        self.assertGreaterEqual(max(value for _, value in scalars["train/corrupt_records"]), 1)


class BadInputTest(unittest.TestCase):

    def assert_fails_without_writing(self, options, error_type, pattern):
        with self.assertRaisesRegex(error_type, pattern):
            launch.train(options, log=lambda line: None)
        self.assertFalse(os.path.exists(os.path.join(options.train_dir,
                                                     SETTINGS_FILE)))

    def test_batch_size_not_divisible_by_towers(self):
        self.assert_fails_without_writing(
            tiny_options(testing_utils.temp_dir("bad"), batch_size=5), settings_lib.SettingsError,
            "--batch_size=5 does not split evenly over --num_gpus=2 towers")

    def test_missing_data_dir(self):
        self.assert_fails_without_writing(
            tiny_options(testing_utils.temp_dir("bad"), data_dir="/nonexistent/shards",
                         dataset=""), settings_lib.SettingsError, "does not exist")

    def test_data_dir_without_shards(self):
        empty = testing_utils.temp_dir("empty_data")
        with open(os.path.join(empty, "labels.txt"), "w", encoding="utf-8") as handle:
            handle.write("a\nb\n")
        self.assert_fails_without_writing(
            tiny_options(testing_utils.temp_dir("bad"), data_dir=empty, dataset=""),
            datasets.DataError, "holds no train-\\*-of-\\* or validation-\\*-of-\\* shards")

    def test_an_empty_data_dir_or_a_folder_of_images_is_told_to_build_shards(self):
        empty = testing_utils.temp_dir("empty_data")
        self.assert_fails_without_writing(
            tiny_options(testing_utils.temp_dir("bad"), data_dir=empty, dataset=""),
            datasets.DataError, "is empty: no .* shards; build them from a folder of images "
                                "with `bin/bazel run //data:build_image_data")
        photos = testing_utils.temp_dir("photos")
        os.makedirs(os.path.join(photos, "train", "cats"))
        self.assert_fails_without_writing(
            tiny_options(testing_utils.temp_dir("bad"), data_dir=photos, dataset=""),
            datasets.DataError, "holds folders \\(train\\), not TFRecord shards; if they are "
                                "images, build shards from them")

    def test_shards_with_no_records(self):
        empty = testing_utils.temp_dir("empty_shards")
        open(os.path.join(empty, "train-00000-of-00001"), "wb").close()
        self.assert_fails_without_writing(
            tiny_options(testing_utils.temp_dir("bad"), data_dir=empty, dataset="",
                         num_labels=3),
            datasets.DataError, "hold no records")

    def test_no_labels_file_needs_num_classes(self):
        bare = testing_utils.temp_dir("bare")
        open(os.path.join(bare, "train-00000-of-00001"), "wb").close()
        self.assert_fails_without_writing(
            tiny_options(testing_utils.temp_dir("bad"), data_dir=bare, dataset=""),
            datasets.DataError, "--num_classes")

    def test_settings_that_contradict_the_checkpoints(self):
        train_dir = testing_utils.temp_dir("conflict")
        launch.train(tiny_options(train_dir, max_steps=1, num_towers=1), log=lambda line: None)
        with open(os.path.join(train_dir, SETTINGS_FILE), encoding="utf-8") as f:
            before = f.read()
        with self.assertRaisesRegex(checkpoint_io.CheckpointError,
                                    "trained with image_size=107, not 128"):
            launch.train(tiny_options(train_dir, image_size=128, num_towers=1),
                         log=lambda line: None)
        with open(os.path.join(train_dir, SETTINGS_FILE), encoding="utf-8") as f:
            self.assertEqual(f.read(), before)
        # Data with other labels is named in labels, not logits, with what to do instead.
        relabelled = testing_utils.temp_dir("relabelled")
        for name in os.listdir(DATA.path):
            shutil.copy(os.path.join(DATA.path, name), relabelled)
        with open(os.path.join(relabelled, "labels.txt"), "a", encoding="utf-8") as handle:
            handle.write("hexagon\n")
        with self.assertRaisesRegex(checkpoint_io.CheckpointError,
                                    r"trained on 5 labels \(demo\), but this data has 6; pass "
                                    r"a new --train_dir .*--fine_tune"):
            launch.train(tiny_options(train_dir, data_dir=relabelled, dataset="", num_towers=1),
                         log=lambda line: None)

    def test_variables_on_a_gpu_the_machine_lacks(self):
        self.assert_fails_without_writing(
            tiny_options(testing_utils.temp_dir("bad"), variable_device="gpu"),
            devices.PlacementError, "--variable_device=gpu needs GPU towers")


class CommandLineTest(unittest.TestCase):
    """The binary turns bad input into one line on stderr and a non-zero exit."""

    def run_train(self, *args):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        return subprocess.run([sys.executable, "-m", "inception.train", *args],
                              capture_output=True, text=True, timeout=300, env=env, check=False)

    def assert_one_line_error(self, result, pattern):
        self.assertNotEqual(result.returncode, 0)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        self.assertEqual(len(errors), 1, result.stderr[-3000:])
        self.assertRegex(errors[0], pattern)
        self.assertNotIn("Traceback", result.stderr)

    def test_unknown_flag_value(self):
        self.assert_one_line_error(self.run_train("--dataset=bogus"), "dataset")

    def test_unknown_flag(self):
        self.assert_one_line_error(self.run_train("--no_such_flag=1"), "no_such_flag")

    def test_strict_input_stops_with_one_line_naming_the_file(self):
        result = self.run_train(f"--train_dir={testing_utils.temp_dir('strict')}",
                                f"--data_dir={shards_with_a_damaged_record()}", "--strict_input",
                                *testing_utils.tiny_flags(), "--batch_size=2", "--num_gpus=1",
                                "--max_steps=20")
        self.assert_one_line_error(result, r'damaged or non-JPEG image "broken.jpg" in the input')
        self.assertEqual(result.returncode, 1)

    def test_batch_not_divisible(self):
        train_dir = testing_utils.temp_dir("cli_bad")
        self.assert_one_line_error(
            self.run_train(f"--train_dir={train_dir}", f"--data_dir={DATA.path}",
                           "--batch_size=7", "--num_gpus=2"), "multiple of 2")
        self.assertEqual(os.listdir(train_dir), [])


if __name__ == "__main__":
    absltest.main()
