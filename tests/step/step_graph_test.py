"""The training graph builder: the batch-norm decay's warm-up, one train op per stage of a plan,
moving averages of every weight, what a plan's stages cannot select, and gradient
accumulation against towers (learning-rate schedules: schedules_test)."""

import io
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image
from tensorflow.core.framework import summary_pb2

from inception.config import plans
from inception.config import recipe
from inception.parallel import towers
from inception.run import tags
from inception.step import averages
from inception.step import micro_batches
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
CONV = ["net/conv/bias", "net/conv/kernel"]
HEAD = ["net/logits/weights"]
TWO_STAGES = plans.TrainingPlan((
    plans.Stage("conv", steps=1, scopes=("net/conv",), optimizer="sgd", learning_rate=0.5),
    plans.Stage("head", scopes=("net/logits",), optimizer="sgd", learning_rate=0.5)))


def held_input_ops(graph):
    """The identity ops each micro-batched tower's inputs pass through (micro_batches.py)."""
    return [op for op in graph.get_operations()
            if op.name.split("/")[-1].startswith(micro_batches.HELD_INPUT_NAME)]


def build(plan=None, unused_variable=False, seen_decays=None):
    """The small conv model's training graph on two virtual CPU towers (default graph); each
    batch-norm decay tensor the graph hands the model is appended to `seen_decays`."""
    def make_model_fn(decay):
        if seen_decays is not None:
            seen_decays.append(decay)
        return testing_utils.small_conv_model_fn(unused_variable=unused_variable)
    return testing_utils.build_small_train_graph(plan, make_model_fn)


def build_small_graph(make_model_fn):
    """testing_utils.build_small_train_graph with `make_model_fn` and one stage."""
    return testing_utils.build_small_train_graph(None, make_model_fn)


def session_for(built):
    """A session on the towers' two virtual CPUs, variables and input initialized."""
    session = tf1.Session(config=testing_utils.cpu_session_config(2))
    session.run([tf1.global_variables_initializer(), built.input_initializer])
    return session


def weights_and_averages(session, built):
    """({name: value} of the trainable variables, {name: value} of their moving averages)."""
    variables = {v.op.name: v for v in tf1.trainable_variables()}
    averages = {name: built.moving_average.average(v) for name, v in variables.items()}
    return session.run(variables), session.run(averages)


def changed(before, after):
    return sorted(name for name in before if not np.array_equal(before[name], after[name]))


class WarmedUpDecayTest(unittest.TestCase):

    def test_values_follow_the_warm_up_formula_up_to_the_maximum(self):
        steps = [0, 1, 9, 90, 2990, 10**6]
        with tf.Graph().as_default():
            step = tf1.placeholder(tf.int64, [])
            decay = averages.warmed_up_decay(recipe.BATCH_NORM_DECAY, step)
            with tf1.Session() as session:
                values = [session.run(decay, {step: s}) for s in steps]
        expected = [min(recipe.BATCH_NORM_DECAY, (1.0 + s) / (10.0 + s)) for s in steps]
        # One float32 division of integers that float32 holds exactly (and the float32 max):
        # a rounding of at most half an ulp, 6e-8 relative.
        np.testing.assert_allclose(values, expected, rtol=1e-7)
        self.assertAlmostEqual(values[0], 0.1, places=7)
        self.assertLess(values[4], 0.9971)  # 2991/3000: still warming up
        self.assertEqual(values[5], np.float32(recipe.BATCH_NORM_DECAY))  # capped
        self.assertEqual(decay.op.name, "batch_norm_decay")

    def test_the_model_gets_the_warmed_up_decay_of_the_global_step(self):
        decays = []
        with tf.Graph().as_default():
            built = build(seen_decays=decays)
            self.assertEqual(len(decays), 1)
            with session_for(built) as session:
                self.assertAlmostEqual(session.run(decays[0]), 0.1, places=7)
                session.run(built.global_step.assign(90))
                self.assertAlmostEqual(session.run(decays[0]), 91.0 / 100.0, places=6)


