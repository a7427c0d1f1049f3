"""A healthy checkpoint, by definition and by test: what a divergence stop names, what a rerun
resumes from and what a rollback restores is a checkpoint from which training goes on.

The fault of issue "finite is not healthy": one step at a huge learning rate writes huge but
finite weights, its checkpoint passes the finite check, and the next step is NaN. That
checkpoint must be set aside, not named as the last good one.
"""

import json
import os
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.loop import guards
from inception.loop import session_loop
from inception.run import checkpoint_io
from inception.run import health
from inception.run.directory import RunDirectory
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
BATCH = 8
NUM_TOWERS = 2
MARKER = 2.0  # a pixel value no real input has (they lie in [-1, 1])


def marked_batches(marked_batch=None):
    """The small model's batches; batch number `marked_batch` (1-based) carries MARKER in one
    pixel of every image, which barely changes its loss."""
    def mark(images, labels, number):
        if marked_batch is None:
            return images, labels
        marker = tf.scatter_nd([[0, 0, 0]], [MARKER], images.shape[1:])
        return tf.where(tf.equal(number, marked_batch), tf.maximum(images, marker),
                        images), labels
    return testing_utils.numbered_batches(mark, BATCH)


def _gradient_scaled_when(value, when, factor):
    """`value` itself; its gradient is `factor` times larger while `when` holds."""
    @tf.custom_gradient
    def identity(x):
        return tf.identity(x), lambda dy: dy * tf.where(when, factor, 1.0)
    return identity(value)


def overflowing_model_fn(images, labels):
    """A conv, pool, square, dense classifier: like a deep network, huge weights overflow it
    to Inf and NaN (a shallow linear model would merely give huge finite losses)."""
    kernel = tf1.get_variable("net/conv/kernel", [3, 3, 3, 8],
                              initializer=tf1.glorot_uniform_initializer(seed=1))
    net = tf.reduce_mean(tf.nn.relu(tf.nn.conv2d(images, kernel, 1, "SAME")), axis=[1, 2])
    weights = tf1.get_variable("net/logits/weights", [8, 4],
                               initializer=tf1.glorot_uniform_initializer(seed=2))
    logits = tf.matmul(tf.square(net), weights)
    return {"cross_entropy": tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))}


def build_graph_fn(learning_rate=0.01, optimizer="rmsprop", marked_batch=None,
                   gradient_factor=1e8):
    """build_graph for train_loop: the overflowing model on 2 towers; the marked batch's
    gradient is `gradient_factor` times too large (a fault tied to the data, as a bad batch
    is)."""
    def model_fn(images, labels):
        marked = tf.reduce_max(images) > 1.5
        return {name: _gradient_scaled_when(value, marked, gradient_factor)
                for name, value in overflowing_model_fn(images, labels).items()}

    def build():
        return step_graph.build_train_graph(
            marked_batches(marked_batch), lambda decay: model_fn,
            testing_utils.optimization(initial_learning_rate=learning_rate,
                                       optimizer=optimizer),
            testing_utils.sharing_of([f"/cpu:{i}" for i in range(NUM_TOWERS)]), 64)
    return build


def run(train_dir, max_steps, lines=None, **options):
    loop_options = {name: options.pop(name) for name in ("on_nan", "max_nan_rollbacks")
                    if name in options}
    settings = settings_lib.LoopSettings(train_dir=train_dir, max_steps=max_steps,
                                         log_every_n_steps=1, save_summaries_steps=0,
                                         save_checkpoint_steps=1, save_interval_secs=0,
                                         **loop_options)
    return session_loop.run_training(build_graph_fn(**options),
                                     testing_utils.cpu_session_config(NUM_TOWERS), settings,
                                     log=(lines.append if lines is not None else lambda _: None))


def checkpoint_steps(train_dir):
    """Steps of the checkpoints a tool would consider, oldest first."""
    return sorted(checkpoint_io.step_of(path)
                  for path in RunDirectory(train_dir).candidates())


