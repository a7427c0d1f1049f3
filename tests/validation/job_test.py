"""Evaluation: metrics against a hand computation, the checkpoint watch, bad input."""

import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.driver import launch
from inception.inputs import datasets
from inception.inputs import pipeline
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.validation import job
from inception.validation import scoring
from tests import testing_utils

tf1 = tf.compat.v1
NUM_CLASSES = 6  # 5 demo labels + background
IMAGE_SIZE = 16
DATA_DIR = None


def setUpModule():
    global DATA_DIR  # pylint: disable=global-statement
    DATA_DIR = testing_utils.tiny_demo_data(train=10, validation=7)


def stored_settings(data_dir):
    """The stored part of a training run's settings: a tiny model on the demo data."""
    return settings_lib.TrainSettings(model=settings_lib.ModelSettings(NUM_CLASSES, 107, 0.1,
                                                                       "demo"),
                                      data=settings_lib.DataSettings(data_dir=data_dir))


def mean_feature_logits(images, settings):
    """A tiny model with known logits: logits[c] = mean(image) * w[c] + b[c]."""
    w = tf1.get_variable("tiny/w", [settings.num_classes])
    b = tf1.get_variable("tiny/b", [settings.num_classes])
    feature = tf.reduce_mean(images, axis=[1, 2, 3])
    return feature[:, tf.newaxis] * w + b


def write_tiny_checkpoint(directory, raw, averaged, step):
    """A checkpoint with raw values and different moving averages of tiny/w and tiny/b."""
    with tf.Graph().as_default():
        variables = {name: tf1.get_variable(f"tiny/{name}", initializer=raw[name])
                     for name in ("w", "b")}
        shadows = {f"tiny/{name}/ExponentialMovingAverage": tf1.get_variable(
            f"shadow_{name}", initializer=averaged[name]) for name in ("w", "b")}
        global_step = tf1.train.get_or_create_global_step()
        saver = tf1.train.Saver({**{v.op.name: v for v in variables.values()}, **shadows,
                                 "global_step": global_step})
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            session.run(global_step.assign(step))
            return saver.save(session, os.path.join(directory, "model.ckpt"), global_step=step,
                              write_meta_graph=False)


def eval_features_and_labels(shards):
    """Image means and labels of the evaluation pipeline (one pass)."""
    with tf.Graph().as_default():
        batch = pipeline.build_eval_input(shards, 100, IMAGE_SIZE, NUM_CLASSES)
        with tf1.Session() as session:
            session.run([tf1.local_variables_initializer(), batch.initializer])
            images, labels = session.run([batch.images, batch.labels])
    return images.mean(axis=(1, 2, 3)), labels


def hand_scores(logits, labels):
    """precision@1, recall@5 and mean cross-entropy computed with NumPy."""
    top1 = np.mean(np.argmax(logits, axis=1) == labels)
    ranks = np.array([np.sum(row > row[label]) for row, label in zip(logits, labels)])
    top5 = np.mean(ranks < 5)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -np.mean(log_softmax[np.arange(len(labels)), labels])
    return top1, top5, loss


def uniform_checkpoint_and_graph(name, step, max_examples=0):
    """A tiny checkpoint (w = 1, b = 0) in a new directory and the evaluation graph of the tiny
    model over the demo's validation shards, batches of 4."""
    values = {"w": np.ones(NUM_CLASSES, np.float32), "b": np.zeros(NUM_CLASSES, np.float32)}
    path = write_tiny_checkpoint(testing_utils.temp_dir(name), values, values, step=step)
    shards = datasets.resolve_dataset("demo", DATA_DIR).shards("validation")
    settings = settings_lib.ModelSettings(NUM_CLASSES, IMAGE_SIZE, 1.0, "demo")
    return path, scoring.build_eval_graph(shards, settings, batch_size=4,
                                          max_examples=max_examples,
                                          logits_fn=mean_feature_logits)


class MetricsTest(unittest.TestCase):

    def test_scores_match_a_hand_computation_with_a_partial_last_batch(self):
        directory = testing_utils.temp_dir("metrics")
        rng = np.random.RandomState(3)
        raw = {"w": rng.normal(size=NUM_CLASSES).astype(np.float32),
               "b": rng.normal(size=NUM_CLASSES).astype(np.float32)}
        averaged = {"w": rng.normal(scale=4.0, size=NUM_CLASSES).astype(np.float32),
                    "b": rng.normal(size=NUM_CLASSES).astype(np.float32)}
        path = write_tiny_checkpoint(directory, raw, averaged, step=42)
        shards = datasets.resolve_dataset("demo", DATA_DIR).shards("validation")
        settings = settings_lib.ModelSettings(NUM_CLASSES, IMAGE_SIZE, 1.0, "demo")
        graph = scoring.build_eval_graph(shards, settings, batch_size=3,
                                         logits_fn=mean_feature_logits)
        result = scoring.evaluate_checkpoint(graph, path, show_progress=False)

        features, labels = eval_features_and_labels(shards)
        self.assertEqual(len(labels), 7)
        logits = features[:, None] * averaged["w"] + averaged["b"]
        top1, top5, loss = hand_scores(logits, labels)
        self.assertEqual(result.step, 42)
        self.assertEqual(result.num_examples, 7)  # batches of 3, 3 and 1
        self.assertAlmostEqual(result.precision_at_1, top1, places=6)
        self.assertAlmostEqual(result.recall_at_5, top5, places=6)
        # Counts are exact; the loss is TensorFlow's float32 cross-entropy of 7 examples
        # against NumPy's float64: float32 rounding (7 digits) of a loss of order 1.
        self.assertAlmostEqual(result.loss, loss, places=4)
        raw_logits = features[:, None] * raw["w"] + raw["b"]
        self.assertNotAlmostEqual(hand_scores(raw_logits, labels)[2], result.loss, places=3)

    def test_num_examples_limits_the_count(self):
        path, graph = uniform_checkpoint_and_graph("limit", step=1, max_examples=5)
        result = scoring.evaluate_checkpoint(graph, path, show_progress=False)
        self.assertEqual(result.num_examples, 5)

    def test_result_line_format(self):
        result = scoring.EvalResult(step=3, precision_at_1=0.5, recall_at_5=0.75, loss=1.0,
                                    num_examples=8)
        self.assertEqual(result.line(), "precision @ 1 = 0.5000 recall @ 5 = 0.7500 [8 examples]")


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
            RunDirectory(directory).write_settings(stored_settings(DATA_DIR))

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
        path, graph = uniform_checkpoint_and_graph("deleted_while_read", step=5)
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
        RunDirectory(directory).write_settings(stored_settings(DATA_DIR))
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
            started = time.time()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
            self.assertLess(time.time() - started, 10)
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
            train_dir=cls.train_dir, data_dir=DATA_DIR, dataset="demo", max_steps=2,
            image_size=107, depth_multiplier=0.1, batch_size=4, num_towers=2),
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
        self.assertEqual([step for step, _ in scalars["eval/precision_at_1"]], [2])
        self.assertAlmostEqual(scalars["eval/precision_at_1"][0][1], results[0].precision_at_1,
                               places=5)

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
        RunDirectory(empty).write_settings(stored_settings(DATA_DIR))
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