class StagesTest(unittest.TestCase):

    def test_each_stage_trains_and_averages_only_its_variables(self):
        with tf.Graph().as_default():
            built = build(TWO_STAGES)
            self.assertEqual([ops.stage.name for ops in built.stages], ["conv", "head"])
            self.assertEqual([sorted(ops.variables) for ops in built.stages], [CONV, HEAD])
            with session_for(built) as session:
                for index, (ops, expected) in enumerate(zip(built.stages, (CONV, HEAD))):
                    weights, averages = weights_and_averages(session, built)
                    session.run(ops.train_op)
                    new_weights, new_averages = weights_and_averages(session, built)
                    self.assertEqual(changed(weights, new_weights), expected, ops.stage.name)
                    self.assertEqual(changed(averages, new_averages), expected, ops.stage.name)
                    self.assertEqual(session.run(built.global_step), index + 1)

    def test_the_stage_line_says_where_a_resumed_run_goes_on(self):
        with tf.Graph().as_default():
            built = build(TWO_STAGES)
        fresh = step_graph.describe_stage(built, 1, 10, step=1)
        resumed = step_graph.describe_stage(built, 1, 10, step=4)
        self.assertIn("stage 'head' (2 of 2): steps 1-10, training ", fresh)
        self.assertIn("stage 'head' (2 of 2): steps 1-10 (going on from step 4), training ",
                      resumed)

    def test_every_trainable_variable_has_a_moving_average(self):
        with tf.Graph().as_default():
            built = build(plans.plan_from_scopes(["net/logits"]), unused_variable=True)
            trainable = tf1.trainable_variables()
            self.assertEqual(len(trainable), 4)  # conv kernel and bias, logits, unused
            for variable in trainable:
                average = built.moving_average.average(variable)
                self.assertIsNotNone(average, variable.op.name)
                self.assertEqual(average.op.name,
                                 f"{variable.op.name}/ExponentialMovingAverage")
                self.assertNotIn(average, trainable)

    def test_sync_averages_sets_the_averages_to_the_weights(self):
        with tf.Graph().as_default():
            built = build(TWO_STAGES)
            kernel = [v for v in tf1.trainable_variables() if v.op.name == CONV[1]][0]
            sync_kernel = averages.sync_averages_op(built.moving_average, [kernel])
            sync_none = averages.sync_averages_op(built.moving_average, [])
            with session_for(built) as session:
                session.run(built.stages[0].train_op)  # the averages lag behind the update
                weights, moved = weights_and_averages(session, built)
                self.assertEqual(changed(weights, moved), CONV)
                session.run(sync_none)
                self.assertEqual(changed(moved, weights_and_averages(session, built)[1]), [])
                session.run(sync_kernel)
                weights, moved = weights_and_averages(session, built)
                np.testing.assert_array_equal(moved[CONV[1]], weights[CONV[1]])
                self.assertEqual(changed(weights, moved), [CONV[0]])


class SelectionTest(unittest.TestCase):

    def test_a_variable_no_loss_reaches_is_named_as_skipped(self):
        with tf.Graph().as_default():
            built = build(unused_variable=True)
            self.assertEqual(built.skipped_variables, ["net/unused/weights"])
            self.assertEqual(built.stages[0].skipped, ["net/unused/weights"])
            self.assertEqual(sorted(built.stages[0].variables), CONV + HEAD)
        with tf.Graph().as_default():
            self.assertEqual(build().skipped_variables, [])

    def test_a_stage_whose_scopes_match_nothing_is_a_plan_error(self):
        plan = plans.TrainingPlan((TWO_STAGES.stages[0],
                                   plans.Stage("head", scopes=("net/head",))))
        with tf.Graph().as_default():
            with self.assertRaisesRegex(plans.PlanError, "^stage 'head': scope 'net/head' "
                                                         "matches no trainable variable"):
                build(plan)


def one_update(accumulate_steps, devices, batch=8):
    """(mean_loss, tower_losses, {variable: value after one SGD update}, rate after 2 updates,
    examples_per_step) of the small conv model on the first `batch` rows of the synthetic data,
    as `accumulate_steps` micro-batches over `devices`; 16 examples an epoch, decaying by half
    every epoch."""
    optimization = testing_utils.optimization(
        initial_learning_rate=0.5, optimizer="sgd", accumulate_steps=accumulate_steps,
        num_epochs_per_decay=1.0, learning_rate_decay_factor=0.5)
    with tf.Graph().as_default():
        built = step_graph.build_train_graph(
            testing_utils.synthetic_input(batch), lambda decay: testing_utils.small_conv_model_fn(),
            optimization, testing_utils.sharing_of(devices), 16)
        ops = built.stages[0]
        with tf1.Session(config=testing_utils.cpu_session_config(2)) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            _, loss, tower_losses = session.run([ops.train_op, ops.mean_loss, ops.tower_losses])
            weights = session.run({v.op.name: v for v in tf1.trainable_variables()})
            session.run(built.global_step.assign(2))
            rate = session.run(ops.learning_rate)
    return loss, tower_losses, weights, rate, built.examples_per_step


