"""A run directory is self-contained: copied or moved, every tool finds its own checkpoints,
whatever paths TensorFlow's `checkpoint` file holds; and a directory nobody can write is one
line before any work."""

import os
import shutil
import subprocess
import sys
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.validation import job
from tests import testing_utils

tf1 = tf.compat.v1


def write_absolute_state(directory, points_to):
    """TensorFlow's `checkpoint` file as runs before relative paths wrote it: absolute paths,
    here into `points_to` (the directory the run was copied from)."""
    steps = sorted(checkpoint_io.step_of(path)
                   for path in RunDirectory(directory).candidates())
    paths = [os.path.join(points_to, f"model.ckpt-{step}") for step in steps]
    tf1.train.update_checkpoint_state(directory, paths[-1], all_model_checkpoint_paths=paths)


def tensors(prefix):
    """{name: value} of every tensor of a checkpoint."""
    reader = tf1.train.NewCheckpointReader(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


class CopiedRunTest(unittest.TestCase):

    def test_the_state_file_names_checkpoints_relative_to_the_directory(self):
        train_dir = testing_utils.temp_dir("relative")
        testing_utils.train_small_model(train_dir, 4)
        with open(os.path.join(train_dir, "checkpoint"), encoding="utf-8") as handle:
            state = handle.read()
        self.assertIn('model_checkpoint_path: "model.ckpt-4"', state)
        self.assertNotIn(train_dir, state)

    def test_rewriting_the_state_writes_names_only_in_a_relative_directory_too(self):
        # TensorFlow's update_checkpoint_state rewrites names relative to a directory given
        # relative ("../model.ckpt-4"); rewrite_state must hand it an absolute one.
        parent = testing_utils.temp_dir("state")
        os.makedirs(os.path.join(parent, "run"))
        previous = os.getcwd()
        os.chdir(parent)
        try:
            RunDirectory("run").rewrite_state(["run/model.ckpt-2", "run/model.ckpt-4"])
            state = tf.train.get_checkpoint_state("run")
        finally:
            os.chdir(previous)
        with open(os.path.join(parent, "run", "checkpoint"), encoding="utf-8") as handle:
            text = handle.read()
        self.assertEqual(text.splitlines()[:3], [
            'model_checkpoint_path: "model.ckpt-4"',
            'all_model_checkpoint_paths: "model.ckpt-2"',
            'all_model_checkpoint_paths: "model.ckpt-4"'])
        self.assertEqual(os.path.basename(state.model_checkpoint_path), "model.ckpt-4")

    def test_a_copy_uses_its_own_weights_while_the_original_still_exists(self):
        original = testing_utils.temp_dir("original")
        testing_utils.train_small_model(original, 4)
        copy = os.path.join(testing_utils.temp_dir("copies"), "copy")
        shutil.copytree(original, copy)
        write_absolute_state(copy, points_to=original)
        testing_utils.train_small_model(original, 8)  # the original moves on: other weights
        directory = RunDirectory(copy)
        self.assertEqual(directory.listed(), [os.path.join(copy, "model.ckpt-2"),
                                              os.path.join(copy, "model.ckpt-4")])
        newest = directory.newest_usable(log=self.fail)
        self.assertEqual(newest, os.path.join(copy, "model.ckpt-4"))
        theirs = tensors(os.path.join(original, "model.ckpt-8"))
        for name, value in tensors(newest).items():  # tensor by tensor: the copy's own
            if name.startswith("net/"):
                self.assertFalse(np.array_equal(value, theirs[name]), name)
        # Training in the copy resumes from the copy too, and writes relative names again.
        lines = []
        result = testing_utils.train_small_model(copy, 6, log=lines.append)
        self.assertEqual(result.step, 6)
        self.assertTrue(any(f"resumed from {copy}/model.ckpt-4" in line for line in lines))

    def test_a_moved_run_works_with_the_original_path_gone(self):
        original = testing_utils.temp_dir("moved_from")
        testing_utils.train_small_model(original, 4)
        write_absolute_state(original, points_to=original)  # as an older run wrote it
        moved = os.path.join(testing_utils.temp_dir("moved"), "run")
        shutil.move(original, moved)
        directory = RunDirectory(moved)
        self.assertEqual(directory.newest_usable(log=self.fail),
                         os.path.join(moved, "model.ckpt-4"))
        self.assertEqual(directory.listed()[-1], os.path.join(moved, "model.ckpt-4"))


READ_ONLY_TRAIN = """
import sys
sys.path[:0] = {path!r}
from inception.config import settings as settings_lib
from common import cli
from inception.driver import launch
try:
    launch.train(settings_lib.train_settings(train_dir={train_dir!r}, max_steps=1,
                                           num_towers=1, eval_every_n_steps=0), log=print)
except cli.UserError as error:
    print("ERROR", error)
"""


class ReadOnlyTest(unittest.TestCase):
    """On a read-only file system (skipped, saying so, where none can be mounted)."""

    def test_a_read_only_train_dir_is_one_line(self):
        train_dir = os.path.join(testing_utils.read_only_directory(self), "run")
        completed = subprocess.run(
            [sys.executable, "-c", READ_ONLY_TRAIN.format(path=sys.path, train_dir=train_dir)],
            capture_output=True, text=True, timeout=600, check=False)
        self.assertNotIn("Traceback", completed.stderr)
        self.assertIn(f"ERROR cannot write in --train_dir={train_dir} (Read-only file system); "
                      "pass a directory you can write.", completed.stdout)

    def test_evaluating_a_run_on_a_read_only_share_is_one_line_naming_eval_dir(self):
        share = testing_utils.read_only_directory(
            self, lambda path: testing_utils.train_small_model(os.path.join(path, "run"), 2))
        eval_dir = os.path.join(share, "run", "eval_validation")
        with self.assertRaisesRegex(job.EvalDirError,
                                    f"^cannot write evaluation summaries to {eval_dir} "
                                    r"\(.*Read-only file system.*\); pass --eval_dir="):
            job.open_summary_writer(eval_dir)
        self.assertEqual(RunDirectory(os.path.join(share, "run")).newest(),
                         os.path.join(share, "run", "model.ckpt-2"))


if __name__ == "__main__":
    absltest.main()
