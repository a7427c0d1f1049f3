"""Validation inside training: the eval job's numbers, training untouched, the best checkpoint
kept and exported, early stopping."""

import json
import os
import re
import shutil
import unittest
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.driver import launch
from inception.inputs import datasets
from inception.run import tags
from inception.run import best as best_lib
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from inception.validation import in_training
from inception.validation import job
from inception.validation import scoring
from tests import testing_utils
from tests import tiny_eval

TINY = dict(**testing_utils.tiny_model(aux_head=True), batch_size=4, num_towers=2, seed=3,
            log_every_n_steps=1, save_summaries_steps=1, save_checkpoint_steps=100,
            dataset="demo", eval_batch_size=4)
DATA = testing_utils.DemoData(train=24, validation=10)


def weights(train_dir):
    """{name: bytes} of every tensor of the newest checkpoint in `train_dir`."""
    reader = tf.train.load_checkpoint(RunDirectory(train_dir).newest())
    return {name: reader.get_tensor(name).tobytes()
            for name in reader.get_variable_to_shape_map()}


def train(name, **overrides):
    """A tiny demo run in a new directory; returns (TrainResult, log lines, train_dir)."""
    train_dir = testing_utils.temp_dir(name)
    values = dict(TINY, train_dir=train_dir, data_dir=DATA.path, max_steps=4)
    values.update(overrides)
    lines = []
    result = launch.train(settings_lib.train_settings(**values), log=lines.append)
    return result, lines, train_dir


class ValidationInTrainingTest(unittest.TestCase):

    def test_a_target_accuracy_stops_the_run_and_resuming_keeps_the_record(self):
        result, lines, train_dir = train("target", eval_every_n_steps=2, target_accuracy=0.01,
                                         max_steps=6)
        self.assertEqual((result.step, result.stopped_early), (2, True))
        reached = [line for line in lines if line.startswith("reached precision@1 0.01 at step 2 "
                                                             "after ")]
        self.assertEqual(len(reached), 1, lines)
        first = best_lib.BestCheckpoint(train_dir).read()
        self.assertEqual(first.step, 2)

        # Resumed without the target, to the next validation.
        launch.train(settings_lib.train_settings(
            **dict(TINY, train_dir=train_dir, data_dir=DATA.path, max_steps=4,
                   eval_every_n_steps=2)), log=lambda line: None)
        record = best_lib.BestCheckpoint(train_dir).read()
        if record.step == 2:  # step 4 was no better: counted against the old record
            self.assertEqual(record.evals_without_improvement, 1)
            self.assertEqual(record.value, first.value)
        else:
            self.assertEqual(record.step, 4)
            self.assertGreater(record.value, first.value)

    def test_same_scores_as_the_eval_job_the_same_training_and_the_best_kept(self):
        """One validated run checked three ways: its scores against the eval job's, its weights
        against a run without validation, and its best checkpoint (by loss) kept apart from
        --keep_checkpoints=1's rotation and exported once per new best."""
        export_dir = testing_utils.temp_dir("best_exports")
        result, lines, train_dir = train("validated", max_steps=6, eval_every_n_steps=2,
                                         keep_checkpoints=1, best_metric="loss",
                                         export_best_dir=export_dir)
        self.assertEqual(result.step, 6)
        self.check_scores(result, train_dir)
        self.check_training(train_dir)
        self.check_best(lines, train_dir, export_dir)

    def check_scores(self, result, train_dir):
        """Validations at steps 2, 4 and 6 score as the eval job does on the newest."""
        validated = result.last_validation
        self.assertEqual(validated.step, 6)
        self.assertEqual(validated.num_examples, 10)
        evaluated, = job.run_evaluation(settings_lib.EvalSettings(
            checkpoint_dir=train_dir, run_once=True, batch_size=4,
            eval_dir=testing_utils.temp_dir("eval_job")), log=lambda line: None)
        self.assertEqual(evaluated.step, 6)
        # The same graph on the same examples and weights: counts agree exactly; the loss sum
        # only up to float32 rounding of differently threaded sessions (a few ulps).
        self.assertEqual(evaluated.precision_at_1, validated.precision_at_1)
        self.assertEqual(evaluated.recall_at_5, validated.recall_at_5)
        np.testing.assert_array_equal(evaluated.confusion, validated.confusion)
        self.assertAlmostEqual(evaluated.loss, validated.loss, delta=1e-5 * validated.loss)

        scalars = testing_utils.read_scalars(os.path.join(train_dir, "eval_validation"))
        self.assertEqual([step for step, _ in scalars["metrics/precision_at_1"]], [2, 4, 6])
        for step in (2, 4, 6):
            self.assertTrue(os.path.exists(os.path.join(train_dir, "eval_validation",
                                                        f"per_class-{step}.csv")))

    def check_training(self, train_dir):
        """The validated run trained as a run without validation does."""
        _, _, plain_dir = train("not_validated", max_steps=6, eval_every_n_steps=0)
        self.assertFalse(os.path.exists(os.path.join(plain_dir, "eval_validation")))
        with_validation = testing_utils.read_scalars(train_dir)["loss/mean_loss"]
        without = testing_utils.read_scalars(plain_dir)["loss/mean_loss"]
        self.assertEqual([step for step, _ in with_validation], [step for step, _ in without])
        # The same training: the weights bit for bit. The logged losses only up to one float32
        # rounding: two seeded runs without validation log 2.2401938 and 2.2401941 at step 2 on
        # a Xeon with AMX while writing identical checkpoints (the forward loss's threaded sum
        # adds in the order its threads end; no gradient reads that sum).
        self.assertEqual(weights(train_dir), weights(plain_dir))
        np.testing.assert_allclose([loss for _, loss in with_validation],
                                   [loss for _, loss in without], rtol=1e-6)

    def check_best(self, lines, train_dir, export_dir):
        """The best checkpoint survives the rotation and is exported once per new best."""
        losses = {int(m.group(1)): float(m.group(2)) for m in map(re.compile(
            r"validation at step (\d+) .*loss = (\d+\.\d+)").match, lines) if m}
        self.assertEqual(sorted(losses), [2, 4, 6])
        new_bests = [int(m.group(1)) for m in map(re.compile(
            r"  new best loss = \d+\.\d+: kept as .*model\.ckpt-(\d+)$").match, lines) if m]
        record = best_lib.BestCheckpoint(train_dir).read()
        self.assertEqual(record.step, min(losses, key=losses.get))
        self.assertEqual(new_bests[-1], record.step)
        self.assertEqual(sorted(os.listdir(export_dir)), sorted(str(s) for s in new_bests))

        self.assertEqual([os.path.basename(p) for p in RunDirectory(train_dir).candidates()],
                         ["model.ckpt-6"])
        best = RunDirectory(best_lib.best_dir(train_dir))
        self.assertEqual(best.require_checkpoint(), best.prefix(record.step))
        self.assertEqual(best.read_settings(), RunDirectory(train_dir).read_settings())
        rescored, = job.run_evaluation(settings_lib.EvalSettings(
            checkpoint_dir=best.path, run_once=True, batch_size=4,
            eval_dir=testing_utils.temp_dir("eval_best")), log=lambda line: None)
        # As above: the same examples and weights, the loss summed in float32 by other threads.
        self.assertAlmostEqual(rescored.loss, record.value, delta=1e-5 * record.value)

    def test_without_validation_shards_it_stops_before_training_saying_what_to_do(self):
        data_dir = testing_utils.temp_dir("train_shards_only")
        for name in os.listdir(DATA.path):
            if not name.startswith("validation-"):
                shutil.copy(os.path.join(DATA.path, name), data_dir)
        train_dir = testing_utils.temp_dir("no_validation")
        with self.assertRaisesRegex(datasets.DataError, r"--eval_every_n_steps=2\): no "
                                    r"'validation-\*-of-\*' shards .* Or pass "
                                    r"--eval_every_n_steps=0"):
            launch.train(settings_lib.train_settings(**dict(
                TINY, train_dir=train_dir, data_dir=data_dir, max_steps=2,
                eval_every_n_steps=2)), log=lambda line: None)
        self.assertEqual(RunDirectory(train_dir).candidates(), [])