class AccumulationTest(unittest.TestCase):
    """--accumulate_steps=K: K micro-batches per update, as if K times the towers."""

    def test_two_micro_batches_on_one_tower_equal_two_towers(self):
        accumulated = one_update(2, ["/cpu:0"])
        towers = one_update(1, ["/cpu:0", "/cpu:1"])
        # The same ops on the same rows in the same order (two halves, their sum over 2): only
        # the thread pools may order a reduction differently, a few float32 ulps of values of
        # order 1; one half counted twice or not averaged would move them by 1e-2 or more.
        np.testing.assert_allclose(accumulated[0], towers[0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(accumulated[1], towers[1], rtol=0, atol=1e-6)
        self.assertEqual(len(accumulated[1]), 2)
        self.assertEqual(sorted(accumulated[2]), sorted(towers[2]))
        for name, value in accumulated[2].items():
            np.testing.assert_allclose(value, towers[2][name], rtol=0, atol=1e-6, err_msg=name)

    def test_the_update_differs_from_one_micro_batch(self):
        """The check above can fail: one tower on half the rows gives another update."""
        accumulated = one_update(2, ["/cpu:0"])
        half = one_update(1, ["/cpu:0"], batch=4)
        self.assertGreater(max(np.max(np.abs(value - half[2][name]))
                               for name, value in accumulated[2].items()), 1e-4)

    def test_each_micro_batch_waits_for_the_previous_ones_gradients(self):
        optimization = testing_utils.optimization(initial_learning_rate=0.5, optimizer="sgd",
                                                  accumulate_steps=3)
        with tf.Graph().as_default() as graph:
            built = step_graph.build_train_graph(
                testing_utils.synthetic_input(12),
                lambda decay: testing_utils.small_conv_model_fn(), optimization,
                testing_utils.sharing_of(["/cpu:0", "/cpu:1"]), 16)
            norms = [tensor.op for tensor in built.stages[0].tower_gradient_norms.op.inputs]
            copies = held_input_ops(graph)
        self.assertEqual(len(norms), 6)  # 3 micro-batches x 2 towers
        self.assertEqual(len(copies), 12)  # images and labels of each
        for op in copies:
            tower = int(op.name.split("/")[0].split("_")[1])
            micro_batch = tower // 2
            expected = norms[2 * (micro_batch - 1):2 * micro_batch] if micro_batch else []
            self.assertEqual(op.control_inputs, expected, op.name)

    def test_the_schedule_counts_updates(self):
        # 16 examples an epoch, 8 per update (2 micro-batches of 4): the rate halves every 2
        # updates, so at global step 2 it is 0.25 whether the 8 come from towers or micro-batches.
        accumulated = one_update(2, ["/cpu:0"])
        towers = one_update(1, ["/cpu:0", "/cpu:1"])
        self.assertEqual(accumulated[4], 8)
        self.assertAlmostEqual(accumulated[3], 0.25, places=7)
        self.assertAlmostEqual(towers[3], 0.25, places=7)


class InputImagesTest(unittest.TestCase):
    """train/input_images shows the first tower's images as the model trained on them."""

    def shown(self, trained_images=None):
        """The pixels of the input-images summary; the model's images are replaced by
        `trained_images(images)` (as Mixup/CutMix do) when given."""
        def make_model_fn(decay):
            del decay
            inner = testing_utils.small_conv_model_fn()

            def model_fn(images, labels):
                if trained_images is None:
                    return inner(images, labels)
                images = trained_images(images)
                return towers.ModelOutputs(inner(images, labels), images=images)
            return model_fn
        with tf.Graph().as_default():
            built = build_small_graph(make_model_fn)
            with session_for(built) as session:
                summary = summary_pb2.Summary.FromString(session.run(built.stages[0].summary_op))
        images = [value.image for value in summary.value
                  if value.tag.startswith(tags.INPUT_IMAGES)]
        self.assertEqual(len(images), 3)
        return np.stack([np.asarray(Image.open(io.BytesIO(image.encoded_image_string)))
                         for image in images])

    def test_the_summary_shows_the_images_the_towers_trained_on(self):
        white = self.shown(lambda images: tf.ones_like(images))
        self.assertEqual(white.min(), 255)
        plain = self.shown()
        self.assertLess(plain.min(), 200)  # the random inputs themselves


if __name__ == "__main__":
    absltest.main()