class HealthyCheckpointTest(unittest.TestCase):

    def test_a_huge_rate_stops_naming_the_checkpoint_before_it_and_a_rerun_finishes(self):
        train_dir = testing_utils.temp_dir("huge_rate")
        run(train_dir, 12)
        with self.assertRaises(guards.DivergenceError) as caught:
            run(train_dir, 30, learning_rate=1e12)
        error = caught.exception
        healthy = os.path.join(train_dir, "model.ckpt-12")
        self.assertEqual(error.last_checkpoint, healthy)
        self.assertIn(f"the last healthy checkpoint is {healthy} (a rerun continues from it)",
                      str(error))
        # Everything written since the divergence began is set aside, kept and named.
        self.assertTrue(error.set_aside, str(error))
        for path in error.set_aside:
            self.assertGreater(checkpoint_io.step_of(path), 12)
            name = os.path.basename(path)
            self.assertIn(name, str(error))
            self.assertTrue(os.path.exists(path + ".unusable.index"), path)
            self.assertFalse(os.path.exists(path + ".index"), path)
        self.assertEqual(checkpoint_steps(train_dir)[-1], 12)
        self.assertEqual(len(str(error).splitlines()), 1)
        # The README's promise: a rerun at a sane rate continues from there to the end.
        lines = []
        result = run(train_dir, 20, lines)
        self.assertEqual(result.step, 20)
        self.assertTrue(any("resumed from" in line and "(step 12)" in line for line in lines),
                        lines)

    def test_a_rollback_goes_to_the_last_healthy_checkpoint_and_finishes_in_one_run(self):
        # Batch 13 makes a huge but finite update: its checkpoint holds finite weights from
        # which the next steps blow up. The old rollback restored that very checkpoint again
        # and again; this one goes back to step 12 and skips the bad batch.
        train_dir = testing_utils.temp_dir("rollback_healthy")
        lines = []
        result = run(train_dir, 24, lines, optimizer="sgd", marked_batch=13, on_nan="rollback")
        self.assertEqual(result.step, 24)
        rolled = [line for line in lines if "rolled back to" in line]
        self.assertEqual(len(rolled), 1, lines)
        self.assertIn(f"rolled back to {os.path.join(train_dir, 'model.ckpt-12')} (step 12)",
                      rolled[0])
        self.assertRegex(rolled[0], r"set aside model\.ckpt-13(, model\.ckpt-\d+)* \(kept as")
        self.assertTrue(os.path.exists(os.path.join(train_dir, "model.ckpt-13.unusable.index")))
        testing_utils.assert_finite_checkpoint(self, result.checkpoint)

    def test_each_save_records_its_loss_norm_and_whether_its_next_step_was_sound(self):
        train_dir = testing_utils.temp_dir("health_records")
        run(train_dir, 4)
        path = os.path.join(train_dir, health.HEALTH_FILE)
        with open(path, encoding="utf-8") as handle:
            records = json.load(handle)
        self.assertEqual(sorted(records), [f"model.ckpt-{step}" for step in (1, 2, 3, 4)])
        for name, record in records.items():
            self.assertEqual(record["step"], checkpoint_io.step_of(name))
            self.assertTrue(np.isfinite(record["loss"]) and record["gradient_norm"] > 0)
            self.assertFalse(record["climbing"])
        # Steps 2-4 ran from checkpoints 1-3; nothing has run from the last one yet.
        self.assertEqual([records[f"model.ckpt-{step}"]["verified"] for step in (1, 2, 3, 4)],
                         [True, True, True, False])


class RunClockTest(unittest.TestCase):

    def test_a_resumed_run_goes_on_counting_and_a_fresh_one_starts_at_zero(self):
        directory = RunDirectory(testing_utils.temp_dir("clock"))
        first = health.RunClock(directory, resumed=True)  # nothing recorded yet: from zero
        self.assertLess(first.seconds(), 5.0)
        first.before = 100.0  # as if 100 s had passed
        first.record(7)
        self.assertEqual(health.recorded_progress(directory), 7)
        self.assertGreaterEqual(health.recorded_progress(directory, "wall_secs"), 100.0)
        resumed = health.RunClock(directory, resumed=True)
        self.assertGreaterEqual(resumed.seconds(), 100.0)
        self.assertLess(health.RunClock(directory, resumed=False).seconds(), 5.0)


class LastHealthyTest(unittest.TestCase):
    """HealthRecords.last_healthy on hand-made records."""

    def directory_with(self, records):
        train_dir = testing_utils.temp_dir("records")
        directory = RunDirectory(train_dir)
        for step in records:
            for suffix in (".index", ".data-00000-of-00001"):
                with open(directory.prefix(step) + suffix, "w", encoding="utf-8"):
                    pass
        for step, (climbing, verified) in records.items():
            directory.health.record_save(directory.prefix(step), health.SaveRecord(
                step, 1.0, 1.0, 1.0, climbing, verified), log=self.fail)
        return directory

    def test_the_rules(self):
        directory = self.directory_with({5: (False, True), 6: (False, False),
                                         7: (True, True), 8: (False, False)})
        # Diverged at step 9 (its loss NaN): the weights of step 8 are the first suspect.
        self.assertEqual(directory.health.last_healthy(8), directory.prefix(6))
        # With losses above the threshold since step 7: 6 is suspect and unverified, 7 was
        # written while climbing.
        self.assertEqual(directory.health.last_healthy(6), directory.prefix(5))
        self.assertIsNone(self.directory_with({3: (True, True)}).health.last_healthy(10))


if __name__ == "__main__":
    absltest.main()
