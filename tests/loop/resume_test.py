"""How a session starts: fresh (initialize, an optional pretrained restore, averages synced) or
resumed from a checkpoint, which may lack optimizer state or averages but no model variable
(the loop around it: session_loop_test)."""

import dataclasses
import os
import types
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import plans
from inception.loop import resume
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from tests import testing_utils

tf1 = tf.compat.v1
KERNEL = "net/conv/kernel"
STEPS = 2
ADAM = plans.TrainingPlan((plans.Stage("train", optimizer="adam"),))


def session_config():
    return testing_utils.cpu_session_config(2)


def trained_checkpoint(leave_out=()):
    """A checkpoint of the small model after STEPS steps, without the variables `leave_out`;
    returns (its path, {name: value} of every variable when it was saved)."""
    with tf.Graph().as_default():
        built = testing_utils.build_small_train_graph()
        variables = {v.op.name: v for v in tf1.global_variables()}
        saver = tf1.train.Saver({name: v for name, v in variables.items()
                                 if name not in leave_out})
        with tf1.Session(config=session_config()) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            for _ in range(STEPS):
                session.run(built.stages[0].train_op)
            path = saver.save(session, os.path.join(testing_utils.temp_dir("resume"),
                                                    "model.ckpt"), global_step=STEPS)
            return path, session.run(variables)


def resumed(checkpoint, plan=None, make_model_fn=None):
    """Builds the small model's graph and resumes it from `checkpoint`; returns (the step
    `start` returned, {name: value} after it, {name: value} of a fresh initialization of the
    same graph, the lines logged)."""
    lines = []
    with tf.Graph().as_default():
        built = testing_utils.build_small_train_graph(plan, make_model_fn)
        variables = {v.op.name: v for v in tf1.global_variables()}
        start = resume.prepare_resume(checkpoint, built, variables, lines.append)
        with tf1.Session(config=session_config()) as session:
            step = start(session)
            values = session.run(variables)
        with tf1.Session(config=session_config()) as session:
            session.run(tf1.global_variables_initializer())
            fresh = session.run(variables)
    return step, values, fresh, lines


def assert_same_values(actual, expected, names):
    for name in names:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


class FreshStartTest(unittest.TestCase):

    def test_the_initializer_runs_after_initialization_and_the_averages_follow_it(self):
        pretrained = np.full([3, 3, 3, 8], 0.25, np.float32)
        with tf.Graph().as_default():
            built = testing_utils.build_small_train_graph()
            kernel = [v for v in tf1.trainable_variables() if v.op.name == KERNEL][0]

            def make_initializer():  # like a pretrained restore: its ops built here
                assign = kernel.assign(pretrained)
                return lambda session: session.run(assign)

            start = resume.prepare_fresh_start(built, make_initializer)
            with tf1.Session(config=session_config()) as session:
                self.assertEqual(start(session), 0)
                np.testing.assert_array_equal(session.run(kernel), pretrained)
                for variable in tf1.trainable_variables():
                    average = built.moving_average.average(variable)
                    np.testing.assert_array_equal(session.run(average), session.run(variable),
                                                  err_msg=variable.op.name)
                self.assertEqual(session.run(built.global_step), 0)

    def test_without_an_initializer_every_variable_is_initialized(self):
        with tf.Graph().as_default():
            built = testing_utils.build_small_train_graph()
            start = resume.prepare_fresh_start(built, None)
            with tf1.Session(config=session_config()) as session:
                self.assertEqual(start(session), 0)
                self.assertEqual(session.run(tf1.report_uninitialized_variables()).size, 0)


    def test_a_rollback_before_any_checkpoint_restores_the_starting_weights_bit_for_bit(self):
        prefix = os.path.join(testing_utils.temp_dir("start"), "start", "model.ckpt-0")
        with tf.Graph().as_default():
            tf1.set_random_seed(3)
            built = testing_utils.build_small_train_graph()
            variables = {v.op.name: v for v in tf1.global_variables()}
            start = resume.prepare_fresh_start(built, None, variables, prefix)
            with tf1.Session(config=session_config()) as session:
                start(session)
                started = session.run(variables)
                self.assertTrue(tf.io.gfile.exists(prefix + ".index"))
                # What a rollback did before: the seeded initializers draw other weights.
                session.run(tf1.global_variables_initializer())
                redrawn = session.run(variables)
                self.assertFalse(np.array_equal(redrawn[KERNEL], started[KERNEL]))
                session.run(built.input_initializer)
                for _ in range(STEPS):
                    session.run(built.stages[0].train_op)
                self.assertEqual(start(session), 0)
                assert_same_values(session.run(variables), started, variables)

    def test_the_starting_weights_that_cannot_be_saved_are_one_line_naming_the_place(self):
        blocked = os.path.join(testing_utils.temp_dir("start_blocked"), "file")
        with open(blocked, "w", encoding="utf-8") as handle:
            handle.write("not a directory")
        prefix = os.path.join(blocked, "start", "model.ckpt-0")
        with tf.Graph().as_default():
            built = testing_utils.build_small_train_graph()
            variables = {v.op.name: v for v in tf1.global_variables()}
            start = resume.prepare_fresh_start(built, None, variables, prefix)
            with tf1.Session(config=session_config()) as session:
                with self.assertRaises(checkpoint_io.CheckpointError) as raised:
                    start(session)
        self.assertIn(f"could not save the starting weights as {prefix}", str(raised.exception))
        self.assertNotIn("\n", str(raised.exception))


