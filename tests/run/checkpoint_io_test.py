"""Checkpoint directories under faults: damaged or non-finite checkpoints, interrupted and
failed saves, the stored settings."""

import dataclasses
import os
import subprocess
import sys
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from tests import testing_utils

tf1 = tf.compat.v1


def truncate(path, fraction=0.5):
    """Cuts the file at `path` to `fraction` of its length (what a full disk or a copy cut
    short leaves)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.truncate(int(size * fraction))


def poison(checkpoint_path):
    """Rewrites the checkpoint with NaN in every float tensor (what an unguarded save of a
    diverged run held)."""
    reader = tf.train.load_checkpoint(checkpoint_path)
    with tf.Graph().as_default():
        variables = []
        for name, dtype in reader.get_variable_to_dtype_map().items():
            value = reader.get_tensor(name)
            if dtype.is_floating:
                value = np.full_like(value, np.nan)
            variables.append(tf1.Variable(value, name=name))
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            tf1.train.Saver({v.op.name: v for v in variables}).save(
                session, checkpoint_path, write_meta_graph=False, write_state=False)


class DamagedCheckpointTest(unittest.TestCase):

    def test_training_resumes_from_the_newest_checkpoint_that_restores(self):
        train_dir = testing_utils.temp_dir("damaged")
        testing_utils.train_small_model(train_dir, 4)
        newest = os.path.join(train_dir, "model.ckpt-4")
        truncate(newest + ".data-00000-of-00001")
        self.assertIn("damaged (", checkpoint_io.checkpoint_problem(newest))
        lines = []
        result = testing_utils.train_small_model(train_dir, 6, log=lines.append)
        self.assertEqual(result.step, 6)
        notes = [line for line in lines if line.startswith("note: not resuming from")]
        self.assertEqual(len(notes), 1, lines)
        self.assertIn(newest, notes[0])
        self.assertIn("damaged (", notes[0])
        self.assertTrue(any("resumed from" in line and "(step 2)" in line for line in lines))
        # Kept, never deleted: renamed so that this run's own step-4 save cannot overwrite it.
        self.assertTrue(os.path.exists(newest + ".unusable.data-00000-of-00001"))
        self.assertIsNone(checkpoint_io.checkpoint_problem(result.checkpoint))

    def test_a_checkpoint_holding_nan_is_not_resumed_from(self):
        train_dir = testing_utils.temp_dir("nan_checkpoint")
        testing_utils.train_small_model(train_dir, 4)
        poison(os.path.join(train_dir, "model.ckpt-4"))
        lines = []
        testing_utils.train_small_model(train_dir, 5, log=lines.append)
        self.assertTrue(any("model.ckpt-4: " in line and "hold NaN or Inf" in line
                            for line in lines), lines)
        self.assertTrue(any("(step 2)" in line for line in lines if "resumed from" in line))

    def test_when_no_checkpoint_restores_the_directory_is_named(self):
        train_dir = testing_utils.temp_dir("all_damaged")
        testing_utils.train_small_model(train_dir, 4)
        for step in (2, 4):
            truncate(os.path.join(train_dir, f"model.ckpt-{step}.data-00000-of-00001"))
        with self.assertRaisesRegex(checkpoint_io.CheckpointError,
                                    f"none of the 2 checkpoint\\(s\\) in {train_dir} can be "
                                    "used"):
            testing_utils.train_small_model(train_dir, 6)
        self.assertTrue(os.path.exists(os.path.join(train_dir,
                                                    "model.ckpt-2.data-00000-of-00001")))


class InterruptedSaveTest(unittest.TestCase):

    def test_leftovers_of_a_killed_save_are_removed_and_nothing_else(self):
        train_dir = testing_utils.temp_dir("leftovers")
        testing_utils.train_small_model(train_dir, 2)
        leftover = os.path.join(train_dir, "model.ckpt-4.data-00000-of-00001.tempstate987")
        keep = os.path.join(train_dir, "notes.txt")
        for path in (leftover, keep):
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("x")
        lines = []
        testing_utils.train_small_model(train_dir, 3, log=lines.append)
        self.assertFalse(os.path.exists(leftover))
        self.assertTrue(os.path.exists(keep))
        self.assertIn(f"note: removed 1 temporary file(s) of an interrupted save in {train_dir}.",
                      lines)


FULL_DISK = """
import resource, signal, sys
sys.path[:0] = {path!r}
from tests import testing_utils
from inception.run.health import CheckpointWriteError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:
    testing_utils.train_small_model({train_dir!r}, 4)
except CheckpointWriteError as error:
    print("ERROR", error)
"""


class FailedSaveTest(unittest.TestCase):

    def test_a_save_that_cannot_be_written_is_one_line_and_leaves_the_last_checkpoint(self):
        train_dir = testing_utils.temp_dir("no_space")
        testing_utils.train_small_model(train_dir, 2)
        data_size = os.path.getsize(os.path.join(train_dir, "model.ckpt-2.data-00000-of-00001"))
        before = sorted(os.listdir(train_dir))
        # Files may not grow past half a checkpoint: the next save fails for real, half way.
        completed = subprocess.run(
            [sys.executable, "-c", FULL_DISK.format(path=sys.path, limit=data_size // 2,
                                                    train_dir=train_dir)],
            capture_output=True, text=True, timeout=300, check=False)
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        errors = [line for line in completed.stdout.splitlines() if line.startswith("ERROR")]
        self.assertEqual(len(errors), 1, completed.stdout)
        self.assertIn(f"could not save checkpoint {train_dir}/model.ckpt-4 in {train_dir}: "
                      "File too large; a checkpoint here needs about", errors[0])
        self.assertIn("the newest checkpoint is still " + os.path.join(train_dir, "model.ckpt-2"),
                      errors[0])
        self.assertEqual(RunDirectory(train_dir).newest(),
                         os.path.join(train_dir, "model.ckpt-2"))
        left = [name for name in os.listdir(train_dir)
                if name not in before and not name.startswith("events.out")]
        self.assertEqual(left, [])
        self.assertEqual(testing_utils.train_small_model(train_dir, 4).step, 4)


class StoredSettingsTest(unittest.TestCase):

    def test_settings_are_rewritten_only_when_they_change(self):
        train_dir = testing_utils.temp_dir("settings")
        run = settings_lib.TrainSettings(
            model=settings_lib.ModelSettings(6, 107, 0.1, "demo"),
            data=settings_lib.DataSettings(data_dir="/data"), loop=settings_lib.LoopSettings(
                train_dir=train_dir, max_steps=9))
        RunDirectory(train_dir).write_settings(run)
        stored = RunDirectory(train_dir).read_settings()
        self.assertEqual(stored.model, run.model)  # read into the section it was written from
        self.assertEqual(stored.data_dir, "/data")
        path = os.path.join(train_dir, SETTINGS_FILE)
        first = os.stat(path)
        RunDirectory(train_dir).write_settings(run)
        self.assertEqual(os.stat(path).st_ino, first.st_ino)  # not replaced
        RunDirectory(train_dir).write_settings(dataclasses.replace(
            run, data=settings_lib.DataSettings(data_dir="/moved")))
        self.assertNotEqual(os.stat(path).st_ino, first.st_ino)
        self.assertEqual(RunDirectory(train_dir).read_settings().data_dir,
                         "/moved")


if __name__ == "__main__":
    absltest.main()
