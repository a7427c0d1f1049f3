"""Learning rate: the warm-up, the climbing-loss warning, and the range test."""

import math
import os
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from common import cli
from inception.config import plans
from inception.config import recipe
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.driver import lr_range
from inception.driver import resolution
from inception.loop import guards
from inception.step import schedules
from tests import testing_utils

tf1 = tf.compat.v1


class WarmupTest(unittest.TestCase):

    def test_the_rate_ramps_up_linearly_then_decays_as_before(self):
        settings = testing_utils.optimization(
            initial_learning_rate=0.4, num_epochs_per_decay=2.0, learning_rate_decay_factor=0.5,
            warmup_steps=4)
        with tf.Graph().as_default():
            step = tf1.placeholder(tf.int64, [])
            rate = schedules.rate_tensor(schedules.run_schedule(settings, 10, None), step)
            with tf1.Session() as session:
                values = [session.run(rate, {step: value}) for value in range(0, 42, 1)]
        # Steps 0-3: 0.4 x (step + 1) / 4; then 0.4, halved every 20 steps (2 epochs of 10).
        # float32 arithmetic of the formula (machine epsilon 1.2e-7) against exact decimals.
        np.testing.assert_allclose(values[:5], [0.1, 0.2, 0.3, 0.4, 0.4], rtol=1e-6)
        np.testing.assert_allclose([values[19], values[20], values[40]], [0.4, 0.2, 0.1],
                                   rtol=1e-6)

    def test_no_warmup_keeps_the_original_schedule(self):
        settings = testing_utils.optimization(initial_learning_rate=0.1)
        with tf.Graph().as_default():
            rate = schedules.rate_tensor(schedules.run_schedule(settings, 10, None),
                                         tf.constant(0, tf.int64))
            self.assertEqual(rate.op.name, "learning_rate")
            with tf1.Session() as session:
                self.assertAlmostEqual(session.run(rate), 0.1, places=7)


def optimizers(run):
    """The optimizer of each stage of a resolved run."""
    return [stage.optimizer for stage in run.settings.optimization.plan.stages]


class DefaultsTest(unittest.TestCase):
    """Which recipe a data set gets when no flag says otherwise (README, "Learning rate")."""

    @classmethod
    def setUpClass(cls):
        cls.data_dir = testing_utils.tiny_demo_data(train=8, validation=4)

    def resolve(self, **overrides):
        values = dict(train_dir=testing_utils.temp_dir("defaults"), data_dir=self.data_dir,
                      dataset="", num_towers=1)
        values.update(overrides)
        return resolution.resolve_run(settings_lib.train_settings(**values), log=lambda line: None)

    def test_a_new_data_set_gets_adam_and_mild_crops(self):
        run = self.resolve()
        self.assertEqual(run.dataset.name, "custom")
        self.assertEqual(optimizers(run), ["adam"])
        self.assertEqual(run.settings.optimization.initial_learning_rate, 0.001)
        self.assertEqual(run.settings.optimization.warmup_steps, 0)
        self.assertEqual(run.dataset.defaults.crop, recipe.MILD_CROP)

    def test_imagenet_keeps_the_original_recipe(self):
        run = self.resolve(dataset="imagenet")
        self.assertEqual(optimizers(run), ["rmsprop"])
        self.assertEqual(run.settings.optimization.initial_learning_rate, 0.1)
        self.assertEqual(run.settings.optimization.warmup_steps, 0)
        self.assertEqual(run.dataset.defaults.crop, recipe.ORIGINAL_CROP)

    def test_flags_win(self):
        run = self.resolve(optimizer="rmsprop", initial_learning_rate=0.01, warmup_steps=20,
                           plan=plans.parse_stages("head:5:InceptionV3/Logits;all"))
        self.assertEqual(optimizers(run), ["rmsprop", "rmsprop"])
        self.assertEqual(run.settings.optimization.initial_learning_rate, 0.01)
        self.assertEqual(run.settings.optimization.warmup_steps, 20)