class InputPositionTest(unittest.TestCase):

    def test_a_restore_keeps_the_position_the_input_has_reached(self):
        with tf.Graph().as_default():
            position = tf1.Variable(0, dtype=tf.int64, name="input_position")
            graph = types.SimpleNamespace(input_position=position)
            keep = resume.keeping_input_position(graph)
            restore_old = position.assign(8)  # what the checkpoint held
            with tf1.Session() as session:
                session.run(position.initializer)
                session.run(position.assign(40))
                keep(session, lambda s: s.run(restore_old))
                self.assertEqual(session.run(position), 40)

    def test_without_a_position_the_restore_alone_runs(self):
        ran = []
        resume.keeping_input_position(types.SimpleNamespace(input_position=None))(
            "session", ran.append)
        self.assertEqual(ran, ["session"])


class ResumeTest(unittest.TestCase):

    def test_the_step_and_every_stored_value_are_restored(self):
        path, stored = trained_checkpoint()
        step, values, fresh, lines = resumed(path)
        self.assertEqual(step, STEPS)
        self.assertEqual(sorted(values), sorted(stored))
        assert_same_values(values, stored, stored)
        self.assertFalse(np.array_equal(values[KERNEL], fresh[KERNEL]))  # trained, not initial
        self.assertEqual(lines, [])

    def test_optimizer_state_of_a_changed_plan_starts_fresh_with_a_note(self):
        path, stored = trained_checkpoint()
        step, values, fresh, lines = resumed(path, plan=ADAM)
        new = sorted(set(values) - set(stored))
        weights = ["net/conv/bias", KERNEL, "net/logits/weights"]
        self.assertEqual(new, sorted([f"{name}/Adam{slot}" for name in weights
                                      for slot in ("", "_1")]
                                     + ["stage_train/beta1_power", "stage_train/beta2_power"]))
        self.assertEqual(step, STEPS)
        assert_same_values(values, fresh, new)
        assert_same_values(values, stored, set(values) & set(stored))
        self.assertEqual(lines, [f"note: {len(new)} optimizer or averaging variables are not in "
                                 f"{path} (the training plan changed); they start fresh."])

    def test_an_average_the_checkpoint_lacks_starts_at_the_restored_weight(self):
        average = f"{KERNEL}/ExponentialMovingAverage"
        path, stored = trained_checkpoint(leave_out=[average])
        self.assertFalse(np.array_equal(stored[average], stored[KERNEL]))  # it lags behind
        _, values, _, lines = resumed(path)
        np.testing.assert_array_equal(values[average], stored[KERNEL])
        self.assertRegex(lines[0], "^note: 1 optimizer or averaging variables are not in ")

    def test_a_checkpoint_without_the_input_position_starts_the_input_over_with_a_note(self):
        checkpoint, _ = trained_checkpoint()
        lines = []
        with tf.Graph().as_default():
            built = testing_utils.build_small_train_graph()
            position = tf1.Variable(5, dtype=tf.int64, trainable=False, name="input_position")
            built = dataclasses.replace(built, input_position=position)
            variables = {v.op.name: v for v in tf1.global_variables()}
            start = resume.prepare_resume(checkpoint, built, variables, lines.append)
            with tf1.Session(config=session_config()) as session:
                self.assertEqual(start(session), STEPS)
                self.assertEqual(session.run(position), 5)  # its initial value
        self.assertEqual(lines, [f"note: {checkpoint} was written before checkpoints held the "
                                 "input's position; the input starts over from its first "
                                 "epoch."])

    def test_a_missing_model_variable_or_step_is_an_error_naming_it(self):
        for name in ("net/logits/weights", "global_step"):
            with self.subTest(name=name):
                path, _ = trained_checkpoint(leave_out=[name])
                with self.assertRaises(checkpoint_io.CheckpointError) as caught:
                    resumed(path)
                self.assertEqual(str(caught.exception),
                                 f"checkpoint {path} has no variable {name}; the model changed "
                                 "since it was written; use the flags it was trained with, or "
                                 "a new --train_dir.")

    def test_a_variable_of_another_shape_is_an_error_naming_it(self):
        path, _ = trained_checkpoint()
        with self.assertRaisesRegex(checkpoint_io.CheckpointError,
                                    "net/logits/weights.* use the flags it was trained with"):
            resumed(path, make_model_fn=lambda decay: testing_utils.small_conv_model_fn(
                num_classes=5))



class StepsTrainedAgainTest(unittest.TestCase):

    def test_a_resume_after_a_crash_says_how_many_steps_it_trains_again(self):
        train_dir = testing_utils.temp_dir("crashed")
        testing_utils.train_small_model(train_dir, 3, save_checkpoint_steps=2,
                                        log_every_n_steps=1)
        directory = RunDirectory(train_dir)
        for path in tf.io.gfile.glob(directory.prefix(3) + ".*"):  # as if it died after step 3
            os.remove(path)
        directory.rewrite_state([directory.prefix(2)])
        lines = []
        testing_utils.train_small_model(train_dir, 4, save_checkpoint_steps=2,
                                        log_every_n_steps=1, log=lines.append)
        resumed = [line for line in lines if "resumed from" in line]
        self.assertEqual(len(resumed), 1, lines)
        self.assertIn(f"resumed from {directory.prefix(2)} (step 2); the run had reached step 3, "
                      "so the 1 step(s) since that checkpoint are trained again", resumed[0])
        # Resumed from where it stopped: nothing to train again, nothing said.
        lines = []
        testing_utils.train_small_model(train_dir, 5, save_checkpoint_steps=2,
                                        log_every_n_steps=1, log=lines.append)
        self.assertTrue(any(line.endswith(f"resumed from {directory.prefix(4)} (step 4)")
                            for line in lines), lines)


if __name__ == "__main__":
    absltest.main()
