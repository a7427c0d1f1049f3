"""--model: the registry's choices, and ResNet-50 through every command: trained at a tiny
size with slim's variable names, its network recorded with the run, the eval job scoring as
the run's own validation, the export's logits as the evaluation graph's, a run of another
network refused in its directory, and --fine_tune from a slim-style checkpoint of 1000 labels.
(Inception v3 passes the same checks in the other tests: in_training_test, saved_model_test,
fine_tuning_test; synced_batch_norm_test checks every network's synced towers.)"""

import os
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import commands
from inception.config import help_texts
from inception.config import plans
from inception.config import settings as settings_lib
from inception.config.rules import SettingsError
from inception.driver import launch
from inception.model import registry
from inception.model import resnet
from inception.model.slim_compat import tf_slim as slim
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.serving import saved_model
from inception.validation import job
from inception.validation import scoring
from tests import testing_utils
from tests import tiny_eval

tf1 = tf.compat.v1
DATA = testing_utils.DemoData(train=16, validation=8)
# A ResNet-50 of a quarter of the blocks' channels at 75 px (the smallest size the flags take):
# every layer and name of the real one, a few seconds of graph building.
TINY_RESNET = dict(network="resnet_v1_50", image_size=75, depth_multiplier=0.25)
DEEPEST = "resnet_v1_50/block4/unit_3/bottleneck_v1/conv3/weights"  # slim's name for it


def options(train_dir, **overrides):
    """The tiny ResNet's run settings on the demo data, one tower."""
    values = dict(train_dir=train_dir, data_dir=DATA.path, dataset="demo", max_steps=2,
                  eval_every_n_steps=2, batch_size=4, num_towers=1, save_summaries_steps=0,
                  **TINY_RESNET)
    values.update(overrides)
    return settings_lib.train_settings(**values)


class RegistryTest(unittest.TestCase):

    def test_an_unknown_network_is_one_line_naming_the_choices(self):
        with self.assertRaisesRegex(SettingsError, r"^--model=vgg_16 is not a network of this "
                                    r"trainer; choose one of inception_v3, resnet_v1_50\.$"):
            launch.train(options(testing_utils.temp_dir("unknown"), network="vgg_16"),
                         log=lambda line: None)

    def test_the_help_names_every_network(self):
        for name in registry.NETWORKS:
            self.assertIn(name, help_texts.TRAIN_HELP["network"].help)

    def test_each_network_names_what_fine_tuning_replaces(self):
        self.assertEqual(registry.network_named(None).name, "inception_v3")  # the default
        self.assertEqual(registry.NETWORKS["resnet_v1_50"].head_scopes,
                         ("resnet_v1_50/logits",))


