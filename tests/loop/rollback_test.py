"""What the training loop does once training diverged (--on_nan=rollback), and the copy of
the weights a fresh run started from that a rollback before the first healthy checkpoint
restores."""

import os
import unittest

import tensorflow as tf
from absl.testing import absltest

from inception.loop import guards
from inception.run.directory import RunDirectory
from tests import testing_utils
from tests.loop.loop_fixture import poisoned_batches
from tests.loop.loop_fixture import run


class RollbackTest(unittest.TestCase):

    def test_a_rollback_restores_the_last_checkpoint_and_continues(self):
        train_dir = testing_utils.temp_dir("rollback")
        lines = []
        result = run(train_dir, 12, log=lines.append, settings={"on_nan": "rollback"},
                     input_fn=lambda batch: poisoned_batches(7, 7))
        self.assertEqual(result.step, 12)
        rolled = [line for line in lines if "rolled back" in line]
        self.assertEqual(len(rolled), 1, lines)
        # (oneDNN's ReLU turns NaN into 0, so the loss of a NaN batch can look fine; the
        # gradients cannot.)
        self.assertRegex(rolled[0], r"(loss is not finite at step 7|the update of step 7 is "
                                    r"not finite) in tower_0, tower_1")
        self.assertIn(f"rolled back to {os.path.join(train_dir, 'model.ckpt-5')} (step 5), "
                      "skipping the 2 batch(es) since (rollback 1 of at most 3)", rolled[0])
        scalars = testing_utils.read_scalars(train_dir)
        self.assertEqual(scalars["train/nan_rollbacks"], [(7, 1.0)])
        testing_utils.assert_finite_checkpoint(self, result.checkpoint)
        self.assertEqual(int(tf.train.load_checkpoint(result.checkpoint).get_tensor(
            "global_step")), 12)

    def test_rollbacks_give_up_after_the_limit(self):
        train_dir = testing_utils.temp_dir("rollback_limit")
        lines = []
        with self.assertRaises(guards.DivergenceError) as caught:
            run(train_dir, 40, log=lines.append,
                settings={"on_nan": "rollback", "max_nan_rollbacks": 2},
                input_fn=lambda batch: poisoned_batches(7))
        self.assertEqual(len([line for line in lines if "rolled back" in line]), 2)
        self.assertTrue(any("2 rollback(s) already (--max_nan_rollbacks=2); stopping." in line
                            for line in lines))
        self.assertIn("the last healthy checkpoint is " + os.path.join(train_dir, "model.ckpt-5"),
                      str(caught.exception))
        testing_utils.assert_finite_checkpoint(self, RunDirectory(train_dir).newest())

    def test_before_any_checkpoint_a_rollback_restarts_from_the_initial_weights(self):
        train_dir = testing_utils.temp_dir("rollback_start")
        lines = []
        result = run(train_dir, 6, log=lines.append,
                     settings={"on_nan": "rollback", "save_checkpoint_steps": 0},
                     input_fn=lambda batch: poisoned_batches(2, 2))
        self.assertEqual(result.step, 6)
        self.assertTrue(any("rolled back to the weights this run started from (step 0)" in line
                            for line in lines), lines)


class StartingWeightsTest(unittest.TestCase):
    """The copy of the starting weights costs one checkpoint's space: only a rollback reads it,
    and only until a checkpoint is healthy for good."""

    def test_a_run_that_stops_on_nan_keeps_no_copy(self):
        train_dir = testing_utils.temp_dir("start_default")
        run(train_dir, 3)
        self.assertFalse(os.path.exists(os.path.join(train_dir, "start")))

    def test_with_rollback_the_copy_lasts_until_the_first_checkpoint_proves_healthy(self):
        train_dir = testing_utils.temp_dir("start_rollback")
        start_dir = os.path.join(train_dir, "start")
        run(train_dir, 5, settings={"on_nan": "rollback"})  # saved at 5, no step from it yet
        self.assertTrue(tf.io.gfile.exists(os.path.join(start_dir, "model.ckpt-0.index")))
        run(train_dir, 7, settings={"on_nan": "rollback"})  # resumed: step 6 verified it
        self.assertFalse(os.path.exists(start_dir))
        fresh_dir = testing_utils.temp_dir("start_rollback_fresh")
        run(fresh_dir, 7, settings={"on_nan": "rollback"})  # one run: saved at 5, step 6 sound
        self.assertFalse(os.path.exists(os.path.join(fresh_dir, "start")))
        self.assertEqual(RunDirectory(fresh_dir).newest(),
                         os.path.join(fresh_dir, "model.ckpt-7"))

    def test_once_the_copy_is_gone_a_rollback_with_no_healthy_checkpoint_stops(self):
        train_dir = testing_utils.temp_dir("start_gone")
        lines = []
        with self.assertRaises(guards.DivergenceError) as caught:
            run(train_dir, 12, log=lines.append,
                settings={"on_nan": "rollback", "keep_checkpoints": 1},
                input_fn=lambda batch: poisoned_batches(11, 11))
        # model.ckpt-5 (healthy) was deleted when model.ckpt-10 was kept; 10 is suspect.
        self.assertFalse(any("rolled back" in line for line in lines), lines)
        self.assertIn("model.ckpt-10", str(caught.exception))




if __name__ == "__main__":
    absltest.main()
