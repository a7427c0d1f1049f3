"""The evaluation job: the checkpoint watch, settings from a training run, bad input
(scores of one checkpoint: scoring_test)."""

import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.driver import launch
from inception.inputs import datasets
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.validation import job
from inception.validation import scoring
from tests import testing_utils
from tests import tiny_eval

tf1 = tf.compat.v1
DATA = testing_utils.DemoData(train=10, validation=7)


def stored_settings(data_dir):
    """The stored part of a training run's settings: a tiny model on the demo data."""
    return settings_lib.TrainSettings(
        model=settings_lib.ModelSettings(tiny_eval.TINY_EVAL.num_classes, 107, 0.1, "demo"),
        data=settings_lib.DataSettings(data_dir=data_dir))


class WatchTest(unittest.TestCase):

    def test_each_new_checkpoint_is_evaluated_once_in_order(self):
        directory = testing_utils.temp_dir("watch")
        appear = iter([[10], [], [20, 30], [], [40]])  # what "training" saves per wait
        written = []

        def save(steps):
            for step in steps:
                prefix = os.path.join(directory, f"model.ckpt-{step}")
                open(prefix + ".index", "w").close()
                written.append(prefix)
            if written:
                tf1.train.update_checkpoint_state(directory, written[-1], written[-5:])

        evaluated = []

        class Stop:
            requested = False

        stop = Stop()

        def fake_sleep(seconds):
            time.sleep(seconds)  # one call per wait: the whole (short) interval
            try:
                save(next(appear))
            except StopIteration:
                stop.requested = True

        count = job.watch_checkpoints(directory, evaluated.append, interval_secs=0.01,
                                      stop=stop, log=lambda line: None, sleep=fake_sleep)
        self.assertEqual([checkpoint_io.step_of(p) for p in evaluated], [10, 20, 30, 40])
        self.assertEqual(count, 4)

    def test_timeout_ends_the_watch(self):
        directory = testing_utils.temp_dir("watch_timeout")
        lines = []
        count = job.watch_checkpoints(directory, lambda path: None, interval_secs=0.01,
                                      timeout_secs=0.05, log=lines.append)
        self.assertEqual(count, 0)
        self.assertTrue(any("no new checkpoint" in line for line in lines))

    def test_a_checkpoint_that_fails_to_restore_is_skipped_and_the_watch_goes_on(self):
        directory = testing_utils.temp_dir("watch_damaged")
        prefixes = [os.path.join(directory, f"model.ckpt-{step}") for step in (1, 2)]
        for prefix in prefixes:
            open(prefix + ".index", "w").close()
        tf1.train.update_checkpoint_state(directory, prefixes[1], prefixes)
        evaluated, lines = [], []

        def evaluate(path):
            if path == prefixes[0]:
                raise checkpoint_io.CheckpointError(f"checkpoint {path} cannot be restored")
            evaluated.append(path)

        count = job.watch_checkpoints(directory, evaluate, interval_secs=0.01,
                                      timeout_secs=0.05, log=lines.append)
        self.assertEqual((count, evaluated), (1, [prefixes[1]]))
        self.assertIn(f"skipping {prefixes[0]}: checkpoint {prefixes[0]} cannot be restored",
                      lines)

    def test_checkpoint_deleted_before_evaluation_is_skipped(self):
        directory = testing_utils.temp_dir("watch_deleted")
        prefixes = [os.path.join(directory, f"model.ckpt-{step}") for step in (1, 2)]
        open(prefixes[1] + ".index", "w").close()
        tf1.train.update_checkpoint_state(directory, prefixes[1], prefixes)
        evaluated = []
        job.watch_checkpoints(directory, evaluated.append, interval_secs=0.01,
                              timeout_secs=0.05, log=lambda line: None)
        self.assertEqual(evaluated, [prefixes[1]])

    def test_the_watch_waits_for_training_to_write_its_settings(self):
        # The usual pattern: training and eval started together; eval must not quit at once.
        directory = testing_utils.temp_dir("watch_settings")
        watching = settings_lib.EvalSettings(checkpoint_dir=directory, eval_interval_secs=0.01)
        lines = []

        class Stop:
            requested = False

        def training_starts(seconds):
            time.sleep(seconds)
            RunDirectory(directory).write_settings(stored_settings(DATA.path))

        self.assertTrue(job.wait_for_settings(watching, Stop(), lines.append,
                                              sleep=training_starts))
        self.assertEqual(len(lines), 1)
        self.assertIn(f"waiting for training to write {directory}/model_settings.json", lines[0])
        with self.assertRaisesRegex(checkpoint_io.CheckpointError,
                                    "has no model_settings.json after 0.05 s"):
            job.wait_for_settings(settings_lib.EvalSettings(
                checkpoint_dir=testing_utils.temp_dir("never"), eval_interval_secs=0.01,
                timeout_secs=0.05), Stop(), lambda line: None)

    def test_a_checkpoint_deleted_while_it_is_read_is_named_so(self):
        path, graph = tiny_eval.uniform_checkpoint_and_graph(DATA.path,
                                                                 "deleted_while_read", step=5)
        directory = os.path.dirname(path)
        for name in os.listdir(directory):  # training's --keep_checkpoints deleted it
            os.remove(os.path.join(directory, name))
        with self.assertRaisesRegex(checkpoint_io.CheckpointError,
                                    f"^checkpoint {path} was deleted while it was read "
                                    r"\(training keeps only its newest --keep_checkpoints\)"):
            scoring.evaluate_checkpoint(graph, path, show_progress=False)


