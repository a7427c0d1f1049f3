"""Training plans: parsing, variable selection by scope, and a GAN-style three-stage run."""

import os
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from common import cli
from inception.config import plans
from inception.config import settings as settings_lib
from inception.loop import session_loop
from inception.parallel import gradients as gradients_lib
from inception.parallel import towers
from inception.step import optimizers
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
BATCH = 8
FEATURES = 8 * 8 * 3

GAN_PLAN = plans.TrainingPlan((
    plans.Stage("generator", steps=2, scopes=("generator",), loss_terms=("generator_loss",),
                optimizer="sgd", learning_rate=0.5),
    plans.Stage("discriminator", steps=2, scopes=("discriminator",),
                loss_terms=("discriminator_loss",), optimizer="adam", learning_rate=0.01),
    plans.Stage("full", steps=2, optimizer="momentum", learning_rate=0.05),
))


def gan_model_fn(images, labels):
    """A tiny generator + discriminator; the 'noise' is derived from the images, so towers
    and one device see exactly the same inputs."""
    del labels
    real = tf.reshape(images, [-1, FEATURES])
    noise = tf.reduce_mean(images, axis=[1, 2])
    with tf1.variable_scope("generator"):
        weights = tf1.get_variable("w", [3, FEATURES],
                                   initializer=tf1.random_normal_initializer(seed=4))
        fake = tf.tanh(tf.matmul(noise, weights))

    def discriminator(inputs):
        with tf1.variable_scope("discriminator", reuse=tf1.AUTO_REUSE):
            hidden_w = tf1.get_variable("hidden", [FEATURES, 4],
                                        initializer=tf1.random_normal_initializer(seed=5))
            out_w = tf1.get_variable("out", [4, 1],
                                     initializer=tf1.random_normal_initializer(seed=6))
            return tf.matmul(tf.nn.relu(tf.matmul(inputs, hidden_w)), out_w)

    with tf1.variable_scope("unused"):
        tf1.get_variable("w", [2], initializer=tf1.ones_initializer())
    d_real, d_fake = discriminator(real), discriminator(fake)
    return {"generator_loss": tf.reduce_mean(tf.nn.softplus(-d_fake)),
            "discriminator_loss": tf.reduce_mean(tf.nn.softplus(-d_real))
            + tf.reduce_mean(tf.nn.softplus(d_fake))}


def stage_gradients(num_towers, stage, images, labels):
    """{variable name: averaged gradient} of `stage` with `num_towers` towers."""
    with tf.Graph().as_default():
        inputs = towers.split_batch((tf.constant(images), tf.constant(labels)), num_towers)
        devices = [f"/cpu:{i}" for i in range(num_towers)]
        tower_list = towers.build_towers(gan_model_fn, inputs, devices,
                                         testing_utils.on_host(devices))
        var_list = optimizers.select_variables(stage, tf1.trainable_variables())
        gradients = gradients_lib.build_gradients(tower_list, var_list, towers.regularization_loss(),
                                           stage.loss_terms)
        fetch = {v.op.name: g for g, v in gradients.grads_and_vars}
        with tf1.Session(config=testing_utils.cpu_session_config(num_towers)) as session:
            session.run(tf1.global_variables_initializer())
            return session.run(fetch)


def run_plan(train_dir, plan, max_steps=100, log=None):
    def build():
        return step_graph.build_train_graph(testing_utils.synthetic_input(BATCH),
                                            lambda decay: gan_model_fn,
                                            testing_utils.optimization(plan=plan),
                                            testing_utils.sharing_of(["/cpu:0", "/cpu:1"]), 64)
    settings = settings_lib.LoopSettings(train_dir=train_dir, max_steps=max_steps,
                                         log_every_n_steps=1, save_summaries_steps=0,
                                         save_checkpoint_steps=2, save_interval_secs=0)
    return session_loop.run_training(build, testing_utils.cpu_session_config(2), settings,
                                     log=log or (lambda line: None))