def fake_result(step, precision):
    return scoring.EvalResult(step=step, precision_at_1=precision, recall_at_5=1.0, loss=1.0,
                              num_examples=10, confusion=np.eye(3, dtype=np.int64) * 3)


class BestAndEarlyStoppingTest(unittest.TestCase):
    """The record and the stopping rule, on real checkpoint files and given scores."""

    def setUp(self):
        self.train_dir = testing_utils.temp_dir("best_rule")
        with open(os.path.join(self.train_dir, SETTINGS_FILE), "w", encoding="utf-8") as handle:
            json.dump({"dataset": "demo", "data_dir": "", "image_size": 75,
                       "depth_multiplier": 0.1, "num_classes": 3}, handle)
        self.lines = []

    def validation(self, patience, target=0.0):
        settings = settings_lib.ValidationSettings(eval_every_n_steps=2,
                                                   stop_after_evals_without_improvement=patience,
                                                   target_accuracy=target)
        return in_training.TrainingValidation(settings, None, None, self.train_dir, 10,
                                              ("a", "b"), self.lines.append)

    def checkpoint(self, step):
        values = {"w": np.full(3, step, np.float32), "b": np.zeros(3, np.float32)}
        return tiny_eval.write_tiny_checkpoint(self.train_dir, values, values, step)

    def run_scores(self, validation, scores):
        stops = []
        for index, precision in enumerate(scores):
            step = 2 * (index + 1)
            with mock.patch.object(scoring, "evaluate_checkpoint",
                                   return_value=fake_result(step, precision)):
                stops.append(validation.validate(self.checkpoint(step), wall_secs=50.0 * step))
        return stops

    def test_a_run_closed_before_any_validation_names_no_best_checkpoint(self):
        self.validation(0).close()
        self.assertEqual(len(self.lines), 1, self.lines)
        self.assertIn("; no best checkpoint yet (the first validation keeps one in ", self.lines[0])
        self.assertNotIn("best checkpoint: ", self.lines[0])

    def test_stops_at_the_first_validation_reaching_the_target_with_its_time(self):
        validation = self.validation(0, target=0.6)
        self.assertEqual(self.run_scores(validation, [0.5, 0.6]), [False, True])
        validation.close()
        self.assertIn("reached precision@1 0.6 at step 4 after 3 min 20 s (wall time since the "
                      "start, resumes included); training stops here.", self.lines)
        self.assertEqual(best_lib.BestCheckpoint(self.train_dir).read().step, 4)
        scalars = testing_utils.read_scalars(job.default_eval_dir(self.train_dir, "validation"))
        self.assertEqual(scalars[tags.TIME_TO_ACCURACY], [(4, 200.0)])
        self.assertFalse(any(line.startswith("did not reach") for line in self.lines))

    def test_a_run_that_misses_the_target_says_so(self):
        validation = self.validation(0, target=0.9)
        self.assertEqual(self.run_scores(validation, [0.5, 0.7]), [False, False])
        validation.close()
        self.assertIn("did not reach precision@1 0.9: the last validation (step 4) had 0.7000.",
                      self.lines)

    def test_stops_after_patience_evaluations_without_a_strictly_better_one(self):
        stops = self.run_scores(self.validation(2), [0.5, 0.6, 0.6, 0.55])
        self.assertEqual(stops, [False, False, False, True])
        record = best_lib.BestCheckpoint(self.train_dir).read()
        self.assertEqual((record.step, record.value, record.evals_without_improvement),
                         (4, 0.6, 2))
        best = RunDirectory(best_lib.best_dir(self.train_dir))
        self.assertEqual(best.listed(), [best.prefix(4)])
        self.assertEqual(sorted(os.listdir(best.path)),
                         ["best.json", "checkpoint", "model.ckpt-4.data-00000-of-00001",
                          "model.ckpt-4.index", SETTINGS_FILE])
        reader = tf.train.load_checkpoint(best.prefix(4))
        np.testing.assert_array_equal(reader.get_tensor("tiny/w"), np.full(3, 4, np.float32))
        self.assertTrue(any(line.startswith("early stopping: 2 validation(s) without a better "
                                            "precision_at_1 than 0.6000 (step 4")
                            for line in self.lines))

    def test_a_new_best_resets_the_count_and_off_never_stops(self):
        self.assertEqual(self.run_scores(self.validation(2), [0.5, 0.4, 0.7, 0.6]),
                         [False, False, False, False])
        self.assertEqual(best_lib.BestCheckpoint(self.train_dir).read().step, 6)
        self.assertEqual(self.run_scores(self.validation(0), [0.1] * 3), [False] * 3)

    def test_another_metric_starts_a_new_record(self):
        self.run_scores(self.validation(0), [0.9])
        lines_before = len(self.lines)
        settings = settings_lib.ValidationSettings(eval_every_n_steps=2, best_metric="loss")
        validation = in_training.TrainingValidation(settings, None, None, self.train_dir, 10,
                                                    (), self.lines.append)
        self.assertIsNone(validation.record)
        self.assertIn("holds the best checkpoint by precision_at_1", self.lines[lines_before])



