"""The options of issue "what users reach for next": --num_epochs (the run's length in updates,
with accumulation and after a resume), --learning_rate_scaling (the rate the rule gives, in the
graph), --label_smoothing and --clip_gradient_norm (a norm at or below the bound, computed
independently), --class_weight and --balanced_sampling, and their one-line refusals,
--profile_steps' among them (the trace itself: tensorboard_test)."""

import functools
import math
import os
import re
import subprocess
import sys
import unittest
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import recipe
from inception.config import rules
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.driver import resolution
from inception.inputs import datasets
from inception.inputs import label_weights
from inception.inputs import pipeline
from inception.model import network
from inception.parallel import gradients as gradients_lib
from inception.run import tags
from inception.step import clipping
from tests import testing_utils

tf1 = tf.compat.v1
TRAIN_EXAMPLES = 24
# One tower: what these options do does not depend on the towers (their sums across towers:
# towers_test), and each tower costs a run several seconds of graph building.
TINY = dict(**testing_utils.tiny_model(), batch_size=4, num_towers=1,
            log_every_n_steps=1, save_summaries_steps=1, save_checkpoint_steps=100,
            dataset="demo", eval_every_n_steps=0)
DATA = testing_utils.DemoData(train=TRAIN_EXAMPLES, validation=4)
BASE_RATE = 0.004


def tiny_run(train_dir, **overrides):
    """launch.train on the tiny demo shards; (TrainResult, log lines)."""
    values = dict(TINY, train_dir=train_dir, data_dir=DATA.path)
    values.update(overrides)
    lines = []
    result = launch.train(settings_lib.train_settings(**values), log=lines.append)
    return result, lines


@functools.lru_cache(maxsize=None)
def epoch_run(accumulate, batch):
    """One epoch's run at `batch` examples a step and `accumulate` steps an update, run once per
    process and shared by the tests that read it; (TrainResult, log lines, train_dir)."""
    train_dir = testing_utils.temp_dir("one_epoch")
    result, lines = tiny_run(train_dir, num_epochs=1.0, accumulate_steps=accumulate,
                             batch_size=batch)
    return result, lines, train_dir


@functools.lru_cache(maxsize=None)
def first_step(scaling, weighted):
    """train_dir of one step at batch 4, seed 5 and rate 0.004 scaled by `scaling`, with every
    label weighing 2 if `weighted`, and the log lines; run once per process: the learning-rate
    and the class-weight tests read the same two runs (a step's cross-entropy comes from the
    weights before its update, so the rate cannot move it)."""
    class_weight = ""
    if weighted:
        with open(os.path.join(DATA.path, "labels.txt"), encoding="utf-8") as handle:
            names = [line.strip() for line in handle if line.strip()]
        class_weight = os.path.join(testing_utils.temp_dir("weights"), "weights.txt")
        with open(class_weight, "w", encoding="utf-8") as handle:
            handle.writelines(f"{name} 2\n" for name in names)
    train_dir = testing_utils.temp_dir("first_step")
    _, lines = tiny_run(train_dir, max_steps=1, seed=5, class_weight=class_weight,
                        initial_learning_rate=BASE_RATE, learning_rate_scaling=scaling,
                        learning_rate_schedule="constant")
    return train_dir, lines


class EpochsTest(unittest.TestCase):

    def test_one_epoch_is_the_updates_that_cover_the_training_split(self):
        # (1, 4), plain batches of 4: test_a_resumed_run_ends_where_the_epochs_say checks it.
        for accumulate, batch in ((2, 4), (1, 10)):
            with self.subTest(accumulate=accumulate, batch=batch):
                result, lines, _ = epoch_run(accumulate, batch)
                expected = math.ceil(TRAIN_EXAMPLES / (batch * accumulate))
                self.assertEqual(result.step, expected)
                self.assertIn(f"1 epochs = {expected} steps ({TRAIN_EXAMPLES} training "
                              f"examples, {batch * accumulate} per update)", lines)

    def test_own_data_without_a_length_takes_the_default_epochs(self):
        def resolved_steps(**length):
            settings = settings_lib.train_settings(**dict(
                TINY, train_dir=testing_utils.temp_dir("own_data_length"), data_dir=DATA.path,
                dataset="", **length))
            return resolution.resolve_run(settings, log=lambda line: None).settings.loop.max_steps
        epochs = recipe.OWN_DATA_DEFAULTS.num_epochs
        self.assertEqual(resolved_steps(), math.ceil(epochs * TRAIN_EXAMPLES / 4))
        self.assertEqual(resolved_steps(max_steps=7), 7)
        self.assertEqual(resolved_steps(num_epochs=2.0), 12)

    def test_a_resumed_run_ends_where_the_epochs_say(self):
        train_dir = testing_utils.temp_dir("epochs_resume")
        first, _ = tiny_run(train_dir, num_epochs=0.5)  # 12 examples: 3 updates of 4
        self.assertEqual(first.step, 3)
        resumed, lines = tiny_run(train_dir, num_epochs=1.0)
        self.assertEqual(resumed.step, 6)
        # One epoch at batch 4 without accumulation is 6 steps: a resume does not change that.
        self.assertIn(f"1 epochs = 6 steps ({TRAIN_EXAMPLES} training examples, 4 per update)",
                      lines)


