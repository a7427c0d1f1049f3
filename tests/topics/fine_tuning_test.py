"""Inception v3: training only some scopes (across 2 towers), and fine-tuning from checkpoints."""

import os
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from common import cli
from inception.config import plans
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.model import network
from inception.model.slim_compat import tf_slim as slim
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from tests import testing_utils

tf1 = tf.compat.v1
HEAD_SCOPES = ("InceptionV3/Logits", "InceptionV3/AuxLogits")
DATA = testing_utils.DemoData(train=16, validation=4)


def options(train_dir, **overrides):
    """Tiny run settings; one tower, as restoring does not depend on the towers (the scopes'
    test takes two)."""
    values = dict(train_dir=train_dir, data_dir=DATA.path, dataset="demo", eval_every_n_steps=0,
                  max_steps=2,
                  **testing_utils.tiny_model(aux_head=True), batch_size=4, num_towers=1,
                  save_summaries_steps=0)
    values.update(overrides)
    return settings_lib.train_settings(**values)


def read(path):
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def write_slim_style_checkpoint(directory, num_classes):
    """A checkpoint with only tf-slim's model variable names (like the published
    inception_v3.ckpt), for a network with `num_classes` logits."""
    settings = settings_lib.ModelSettings(num_classes, 107, 0.1, "imagenet")
    with tf.Graph().as_default():
        network.inception_logits(tf.zeros([1, 107, 107, 3]), settings, is_training=False)
        variables = slim.get_model_variables()
        saver = tf1.train.Saver(variables)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            values = {v.op.name: session.run(v) for v in variables}
            path = saver.save(session, os.path.join(directory, "inception_v3.ckpt"),
                              write_meta_graph=False)
    return path, values


class TrainableScopesTest(unittest.TestCase):

    def test_only_head_variables_change_across_two_towers(self):
        train_dir = testing_utils.temp_dir("head_only")
        launch.train(options(train_dir, max_steps=1, save_checkpoint_steps=1, num_towers=2),
                     log=lambda line: None)
        lines = []
        launch.train(options(train_dir, max_steps=3, num_towers=2,
                             plan=plans.plan_from_scopes(HEAD_SCOPES)),
                     log=lines.append)
        self.assertTrue(any("stage 'train'" in line and "InceptionV3/Logits" in line
                            for line in lines))
        before = read(os.path.join(train_dir, "model.ckpt-1"))
        after = read(os.path.join(train_dir, "model.ckpt-3"))
        trainable_changed = sorted(
            name for name in before
            if name.startswith("InceptionV3/") and not name.endswith(
                ("moving_mean", "moving_variance", "ExponentialMovingAverage", "RMSProp",
                 "RMSProp_1"))
            and not np.array_equal(before[name], after[name]))
        self.assertTrue(trainable_changed)
        for name in trainable_changed:
            self.assertTrue(name.startswith(HEAD_SCOPES), name)
        frozen_weights = "InceptionV3/Conv2d_1a_3x3/weights"
        np.testing.assert_array_equal(before[frozen_weights], after[frozen_weights])
        # Documented choice (README "Training in stages"): batch norm of frozen layers stays in
        # training mode and its moving statistics keep following the data, as in tf-slim.
        frozen_mean = "InceptionV3/Conv2d_1a_3x3/BatchNorm/moving_mean"
        self.assertFalse(np.array_equal(before[frozen_mean], after[frozen_mean]))


class FineTuningTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.published, cls.published_values = write_slim_style_checkpoint(
            testing_utils.temp_dir("published"), num_classes=1001)

    def test_fine_tune_the_new_head_from_a_checkpoint_with_other_classes(self):
        train_dir = testing_utils.temp_dir("fine_tune")
        lines = []
        result = launch.train(options(train_dir, max_steps=1, fine_tune=True,
                                      plan=plans.plan_from_scopes(HEAD_SCOPES),
                                      pretrained_model_checkpoint_path=self.published),
                              log=lines.append)
        self.assertTrue(any(line.startswith("initialized ") and "InceptionV3/Logits" in line
                            for line in lines), lines)
        saved = read(result.checkpoint)
        for name in ("InceptionV3/Conv2d_1a_3x3/weights", "InceptionV3/Mixed_7c/"
                     "Branch_3/Conv2d_0b_1x1/weights", "InceptionV3/Conv2d_2b_3x3/BatchNorm/beta"):
            np.testing.assert_array_equal(saved[name], self.published_values[name], name)
            # The moving averages evaluation restores start at the restored values.
            np.testing.assert_array_equal(saved[name + "/ExponentialMovingAverage"],
                                          self.published_values[name], name)
        self.assertEqual(saved["InceptionV3/Logits/Conv2d_1c_1x1/biases"].shape, (6,))

        # A later run resumes from train_dir's own checkpoint, not the pretrained one.
        lines = []
        launch.train(options(train_dir, max_steps=2, fine_tune=True,
                             pretrained_model_checkpoint_path=self.published),
                     log=lines.append)
        self.assertTrue(any("resumed from" in line for line in lines))
        self.assertFalse(any(line.startswith("initialized ") for line in lines))
        # The head-only run had optimizer slots for the head only; the rest start fresh.
        self.assertTrue(any("optimizer or averaging variables are not in" in line
                            for line in lines), lines)

    def test_other_classes_without_fine_tune_fail_clearly(self):
        train_dir = testing_utils.temp_dir("no_fine_tune")
        with self.assertRaisesRegex(checkpoint_io.CheckpointError,
                                    r"variable InceptionV3/AuxLogits/Conv2d_2b_1x1/biases has "
                                    r"shape \[1001\].*\[6\].*--fine_tune"):
            launch.train(options(train_dir, pretrained_model_checkpoint_path=self.published),
                         log=lambda line: None)
        self.assertIsNone(RunDirectory(train_dir).newest())

    def test_exclude_scopes_instead_of_fine_tune(self):
        lines = []
        launch.train(options(testing_utils.temp_dir("exclude"), max_steps=1,
                             checkpoint_exclude_scopes=HEAD_SCOPES,
                             pretrained_model_checkpoint_path=self.published),
                     log=lines.append)
        self.assertTrue(any("left freshly initialized under InceptionV3/Logits, "
                            "InceptionV3/AuxLogits" in line for line in lines), lines)

    def test_missing_checkpoint_and_flags_without_one(self):
        train_dir = testing_utils.temp_dir("missing")
        with self.assertRaisesRegex(checkpoint_io.CheckpointError, "/nonexistent does not exist"):
            launch.train(options(train_dir, pretrained_model_checkpoint_path="/nonexistent"),
                         log=lambda line: None)
        with self.assertRaisesRegex(cli.UserError, "need --pretrained_model_checkpoint_path"):
            launch.train(options(train_dir, fine_tune=True), log=lambda line: None)

    def test_scope_that_matches_nothing(self):
        train_dir = testing_utils.temp_dir("bad_scope")
        with self.assertRaisesRegex(plans.PlanError, "scope 'tower_0/InceptionV3/Logits' "
                                    "matches no trainable variable"):
            plan = plans.plan_from_scopes(("tower_0/InceptionV3/Logits",))
            launch.train(options(train_dir, plan=plan), log=lambda line: None)


if __name__ == "__main__":
    absltest.main()
