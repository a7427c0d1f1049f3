"""Paths of any file system TensorFlow reaches (here its in-memory `ram://`, standing in for
`gs://` and the like): data, training, resuming, evaluation and export all go through
tf.io.gfile, and the entry points keep such paths as they are."""

import os
import unittest

import tensorflow as tf
from absl.testing import absltest

from common import cli
from inception.config import commands
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.serving import saved_model
from inception.validation import job
from tests import testing_utils


class RamFileSystemTest(unittest.TestCase):

    def test_train_resume_evaluate_and_export_on_ram(self):
        data_dir, train_dir = "ram://remote/shards", "ram://remote/run"
        local = testing_utils.tiny_demo_data(train=8, validation=4)
        tf.io.gfile.makedirs(data_dir)
        for name in tf.io.gfile.listdir(local):
            tf.io.gfile.copy(os.path.join(local, name), os.path.join(data_dir, name))

        def train(max_steps):
            return launch.train(settings_lib.train_settings(
                train_dir=train_dir, data_dir=data_dir, dataset="demo", eval_every_n_steps=0,
                max_steps=max_steps,
                **testing_utils.tiny_model(), batch_size=2, num_towers=1),
                log=lines.append)

        lines = []
        self.assertEqual(train(2).checkpoint, f"{train_dir}/model.ckpt-2")
        self.assertTrue(tf.io.gfile.exists(f"{train_dir}/model_settings.json"))
        self.assertEqual(train(3).step, 3)
        self.assertTrue(any(f"resumed from {train_dir}/model.ckpt-2" in line for line in lines))
        results = job.run_evaluation(settings_lib.EvalSettings(
            checkpoint_dir=train_dir, run_once=True, batch_size=4), log=lines.append)
        self.assertEqual([(result.step, result.num_examples) for result in results], [(3, 4)])
        self.assertTrue(tf.io.gfile.isdir(f"{train_dir}/eval_validation"))
        version = saved_model.export_training_run(
            commands.ExportSettings(train_dir, export_dir="ram://remote/export"),
            log=lines.append)
        self.assertTrue(tf.io.gfile.exists(f"{version}/saved_model.pb"))

    def test_entry_points_keep_urls_as_they_are(self):
        self.assertEqual(cli.user_path("gs://bucket/run"), "gs://bucket/run")
        self.assertTrue(cli.user_path("run").startswith("/"))


if __name__ == "__main__":
    absltest.main()