class LearningRateScalingTest(unittest.TestCase):

    def test_the_rate_is_the_rule_for_the_examples_of_an_update(self):
        base = BASE_RATE
        # The examples of an update count the micro-batches (sqrt), and each rule is applied.
        for scaling, batch, accumulate in (("sqrt", 8, 2), ("none", 4, 1), ("linear", 4, 1)):
            with self.subTest(scaling=scaling, batch=batch, accumulate=accumulate):
                if batch == 4:  # the class-weight test's two runs (first_step)
                    train_dir, lines = first_step(scaling, weighted=scaling == "linear")
                else:
                    train_dir = testing_utils.temp_dir("lr_scaling")
                    _, lines = tiny_run(train_dir, max_steps=1, batch_size=batch,
                                        accumulate_steps=accumulate, initial_learning_rate=base,
                                        learning_rate_scaling=scaling,
                                        learning_rate_schedule="constant")
                ratio = batch * accumulate / recipe.BASE_BATCH_SIZE
                expected = base * {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1}[scaling]
                rate = testing_utils.read_scalars(train_dir)["train/learning_rate"][-1][1]
                # The graph's float32 rate against the rule in float64.
                self.assertAlmostEqual(rate, expected, delta=1e-7 * expected)
                logged = any(f"learning rate {expected:.4g}: " in line for line in lines)
                self.assertEqual(logged, scaling != "none")


class LabelSmoothingTest(unittest.TestCase):

    def test_the_cross_entropy_takes_the_smoothing_and_the_class_weights(self):
        logits = np.array([[2.0, -1.0, 0.5], [0.0, 1.0, 3.0]], np.float32)
        targets = np.array([[1.0, 0.0, 0.0], [0.0, 0.3, 0.7]], np.float32)
        weights = (1.0, 2.0, 0.5)
        with tf.Graph().as_default(), tf1.Session() as session:
            terms = session.run(network.classification_losses(
                tf.constant(logits), None, tf.constant(targets), 0.3, weights))
        smoothed = targets * 0.7 + 0.3 / 3
        log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        per_example = -(smoothed * log_softmax).sum(axis=1)
        example_weights = targets @ np.array(weights)  # a mixed example mixes its weights
        # float32 log-softmax against float64: a few ulps of values near 1.
        self.assertAlmostEqual(float(terms["cross_entropy"]),
                               float((per_example * example_weights).mean()), places=5)