def variables_at(train_dir, step, prefix):
    reader = tf.train.load_checkpoint(os.path.join(train_dir, f"model.ckpt-{step}"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith(prefix) and "/" in name and name.count("/") == 1}


class GanStagesTest(unittest.TestCase):

    def test_each_stage_on_two_towers_matches_one_device(self):
        images, labels = testing_utils.random_batch(BATCH)
        expected_variables = {"generator": ["generator/w"],
                              "discriminator": ["discriminator/hidden", "discriminator/out"],
                              "full": ["discriminator/hidden", "discriminator/out",
                                       "generator/w"]}
        for stage in GAN_PLAN.stages:
            with self.subTest(stage=stage.name):
                one = stage_gradients(1, stage, images, labels)
                two = stage_gradients(2, stage, images, labels)
                self.assertEqual(sorted(two), expected_variables[stage.name])
                self.assertEqual(sorted(one), sorted(two))
                for name in one:
                    # Two towers against one device: float32 sums in another order (see
                    # towers_test); a gradient of the wrong stage would differ by its size.
                    np.testing.assert_allclose(two[name], one[name], atol=1e-5, err_msg=name)
                    self.assertGreater(np.abs(one[name]).max(), 0.0, name)

    def test_stages_change_only_their_variables(self):
        train_dir = testing_utils.temp_dir("gan")
        lines = []
        result = run_plan(train_dir, GAN_PLAN, log=lines.append)
        self.assertEqual(result.step, 6)  # the plan's total, below max_steps
        stage_lines = [line for line in lines if "stage '" in line]
        self.assertEqual(len(stage_lines), 3)
        self.assertIn("stage 'discriminator' (2 of 3): steps 2-4", stage_lines[1])

        def changed(before, after):
            old = variables_at(train_dir, before, "")
            new = variables_at(train_dir, after, "")
            return sorted(name for name in old if name.split("/")[0] in
                          ("generator", "discriminator")
                          and not np.array_equal(old[name], new[name]))

        # Checkpoints 2, 4, 6 end stages 1, 2, 3 (stage 1 is checked against a fresh
        # initialization in test_first_stage_changes_only_the_generator).
        self.assertEqual(changed(2, 4), ["discriminator/hidden", "discriminator/out"])
        self.assertEqual(changed(4, 6), ["discriminator/hidden", "discriminator/out",
                                         "generator/w"])
        reader = tf.train.load_checkpoint(os.path.join(train_dir, "model.ckpt-6"))
        names = set(reader.get_variable_to_shape_map())
        self.assertIn("discriminator/out/Adam_discriminator", names)
        self.assertIn("generator/w/Momentum_full", names)
        self.assertNotIn("generator/w/Adam_discriminator", names)

    def test_first_stage_changes_only_the_generator(self):
        train_dir = testing_utils.temp_dir("gan_first")
        plan = plans.TrainingPlan((GAN_PLAN.stages[0],
                                   plans.Stage("rest", scopes=("discriminator",))))
        run_plan(train_dir, plan, max_steps=2)
        initial = {}
        with tf.Graph().as_default():
            gan_model_fn(tf.zeros([1, 8, 8, 3]), None)
            with tf1.Session() as session:
                session.run(tf1.global_variables_initializer())
                for variable in tf1.global_variables():
                    initial[variable.op.name] = session.run(variable)
        after = variables_at(train_dir, 2, "")
        self.assertFalse(np.array_equal(after["generator/w"], initial["generator/w"]))
        for name in ("discriminator/hidden", "discriminator/out", "unused/w"):
            np.testing.assert_array_equal(after[name], initial[name], err_msg=name)

    def test_resume_continues_in_the_right_stage(self):
        train_dir = testing_utils.temp_dir("gan_resume")
        run_plan(train_dir, GAN_PLAN, max_steps=3)
        lines = []
        run_plan(train_dir, GAN_PLAN, log=lines.append)
        stage_lines = [line for line in lines if "stage '" in line]
        self.assertIn("stage 'discriminator' (2 of 3): steps 2-4", stage_lines[0])
        self.assertIn("stage 'full'", stage_lines[1])
        self.assertEqual(len(stage_lines), 2)


class PlanErrorsTest(unittest.TestCase):

    def build(self, plan):
        with tf.Graph().as_default():
            step_graph.build_train_graph(testing_utils.synthetic_input(BATCH),
                                         lambda decay: gan_model_fn,
                                         testing_utils.optimization(plan=plan),
                                         testing_utils.sharing_of(["/cpu:0", "/cpu:1"]), 64)

    def test_tower_name_scope_matches_no_variable(self):
        plan = plans.plan_from_scopes(["tower_1/discriminator"])
        with self.assertRaisesRegex(plans.PlanError, "matches no trainable variable.*drop "
                                    "the 'tower_N/' prefix"):
            self.build(plan)

    def test_unknown_scope(self):
        with self.assertRaisesRegex(plans.PlanError, "scope 'critic' matches no"):
            self.build(plans.plan_from_scopes(["critic"]))

    def test_scope_prefix_must_match_whole_components(self):
        with self.assertRaisesRegex(plans.PlanError, "scope 'gen' matches no"):
            self.build(plans.plan_from_scopes(["gen"]))

    def test_stage_whose_loss_reaches_none_of_its_variables(self):
        plan = plans.TrainingPlan((plans.Stage("idle", scopes=("unused",)),))
        with self.assertRaisesRegex(plans.PlanError, "stage 'idle': its loss .* reaches none "
                                    "of its 1 variables"):
            self.build(plan)

    def test_unknown_loss_term(self):
        plan = plans.TrainingPlan((plans.Stage("x", loss_terms=("critic_loss",)),))
        with self.assertRaisesRegex(cli.UserError, "unknown loss term"):
            self.build(plan)


if __name__ == "__main__":
    absltest.main()