class KeepingFailsTest(unittest.TestCase):
    """A best that cannot be kept is one warning line, and training goes on."""

    def validation_over(self, train_dir, lines):
        """A TrainingValidation of `train_dir` with only what keeping a best uses."""
        validation = in_training.TrainingValidation.__new__(in_training.TrainingValidation)
        validation.validation = settings_lib.ValidationSettings(eval_every_n_steps=2)
        validation.best = best_lib.BestCheckpoint(train_dir)
        validation.record, validation.log = None, lines.append
        return validation

    def test_a_failed_keep_warns_and_keeps_the_record_on_disk(self):
        train_dir = testing_utils.temp_dir("keep_fails")
        with open(os.path.join(train_dir, SETTINGS_FILE), "w", encoding="utf-8") as handle:
            handle.write("{}\n")
        values = {"w": [1.0], "b": [0.5]}
        first = tiny_eval.write_tiny_checkpoint(train_dir, values, values, 2)
        second = tiny_eval.write_tiny_checkpoint(train_dir, values, values, 4)
        lines = []
        validation = self.validation_over(train_dir, lines)
        validation._keep_if_best(first, mock.Mock(precision_at_1=0.5))  # pylint: disable=protected-access
        full = best_lib.BestNotKept("could not keep it (No space left on device); the "
                                    "previous best is still there.")
        with mock.patch.object(best_lib.BestCheckpoint, "keep", side_effect=full):
            validation._keep_if_best(second, mock.Mock(precision_at_1=0.9))  # pylint: disable=protected-access
        self.assertEqual([line for line in lines if line.startswith("warning:")],
                         [f"warning: {full} Training goes on."])
        self.assertEqual((validation.record.step, validation.record.value), (2, 0.5))

if __name__ == "__main__":
    absltest.main()