class ClassWeightTest(unittest.TestCase):

    def test_a_balanced_run_logs_its_weights_and_trains(self):
        result, lines = tiny_run(testing_utils.temp_dir("balanced"), max_steps=2,
                                 class_weight="balanced")
        self.assertEqual(result.step, 2)
        self.assertTrue(any(line.startswith("class weights (balanced over 5 classes of the "
                                            "training split): from ") for line in lines), lines)

    def test_class_weights_reach_the_training_loss(self):
        # Every label weighs 2: the first update's cross-entropy (from the same seeded weights
        # on the same batch) is twice the unweighted run's, up to the one float32 rounding by
        # which a threaded forward sum may differ between two runs.
        plain, doubled = (
            testing_utils.read_scalars(train_dir)[tags.tower_loss(0, "cross_entropy")][0][1]
            for train_dir, _ in (first_step("none", weighted=False),
                                 first_step("linear", weighted=True)))
        self.assertAlmostEqual(doubled, 2 * plain, delta=1e-6 * plain)

    def test_a_balanced_sampling_run_logs_its_draws_and_reads_by_them(self):
        built = []
        original = pipeline.build_train_input

        def spy(stream, *args, **kwargs):
            built.append(stream.sampling_weights)
            return original(stream, *args, **kwargs)
        with mock.patch.object(pipeline, "build_train_input", spy):
            result, lines = tiny_run(testing_utils.temp_dir("balanced_sampling"), max_steps=2,
                                     balanced_sampling=True)
        self.assertEqual(result.step, 2)
        self.assertTrue(any(line.startswith("balanced sampling over 5 classes of the training "
                                            "split: each record drawn") for line in lines),
                        lines)
        # The training input reads by the formula's draws (label_weights_test: how it draws).
        shards = sorted(tf.io.gfile.glob(os.path.join(DATA.path, "train-*")))
        counts = label_weights.label_counts(shards, 6)  # 5 labels from 1, 0 the background
        self.assertEqual(built, [label_weights.balanced_weights(counts)])

    def test_the_label_count_also_gives_the_epochs_length_in_one_pass(self):
        settings = settings_lib.train_settings(**dict(
            TINY, train_dir=testing_utils.temp_dir("one_pass"), data_dir=DATA.path,
            num_epochs=1.0, balanced_sampling=True))
        with mock.patch.object(datasets, "count_records",
                               side_effect=AssertionError("the shards were read twice")):
            run = resolution.resolve_run(settings, log=lambda line: None)
        self.assertEqual(run.examples_per_epoch, TRAIN_EXAMPLES)
        self.assertEqual(run.settings.loop.max_steps, math.ceil(TRAIN_EXAMPLES / 4))


class ClippingTest(unittest.TestCase):

    def clip(self, grads, bound, copies=1):
        """The clipped values (one list per copy) and the counter after one update."""
        with tf.Graph().as_default(), tf1.Session() as session:
            variables = [[tf1.get_variable(f"v{copy}_{i}", grad.shape)
                          for i, grad in enumerate(grads)] for copy in range(copies)]
            pairs = [(tf.constant(grad), variable)
                     for copy_vars in variables for grad, variable in zip(grads, copy_vars)]
            averaged = gradients_lib.AveragedGradients(pairs[:len(grads)], [],
                                                every_copy=pairs if copies > 1 else ())
            clipped_updates = clipping.counter_if(bound)
            counter = clipped_updates.counter
            clipped = clipping.clip_gradients(averaged, clipped_updates)
            session.run(tf1.local_variables_initializer())
            values = session.run([grad for grad, _ in clipped.gradients.to_apply])
            session.run(clipped.count)
            count = session.run(counter)
        return [values[i:i + len(grads)] for i in range(0, len(values), len(grads))], count

    def test_the_global_norm_ends_at_or_below_the_bound(self):
        rng = np.random.default_rng(0)
        grads = [rng.normal(size=(3, 4)).astype(np.float32),
                 rng.normal(size=(5,)).astype(np.float32)]
        norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
        for copies in (1, 2):
            clipped, count = self.clip(grads, norm / 4, copies)
            self.assertEqual(count, 1)
            for values in clipped:
                clipped_norm = math.sqrt(sum(float((v.astype(np.float64) ** 2).sum())
                                             for v in values))
                # float32 scaling: the norm lands on the bound to a few ulps.
                self.assertLessEqual(clipped_norm, norm / 4 * (1 + 1e-6))
                for value, grad in zip(values, grads):  # the direction is kept
                    np.testing.assert_allclose(value, grad / 4, rtol=1e-5)
        unclipped, count = self.clip(grads, norm * 2)
        self.assertEqual(count, 0)
        for value, grad in zip(unclipped[0], grads):
            np.testing.assert_array_equal(value, grad)

    def test_a_run_logs_and_counts_its_clipped_updates(self):
        train_dir = testing_utils.temp_dir("clipping_run")
        result, lines = tiny_run(train_dir, max_steps=3, clip_gradient_norm=1e-6)
        self.assertEqual(result.step, 3)
        notes = [line for line in lines if "--clip_gradient_norm clipped" in line]
        self.assertEqual(notes[0], "note: --clip_gradient_norm clipped 1 of the last 1 "
                                   "update(s), 1 in this run (train/clipped_updates in "
                                   "TensorBoard).")
        self.assertEqual(len(notes), 3)
        scalars = testing_utils.read_scalars(train_dir)
        self.assertEqual([value for _, value in scalars["train/clipped_updates"]], [1, 2, 3])


