"""best/: a replacement that crashes or fails at any point leaves the old best or the new one,
complete, with best.json describing the checkpoint TensorFlow's list names."""

import json
import os
import unittest
from unittest import mock

import tensorflow as tf
from absl.testing import absltest

from common import files
from inception.run import best as best_lib
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from tests import testing_utils
from tests import tiny_eval

OLD_STEP, NEW_STEP = 10, 20
# Every file-system change keep() makes goes through one of these.
MUTATIONS = ((tf.io.gfile, "copy"), (tf.io.gfile, "rename"), (tf.io.gfile, "remove"),
             (files, "write_text_atomically"), (RunDirectory, "rewrite_state"))


class Crash(BaseException):
    """Stands in for the process dying: nothing catches it."""


def run_with_old_best():
    """A train_dir with checkpoints of OLD_STEP and NEW_STEP; best/ keeps OLD_STEP (0.5)."""
    train_dir = testing_utils.temp_dir("best")
    files.write_text_atomically(os.path.join(train_dir, SETTINGS_FILE), "{}\n")
    values = {"w": [1.0, 2.0], "b": [0.5]}
    paths = {step: tiny_eval.write_tiny_checkpoint(train_dir, values, values, step)
             for step in (OLD_STEP, NEW_STEP)}
    best_lib.BestCheckpoint(train_dir).keep(paths[OLD_STEP], "precision_at_1", 0.5)
    return train_dir, paths


def count_mutations(action):
    """How many file-system changes `action()` makes."""
    counter = {"n": 0}
    _with_patches(counter, None, None, action)
    return counter["n"]


def with_fault_at(number, error, action):
    """Runs `action()` with file-system change number `number` raising `error`."""
    _with_patches({"n": 0}, number, error, action)


def _with_patches(counter, crash_at, error, action):
    patches = [mock.patch.object(owner, name, autospec=owner is RunDirectory,
                                 side_effect=_counting(getattr(owner, name), counter, crash_at,
                                                       error))
               for owner, name in MUTATIONS]
    for patch in patches:
        patch.start()
    try:
        action()
    finally:
        for patch in patches:
            patch.stop()


def _counting(original, counter, crash_at, error):
    def call(*args, **kwargs):
        counter["n"] += 1
        if counter["n"] == crash_at:
            raise error
        return original(*args, **kwargs)
    return call


class BestReplacementTest(unittest.TestCase):

    def assert_consistent(self, train_dir, allowed_steps):
        """best/ as a later run reads it: one of `allowed_steps`, best.json agreeing with the
        listed checkpoint, which restores, and nothing else left behind."""
        best = best_lib.BestCheckpoint(train_dir)
        record = best.read()
        self.assertIn(record.step, allowed_steps)
        kept = best.directory.prefix(record.step)
        self.assertEqual(best.directory.listed(), [kept])
        reader = tf.train.load_checkpoint(kept)
        self.assertEqual(int(reader.get_tensor("global_step")), record.step)
        names = sorted(os.listdir(best.directory.path))
        self.assertEqual([name for name in names if ".tmp-" in name], [])
        self.assertEqual({name.split(".", 2)[1] for name in names if name.startswith("model.")},
                         {f"ckpt-{record.step}"}, names)
        with open(best.directory.file(best_lib.RECORD_FILE), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["step"], record.step)
        return record

    def test_a_crash_at_every_point_leaves_the_old_best_or_the_new_one(self):
        train_dir, paths = run_with_old_best()
        total = count_mutations(lambda: best_lib.BestCheckpoint(train_dir).keep(
            paths[NEW_STEP], "precision_at_1", 0.7))
        self.assertGreater(total, 5)
        outcomes = set()
        for number in range(1, total + 1):
            with self.subTest(crash_at=number):
                train_dir, paths = run_with_old_best()
                with self.assertRaises(Crash):
                    with_fault_at(number, Crash(), lambda: best_lib.BestCheckpoint(
                        train_dir).keep(paths[NEW_STEP], "precision_at_1", 0.7))
                record = self.assert_consistent(train_dir, (OLD_STEP, NEW_STEP))
                # The value to beat is the kept checkpoint's: a worse score (0.6 against the
                # new 0.7) does not replace it.
                self.assertEqual(record.value, 0.5 if record.step == OLD_STEP else 0.7)
                outcomes.add(record.step)
        self.assertEqual(outcomes, {OLD_STEP, NEW_STEP})  # crashes before and after the commit

    def test_a_failure_says_what_is_kept_and_leaves_a_consistent_best(self):
        train_dir, paths = run_with_old_best()
        total = count_mutations(lambda: best_lib.BestCheckpoint(train_dir).keep(
            paths[NEW_STEP], "precision_at_1", 0.7))
        for number in range(1, total + 1):
            with self.subTest(fail_at=number):
                train_dir, paths = run_with_old_best()
                try:
                    with_fault_at(number, OSError(28, "No space left on device"),
                                  lambda: best_lib.BestCheckpoint(train_dir).keep(
                                      paths[NEW_STEP], "precision_at_1", 0.7))
                except best_lib.BestNotKept as error:
                    message = str(error)
                else:
                    message = None  # a failed clean-up of the old files is finished later
                record = self.assert_consistent(train_dir, (OLD_STEP, NEW_STEP))
                if message and record.step == OLD_STEP:
                    self.assertIn("the previous best is still there", message)
                if message and record.step == NEW_STEP:
                    self.assertIn("the next read of best/ finishes it", message)
                self.assertTrue(message is None or "No space left" in message, message)


if __name__ == "__main__":
    absltest.main()