class LossWatchTest(unittest.TestCase):

    def test_a_climbing_loss_warns_once(self):
        watch = guards.LossWatch(window=5, factor=2.0)
        warnings = [watch.add(step, 2.0) for step in range(1, 11)]
        self.assertEqual(warnings, [None] * 10)
        self.assertEqual((watch.start, watch.start_step), (2.0, 1))
        climbing = [(step, watch.add(step, 6.0)) for step in range(11, 40)]
        warned = [(step, text) for step, text in climbing if text]
        self.assertEqual(len(warned), 1)
        step, text = warned[0]
        # Worked by hand: after ten 2s the bias-corrected average is 2 (weight 1 - 0.8^10);
        # after three 6s it is (0.512 x 1.78525 + 0.488 x 6) / (0.512 x 0.89263 + 0.488) =
        # 4.0656, the first value above twice the start.
        self.assertEqual(step, 13)
        self.assertIn("the loss is climbing: smoothed loss 4.066 at step 13, 2.0x its 2 at "
                      "step 1", text)
        self.assertIn("Lower --initial_learning_rate", text)

    def test_nothing_is_said_before_a_window_of_steps(self):
        watch = guards.LossWatch(window=5)
        self.assertEqual([watch.add(step, loss) for step, loss in
                          enumerate([2.0, 50.0, 50.0, 50.0], start=1)], [None] * 4)
        self.assertIsNotNone(watch.add(5, 50.0))

    def test_a_falling_or_noisy_loss_never_warns(self):
        watch = guards.LossWatch(window=5)
        rng = np.random.RandomState(0)
        for step in range(1, 300):
            loss = 3.0 * math.exp(-step / 100) + rng.uniform(0, 1.0)
            self.assertIsNone(watch.add(step, loss))


class DivergenceTest(unittest.TestCase):
    """A deliberately too-high learning rate on the tiny demo: the warning, or the stop."""

    @classmethod
    def setUpClass(cls):
        cls.data_dir = testing_utils.tiny_demo_data(train=24, validation=4)

    def options(self, **overrides):
        values = dict(train_dir=testing_utils.temp_dir("diverge"), data_dir=self.data_dir,
                      dataset="demo", eval_every_n_steps=0, **testing_utils.tiny_model(),
                      batch_size=4,  # one tower: the warning reads the mean loss
                      num_towers=1, max_steps=30, initial_learning_rate=1.0, warmup_steps=0,
                      learning_rate_scaling="none",
                      seed=1, save_checkpoint_steps=0, on_nan="stop")
        values.update(overrides)
        return settings_lib.train_settings(**values)

    def test_a_too_high_rate_is_reported_before_anything_is_not_finite(self):
        lines = []
        try:
            launch.train(self.options(), log=lines.append)
        except guards.DivergenceError:
            pass  # it may blow up later; the warning must have come first
        warnings = [line for line in lines if "warning: the loss is climbing" in line]
        self.assertEqual(len(warnings), 1, lines[-10:])
        self.assertRegex(warnings[0], r"smoothed loss [\d.]+ at step \d+, [\d.]+x its")

    def test_on_divergence_stop_ends_the_run_with_the_warning(self):
        with self.assertRaisesRegex(guards.DivergenceError,
                                    "the loss is climbing.*--on_divergence=stop"):
            launch.train(self.options(on_divergence="stop"), log=lambda line: None)


class RangeTestTest(unittest.TestCase):

    def test_suggestion_is_a_tenth_of_the_lowest_smoothed_loss(self):
        rates = list(np.geomspace(1e-4, 1.0, 50))
        losses = [2.0 - math.log10(rate / 1e-4) * 0.3 if rate < 0.01 else
                  1.4 + (math.log10(rate) + 2) * 3 for rate in rates]
        lowest, suggested = lr_range.suggest(rates, losses)
        self.assertAlmostEqual(lowest, max(rate for rate in rates if rate < 0.01))
        self.assertAlmostEqual(suggested, lowest / 10)
        with self.assertRaisesRegex(cli.UserError, "not finite at any rate"):
            lr_range.suggest([1.0], [float("nan")])

    def test_the_range_test_runs_plots_suggests_and_writes_no_checkpoint(self):
        train_dir = testing_utils.temp_dir("range_test")
        plot = os.path.join(train_dir, "learning_rate_range.png")
        lines = []
        result = launch.find_learning_rate(
            settings_lib.train_settings(train_dir=train_dir,
                                        data_dir=testing_utils.tiny_demo_data(train=24,
                                                                              validation=4),
                                        dataset="demo", eval_every_n_steps=0, image_size=75,
                                        depth_multiplier=0.1,
                                        batch_size=4, num_towers=1, seed=1),
            lr_range.RangeTest(min_rate=1e-4, max_rate=100.0, steps=40), plot,
            log=lines.append)
        self.assertGreater(len(result.rates), 5)
        self.assertEqual(result.rates[0], 1e-4)
        # The lowest point of the curve the plot shows, found here with NumPy.
        lowest = result.rates[int(np.nanargmin(result.smoothed_losses))]
        self.assertEqual(result.lowest_rate, lowest)
        self.assertAlmostEqual(result.suggested_rate, lowest / 10)
        with open(plot, "rb") as handle:
            self.assertEqual(handle.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertEqual(sorted(os.listdir(train_dir)), ["learning_rate_range.png"])


if __name__ == "__main__":
    absltest.main()