class RefusalsTest(unittest.TestCase):

    def run_train(self, *flags):
        return subprocess.run([sys.executable, "-m", "inception.train",
                               "--train_dir=" + testing_utils.temp_dir("refused"), *flags],
                              capture_output=True, text=True, check=False, timeout=120,
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))

    def test_each_new_flag_is_refused_in_one_line_where_it_cannot_apply(self):
        cases = {("--num_epochs=2", "--max_steps=100"): "both set the run's length; pass one",
                 ("--num_epochs=0",): "must be positive",
                 ("--label_smoothing=1",): "must be in [0, 1)",
                 ("--clip_gradient_norm=-1",): "must be positive, or 0 for no clipping",
                 ("--learning_rate_scaling=cubic",): "learning_rate_scaling",
                 ("--class_weight=/no/weights.txt",): "is neither 'balanced' nor a file",
                 ("--balanced_sampling", "--class_weight=balanced"): "overcorrect",
                 ("--profile_steps=5,2",): "1 <= first <= last",
                 ("--profile_steps=1,2,3",): "takes a first and a last step",
                 ("--profile_steps=ten",): "takes a first and a last step",
                 ("--profile_steps=5,20", "--max_steps=10"): "goes past the run's end at "
                                                             "step 10"}
        for flags, message in cases.items():
            with self.subTest(flags=flags):
                done = self.run_train(*flags)
                self.assertEqual(done.returncode, 2, done.stderr[-2000:])
                errors = done.stderr.strip().splitlines()
                self.assertEqual(len(errors), 1, done.stderr)
                self.assertIn(message, errors[0])


class HelpTest(unittest.TestCase):

    @staticmethod
    def help_of(program, argument="--help"):
        return subprocess.run([sys.executable, "-m", program, argument], capture_output=True,
                              text=True, check=False, timeout=120,
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))

    def test_help_is_for_users_lists_each_flag_once_and_exits_0(self):
        for program in ("inception.train", "inception.eval", "data.build_image_data"):
            with self.subTest(program=program):
                done = self.help_of(program)
                self.assertEqual(done.returncode, 0, done.stderr[-2000:])
                self.assertNotRegex(done.stdout, r"\.py:|runfiles|flag_table")  # no paths
                listed = re.findall(r"^  --(\w+)", done.stdout, re.MULTILINE)
                self.assertGreater(len(listed), 3, done.stdout)
                self.assertEqual(len(listed), len(set(listed)))
                self.assertNotIn("logtostderr", listed)  # absl's own flags stay out
        train = self.help_of("inception.train", "-h")
        self.assertEqual(train.returncode, 0)
        self.assertIn("\n  --model\n      The network to train", train.stdout)
        self.assertIn("\n  --accumulate_steps (default: 1)\n", train.stdout)


class ProfileStepsTest(unittest.TestCase):
    """--profile_steps outside the run: refused once the run's end and start are known."""

    def resolve(self, train_dir, **overrides):
        settings = settings_lib.train_settings(**dict(TINY, train_dir=train_dir,
                                                      data_dir=DATA.path, **overrides))
        return resolution.resolve_run(settings, log=lambda line: None)

    def test_past_the_end_that_epochs_give(self):
        with self.assertRaisesRegex(rules.SettingsError, "goes past the run's end at step 6"):
            self.resolve(testing_utils.temp_dir("profile_end"), num_epochs=1.0,
                         profile_steps=(5, 9))
        run = self.resolve(testing_utils.temp_dir("profile_end"), num_epochs=1.0,
                           profile_steps=(5, 6))
        self.assertEqual(run.settings.loop.profile_steps, (5, 6))

    def test_before_the_step_a_resumed_run_starts_from(self):
        # The epoch test's run of 3 updates of 2 x 4 examples (epoch_run), resumed to step 5.
        _, _, train_dir = epoch_run(2, 4)
        with self.assertRaisesRegex(rules.SettingsError, "resumes from step 3"):
            self.resolve(train_dir, max_steps=5, profile_steps=(3, 4), accumulate_steps=2)
        self.assertEqual(self.resolve(train_dir, max_steps=5, profile_steps=(4, 4),
                                      accumulate_steps=2).settings.loop.profile_steps, (4, 4))


class RulesTest(unittest.TestCase):

    def test_epochs_round_up_to_whole_updates(self):
        self.assertEqual(rules.epochs_to_steps(1, 24, 5), 5)
        self.assertEqual(rules.epochs_to_steps(2.5, 1000, 32), math.ceil(2500 / 32))
        self.assertEqual(rules.epochs_to_steps(0.001, 10, 32), 1)


if __name__ == "__main__":
    absltest.main()
