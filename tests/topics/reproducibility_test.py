"""Runs that repeat themselves: with a seed, a run stopped by SIGTERM and resumed ends
bit-identical to the run that never stopped (the input's position is in the checkpoint, and
every random draw follows the seed, the step and the record), on shards and on a folder of
images, with accumulation and across a checkpoint rotation; with --deterministic and no seed
(seed 0), the same command run twice, once stopped and resumed, writes the same checkpoint."""

import os
import re
import signal
import unittest
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image

from inception.config import settings as settings_lib
from inception.driver import determinism
from inception.driver import launch
from inception.run.directory import RunDirectory
from tests import testing_utils

# 24 training images. Each run stops after update 5 and ends at update 8: an epoch is 3 updates
# of 2 x 4 examples with accumulation, and 2 steps on the folder (8 of its 12 images train), so
# both stop inside an epoch and cross an epoch's end after the resume.
TINY = dict(**testing_utils.tiny_model(aux_head=True), batch_size=4, num_towers=2, seed=7,
            log_every_n_steps=1, eval_every_n_steps=0, save_checkpoint_steps=100)
STOP_AFTER, END = 5, 8
DATA = testing_utils.DemoData(train=24, validation=10)


def settings(train_dir, **overrides):
    values = dict(TINY, train_dir=train_dir, data_dir=DATA.path, max_steps=END)
    values.update(overrides)
    return settings_lib.train_settings(**values)


def checkpoint_values(train_dir):
    """{name: value} of every tensor of the newest checkpoint in `train_dir`."""
    reader = tf.train.load_checkpoint(RunDirectory(train_dir).newest())
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def sigterm_after_step(step):
    """A log function that sends this process SIGTERM when the loop logs `step`."""
    def log(line):
        if re.search(rf": step {step}, loss = ", line):
            os.kill(os.getpid(), signal.SIGTERM)
    return log


def image_folder(root, per_label=6):
    """`root/<label>/<i>.jpg` for two labels, 32x32 JPEGs that differ from each other."""
    rng = np.random.default_rng(3)
    for label in ("daisy", "rose"):
        os.makedirs(os.path.join(root, label))
        for index in range(per_label):
            pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(os.path.join(root, label, f"{index}.jpg"))
    return root


class ExactResumeTest(unittest.TestCase):

    def assert_resume_is_exact(self, name, **overrides):
        """Trains `name`'s settings to END straight, and stopped by SIGTERM after STOP_AFTER
        then resumed; requires both last checkpoints to be equal tensor for tensor."""
        straight = testing_utils.temp_dir(f"{name}_straight")
        straight_lines = []
        launch.train(settings(straight, **overrides), log=straight_lines.append)
        stopped = testing_utils.temp_dir(f"{name}_stopped")
        first = launch.train(settings(stopped, **overrides), log=sigterm_after_step(STOP_AFTER))
        self.assertEqual(first.stopped_by_signal, signal.SIGTERM)
        self.assertEqual(first.step, STOP_AFTER)
        lines = []
        second = launch.train(settings(stopped, **overrides), log=lines.append)
        self.assertEqual(second.step, END)
        self.assertTrue(any(f"(step {STOP_AFTER})" in line for line in lines), lines)
        expected, actual = checkpoint_values(straight), checkpoint_values(stopped)
        self.assertEqual(sorted(actual), sorted(expected))
        self.assertIn("input_position", actual)
        differ = [name for name in expected if not np.array_equal(expected[name], actual[name])]
        self.assertEqual(differ, [], f"{len(differ)} of {len(expected)} tensors differ")
        return straight_lines

    def test_shards_deterministic_without_a_seed_accumulating_across_a_rotation(self):
        # Checkpoints every 2 updates, 2 kept: the one resumed from (5) is rotated away at 8.
        lines = self.assert_resume_is_exact("shards", seed=None, deterministic=True,
                                            accumulate_steps=2, mixup_alpha=0.2,
                                            save_checkpoint_steps=2, keep_checkpoints=2)
        self.assertTrue(any("seed 0, deterministic ops" in line for line in lines), lines)

    def test_a_folder_of_images(self):
        cache = testing_utils.temp_dir("reproducibility_cache")
        with mock.patch.dict(os.environ, {"INCEPTION_CACHE_DIR": cache}):
            folder = image_folder(testing_utils.temp_dir("reproducibility_folder"))
            self.assert_resume_is_exact("folder", data_dir=folder, validation_fraction=0.25)


class DeterministicTest(unittest.TestCase):

    def test_op_determinism_is_on_during_the_run_only(self):
        from tensorflow.python.framework import config  # pylint: disable=import-outside-toplevel
        with determinism.op_determinism(True):
            self.assertTrue(config.is_op_determinism_enabled())
        self.assertFalse(config.is_op_determinism_enabled())

    def test_an_op_without_a_deterministic_kernel_is_one_line_naming_it(self):
        error = tf.errors.UnimplementedError(
            None, None, "Deterministic GPU implementation of unsorted segment reduction op not "
            "available.\n\t [[{{node UnsortedSegmentSum}}]]")
        explained = determinism.explain_determinism(error)
        self.assertIsInstance(explained, settings_lib.SettingsError)
        self.assertNotIn("\n", str(explained))
        self.assertIn("unsorted segment reduction op", str(explained))
        self.assertIn("drop --deterministic", str(explained))
        self.assertIsNone(determinism.explain_determinism(tf.errors.UnimplementedError(
            None, None, "something else")))


if __name__ == "__main__":
    absltest.main()