class ResNetRunTest(unittest.TestCase):
    """One tiny ResNet-50 run, validated at its end, checked through every command."""

    @classmethod
    def setUpClass(cls):
        cls.train_dir = testing_utils.temp_dir("resnet")
        cls.lines = []
        cls.result = launch.train(options(cls.train_dir), log=cls.lines.append)

    def test_slim_names_and_the_network_kept_with_the_run(self):
        self.assertEqual(self.result.step, 2)
        self.assertTrue(any("ResNet-50 v1 x0.25 at 75px" in line for line in self.lines),
                        self.lines)
        names = tf.train.load_checkpoint(self.result.checkpoint).get_variable_to_shape_map()
        for name in (DEEPEST, "resnet_v1_50/conv1/weights", "resnet_v1_50/conv1/BatchNorm/gamma",
                     "resnet_v1_50/logits/biases"):
            self.assertIn(name, names)
        self.assertFalse([name for name in names if name.startswith("InceptionV3")])
        testing_utils.assert_finite_checkpoint(self, self.result.checkpoint)
        self.assertEqual(RunDirectory(self.train_dir).read_settings().model.network,
                         "resnet_v1_50")

    def test_another_network_in_its_directory_is_refused(self):
        with self.assertRaisesRegex(checkpoint_io.CheckpointError,
                                    "trained with network='resnet_v1_50', not 'inception_v3'; "
                                    "drop --model or pass a new --train_dir"):
            launch.train(options(self.train_dir, network="inception_v3", max_steps=3),
                         log=lambda line: None)

    def test_the_eval_job_scores_as_the_runs_validation(self):
        validated = self.result.last_validation
        evaluated, = job.run_evaluation(settings_lib.EvalSettings(
            checkpoint_dir=self.train_dir, run_once=True, batch_size=4,
            eval_dir=testing_utils.temp_dir("resnet_eval")), log=lambda line: None)
        self.assertEqual((evaluated.step, validated.step), (2, 2))
        # The same graph on the same examples and weights (in_training_test's reasoning).
        self.assertEqual(evaluated.precision_at_1, validated.precision_at_1)
        np.testing.assert_array_equal(evaluated.confusion, validated.confusion)
        self.assertAlmostEqual(evaluated.loss, validated.loss, delta=1e-5 * validated.loss)

    def test_the_export_gives_the_evaluation_graphs_logits(self):
        version_dir = saved_model.export_training_run(
            commands.ExportSettings(self.train_dir,
                                    export_dir=testing_utils.temp_dir("resnet_export")),
            log=lambda line: None)
        shards = sorted(tf.io.gfile.glob(os.path.join(DATA.path, "validation-*")))
        captured = []

        def logits_fn(images, model):  # the evaluation's default, its logits kept
            captured.append(registry.inference_logits(images, model))
            return captured[-1]
        eval_graph = scoring.build_eval_graph(
            shards, RunDirectory(self.train_dir).read_settings().model, 8, logits_fn=logits_fn)
        with tf1.Session(graph=eval_graph.graph) as session:
            eval_graph.saver.restore(session, self.result.checkpoint)
            session.run([eval_graph.local_initializer, eval_graph.input_initializer])
            eval_logits = session.run(captured[0])
        serve = tf.saved_model.load(version_dir).signatures["serving_default"]
        served = serve(image_bytes=tf.constant(tiny_eval.validation_bytes(shards)))
        # saved_model_test's bound: the same ops and weights in two graphs that Grappler fuses
        # differently (float32 rounding through the network); another preprocessing (the
        # mean subtraction left out) or another network would move them by far more.
        np.testing.assert_allclose(served["logits"].numpy(), eval_logits, rtol=1e-4, atol=1e-4)
        self.assertGreater(np.ptp(eval_logits, axis=0).max(), 0.0)


class ResNetFineTuneTest(unittest.TestCase):

    def test_fine_tune_from_a_slim_checkpoint_of_other_classes(self):
        published, values = write_slim_style_checkpoint(testing_utils.temp_dir("slim_resnet"))
        lines = []
        result = launch.train(options(testing_utils.temp_dir("resnet_fine_tune"), max_steps=1,
                                      eval_every_n_steps=0, fine_tune=True,
                                      plan=plans.plan_from_scopes(resnet.HEAD_SCOPES),
                                      pretrained_model_checkpoint_path=published),
                              log=lines.append)
        self.assertTrue(any(line.startswith("initialized ") and "resnet_v1_50/logits" in line
                            for line in lines), lines)
        saved = tf.train.load_checkpoint(result.checkpoint)
        # Restored, and left alone by a step that trains the new logits only.
        for name in (DEEPEST, "resnet_v1_50/conv1/BatchNorm/gamma"):
            np.testing.assert_array_equal(saved.get_tensor(name), values[name], name)
        self.assertEqual(saved.get_tensor("resnet_v1_50/logits/biases").shape, (6,))


def write_slim_style_checkpoint(directory):
    """A checkpoint holding only the tiny ResNet's model variables, named as tf-slim's published
    resnet_v1_50.ckpt names them, for 1001 logits; (its path, {name: value})."""
    model = settings_lib.ModelSettings(1001, TINY_RESNET["image_size"],
                                       TINY_RESNET["depth_multiplier"], "imagenet",
                                       TINY_RESNET["network"])
    with tf.Graph().as_default():
        resnet.resnet_v1_50_logits(tf.zeros([1, 75, 75, 3]), model, is_training=False)
        variables = slim.get_model_variables()
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            values = {v.op.name: session.run(v) for v in variables}
            path = tf1.train.Saver(variables).save(
                session, os.path.join(directory, "resnet_v1_50.ckpt"), write_meta_graph=False)
    return path, values


if __name__ == "__main__":
    absltest.main()