class WatchSignalTest(unittest.TestCase):

    def test_sigterm_stops_the_watch_promptly_and_cleanly(self):
        directory = testing_utils.temp_dir("watch_signal")
        RunDirectory(directory).write_settings(stored_settings(DATA.path))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        process = subprocess.Popen(
            [sys.executable, "-m", "inception.eval", f"--checkpoint_dir={directory}",
             "--eval_interval_secs=600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env)
        try:
            deadline = time.time() + 120
            line = ""
            while "waiting for a new checkpoint" not in line and time.time() < deadline:
                line = process.stdout.readline()
            self.assertIn("waiting for a new checkpoint", line)
            process.send_signal(signal.SIGTERM)
            # It waits 600 s for a checkpoint; ending within 120 s (a generous bound for a busy
            # 2-core machine) means the signal ended the wait.
            process.wait(timeout=120)
            self.assertEqual(process.returncode, 0, process.stderr.read()[-2000:])
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
            process.stdout.close()
            process.stderr.close()


class EvaluationJobTest(unittest.TestCase):
    """The job on a real (tiny) training run: settings come from the checkpoint directory."""

    @classmethod
    def setUpClass(cls):
        cls.train_dir = testing_utils.temp_dir("eval_job")
        launch.train(settings_lib.train_settings(
            train_dir=cls.train_dir, data_dir=DATA.path, dataset="demo", eval_every_n_steps=0,
            max_steps=2,
            **testing_utils.tiny_model(aux_head=True), batch_size=4, num_towers=2),
            log=lambda line: None)

    def test_run_once_uses_stored_settings_and_writes_summaries(self):
        lines = []
        results = job.run_evaluation(
            settings_lib.EvalSettings(checkpoint_dir=self.train_dir, run_once=True, batch_size=3),
            log=lines.append)
        self.assertEqual(len(results), 1)
        self.assertEqual(results[0].step, 2)
        self.assertEqual(results[0].num_examples, 7)
        self.assertTrue(any("precision @ 1 = " in line and "[7 examples]" in line
                            for line in lines))
        scalars = testing_utils.read_scalars(os.path.join(self.train_dir, "eval_validation"))
        self.assertEqual([step for step, _ in scalars["metrics/precision_at_1"]], [2])
        # A float32 event value of the float64 ratio: it rounds by at most 2^-24 of 1.
        self.assertAlmostEqual(scalars["metrics/precision_at_1"][0][1], results[0].precision_at_1,
                               delta=1e-7)

    def test_settings_that_do_not_match_the_checkpoint(self):
        with self.assertRaisesRegex(checkpoint_io.CheckpointError, "has shape .* in this model"):
            job.run_evaluation(settings_lib.EvalSettings(
                checkpoint_dir=self.train_dir, run_once=True, depth_multiplier=0.2),
                log=lambda line: None)

    def test_subset_without_shards(self):
        with self.assertRaisesRegex(datasets.DataError, "no 'test-\\*-of-\\*' shards"):
            job.run_evaluation(settings_lib.EvalSettings(
                checkpoint_dir=self.train_dir, run_once=True, subset="test"),
                log=lambda line: None)

    def test_no_checkpoint_yet_with_run_once(self):
        empty = testing_utils.temp_dir("no_ckpt")
        RunDirectory(empty).write_settings(stored_settings(DATA.path))
        with self.assertRaisesRegex(checkpoint_io.CheckpointError, "no checkpoint in .* yet"):
            job.run_evaluation(settings_lib.EvalSettings(checkpoint_dir=empty, run_once=True),
                               log=lambda line: None)

    def test_a_damaged_checkpoint_is_named_in_one_line(self):
        damaged = testing_utils.temp_dir("damaged_eval")
        for name in os.listdir(self.train_dir):
            path = os.path.join(self.train_dir, name)
            if os.path.isfile(path):
                shutil.copy(path, damaged)
        tf1.train.update_checkpoint_state(damaged, os.path.join(damaged, "model.ckpt-2"))
        data = os.path.join(damaged, "model.ckpt-2.data-00000-of-00001")
        with open(data, "r+b") as handle:
            handle.truncate(os.path.getsize(data) // 2)
        with self.assertRaises(checkpoint_io.CheckpointError) as caught:
            job.run_evaluation(settings_lib.EvalSettings(checkpoint_dir=damaged,
                                                         run_once=True),
                               log=lambda line: None)
        message = str(caught.exception)
        self.assertIn(f"in {damaged} can be used (the newest, model.ckpt-2, is damaged (",
                      message)
        self.assertEqual(len(message.splitlines()), 1)

    def test_not_a_training_directory(self):
        with self.assertRaisesRegex(checkpoint_io.CheckpointError, "does not exist"):
            job.run_evaluation(settings_lib.EvalSettings(
                checkpoint_dir="/nonexistent/run", run_once=True), log=lambda line: None)


if __name__ == "__main__":
    absltest.main()
