"""Where training's input comes from (config/sources.py): the tf.data service feeding a run
(dispatcher and workers in this process), a lost service ending the trainer (the real entry
point) within a minute in one line with its last checkpoint intact, a lost worker of two not
stopping it, --synthetic_input and the refusals."""

import json
import os
import re
import subprocess
import sys
import time
import unittest

import tensorflow as tf
from absl.testing import absltest

from inception.config import recovery
from inception.config import settings as settings_lib
from inception.config import sources
from inception.driver import launch
from inception.inputs import service
from inception.run.directory import SETTINGS_FILE
from tests import testing_utils

# One tower: where the batches come from does not depend on the towers.
TINY = dict(**testing_utils.tiny_model(), batch_size=4, num_towers=1, seed=3,
            log_every_n_steps=1, save_checkpoint_steps=2, dataset="demo")
DATA = testing_utils.DemoData(train=24, validation=8)


def train(name, log=None, train_dir=None, **overrides):
    """A tiny demo run; returns (TrainResult, log lines, train_dir)."""
    train_dir = train_dir or testing_utils.temp_dir(name)
    lines = []

    def logged(line):
        lines.append(line)
        if log:
            log(line)
    values = dict(TINY, train_dir=train_dir, data_dir=DATA.path, max_steps=4)
    values.update(overrides)
    return launch.train(settings_lib.train_settings(**values), log=logged), lines, train_dir


def loss_lines(lines):
    """The loss lines among a run's log lines."""
    return [line for line in lines if ": step " in line and "loss = " in line]


def start_service(workers):
    """A tf.data service in this process: (its dispatcher, its `workers` workers)."""
    dispatcher = service.start_dispatcher(0)
    address = dispatcher.target.split("://")[1]
    return dispatcher, [service.start_worker(address, "localhost") for _ in range(workers)]


def wait_for_line(path, process, text, timeout):
    """Waits until the file `path` that `process` writes holds `text`."""
    deadline = time.monotonic() + timeout
    while True:
        with open(path, encoding="utf-8", errors="replace") as output:
            if text in output.read():
                return
        if process.poll() is not None or time.monotonic() > deadline:
            with open(path, encoding="utf-8", errors="replace") as output:
                raise AssertionError(f"no {text!r} within {timeout} s:\n{output.read()[-3000:]}")
        time.sleep(0.5)


def two_worker_run():
    """8 steps fed by a service of two workers, the first stopped after step 2: (TrainResult,
    log lines, the dispatcher's address, the tasks of the training job each worker held when
    the first was stopped)."""
    dispatcher, workers = start_service(2)
    tasks = []

    def stop_one_at_step_2(line):
        if "step 2, loss" in line:
            # TensorFlow's own tests read a worker's tasks through this private accessor.
            # pylint: disable-next=protected-access
            tasks.extend(worker._num_tasks() for worker in workers)
            workers[0].stop()
    try:
        result, lines, _ = train("worker_lost", log=stop_one_at_step_2, max_steps=8,
                                 input_service=dispatcher.target, input_service_timeout_secs=60)
    finally:
        for server in workers[1:] + [dispatcher]:
            server.stop()
    return result, lines, dispatcher.target, tasks


class InputServiceTrainingTest(unittest.TestCase):

    def test_a_lost_service_ends_training_within_a_minute_in_one_line(self):
        """The real entry point with the default timeouts, its service's one worker stopped
        after step 2 (the dispatcher still lists it): the step's watch finds no worker
        answering and ends the run with the restart code, its last checkpoint intact."""
        dispatcher, workers = start_service(1)
        self.addCleanup(dispatcher.stop)
        train_dir = testing_utils.temp_dir("service_lost")
        log_path = os.path.join(train_dir, "output.log")
        flags = [f"--{name}={value}" for name, value in TINY.items()
                 if name not in ("num_towers", "image_size", "depth_multiplier")]
        flags += testing_utils.tiny_flags() + [
            "--num_gpus=1", f"--train_dir={train_dir}", f"--data_dir={DATA.path}",
            "--max_steps=100000", "--eval_every_n_steps=0",
            f"--input_service={dispatcher.target}"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TF_CPP_MIN_LOG_LEVEL="2")
        with open(log_path, "w", encoding="utf-8") as log, subprocess.Popen(
                [sys.executable, "-m", "inception.train", *flags], stdout=log,
                stderr=subprocess.STDOUT, env=env) as trainer:
            self.addCleanup(trainer.kill)
            wait_for_line(log_path, trainer, ": step 2, loss", timeout=480)
            for worker in workers:
                worker.stop()
            stopped = time.monotonic()
            code = trainer.wait(timeout=180)
            waited = time.monotonic() - stopped
            with open(log_path, encoding="utf-8") as output:
                output = output.read()
        self.assertEqual(code, recovery.DEFAULT_RESTART_EXIT_CODE, output[-3000:])
        # The watch's 3 probes 10 s apart after 10 s, plus a busy machine's delays.
        self.assertLess(waited, 60, output[-3000:])
        errors = [line for line in output.splitlines() if line.startswith("error: ")]
        self.assertEqual(len(errors), 1, output[-3000:])
        self.assertRegex(errors[0], rf"^error: training lost the tf.data service at "
                                    rf"{re.escape(dispatcher.target)} after step \d+: none of "
                                    r"its 1 worker\(s\) answers \(localhost:\d+: Connection "
                                    r"refused\)\. Start the service again and rerun")
        self.assertNotIn("Traceback", output)
        checkpoint = tf.train.latest_checkpoint(train_dir)
        self.assertIsNotNone(checkpoint)
        testing_utils.assert_finite_checkpoint(self, checkpoint)

    def test_the_service_feeds_training_and_a_lost_worker_of_two_does_not_stop_it(self):
        result, lines, target, tasks = two_worker_run()
        self.assertEqual(tasks, [1, 1])  # both workers held a task of the job when one stopped
        self.assertEqual(result.step, 8)  # fed by the service throughout, by one worker after 2
        self.assertTrue(any(f": input: from the tf.data service at {target}, job "
                            in line for line in lines), lines)
        # The service's reads are timed like the local pipeline's (loop/feed_wait.py).
        self.assertTrue(any("input wait" in line for line in loss_lines(lines)), lines)


class SyntheticInputTest(unittest.TestCase):

    def test_synthetic_input_trains_says_so_and_keeps_its_run_directory_to_itself(self):
        """6 steps on random input; then checkpoints trained on random input are not resumed on
        the data set's, nor the reverse, and each refusal leaves the directory as it was."""
        result, lines, train_dir = train("synthetic", synthetic_input=True, max_steps=6)
        self.assertEqual(result.step, 6)
        self.assertTrue(any("input: synthetic" in line for line in lines), lines)
        # No input is read, so none is waited for: the loss lines say nothing of it.
        self.assertTrue(loss_lines(lines), lines)
        self.assertFalse([line for line in loss_lines(lines) if "input wait" in line], lines)

        settings_path = os.path.join(train_dir, SETTINGS_FILE)
        with open(settings_path, encoding="utf-8") as stored:
            written = stored.read()
        self.assertIs(json.loads(written)["synthetic_input"], True)
        with self.assertRaisesRegex(settings_lib.SettingsError,
                                    rf"^--train_dir={train_dir} holds checkpoints trained with "
                                    r"--synthetic_input \(random input, for timing\)"):
            train("synthetic_kept", train_dir=train_dir, max_steps=8)
        with open(settings_path, encoding="utf-8") as stored:
            self.assertEqual(stored.read(), written)
        with open(settings_path, "w", encoding="utf-8") as stored:  # as a real run writes it
            stored.write(written.replace('"synthetic_input": true', '"synthetic_input": false'))
        with self.assertRaisesRegex(settings_lib.SettingsError,
                                    rf"^--synthetic_input: --train_dir={train_dir} holds "
                                    r"checkpoints trained on the data set's images"):
            train("synthetic_kept", train_dir=train_dir, synthetic_input=True, max_steps=8)


class RefusalTest(unittest.TestCase):

    def refused(self, pattern, **values):
        settings = settings_lib.train_settings(train_dir="/tmp/x", **values)
        with self.assertRaisesRegex(settings_lib.SettingsError, pattern):
            settings.validate()

    def test_refusals(self):
        self.refused(r"^--input_service and --deterministic: .* drop one of the two\.$",
                     input_service="grpc://localhost:5050", deterministic=True)
        self.refused(r"^--input_service and --synthetic_input both set the input",
                     input_service="grpc://localhost:5050", synthetic_input=True)
        self.refused(r"^--input_service=localhost:5050 is not an address grpc://host:port",
                     input_service="localhost:5050")
        self.refused(r"^--input_service_timeout_secs=0 must be positive",
                     input_service="grpc://localhost:5050", input_service_timeout_secs=0)

    def test_the_service_commands_refusals_name_its_flags(self):
        for values, pattern in (
                (dict(dispatcher="input-host"), r"^--dispatcher=input-host is not an address "
                                                r"host:port \(e.g. input-host:5050\)"),
                (dict(), r"^--port=0: give the dispatcher's port"),
                (dict(dispatcher="h:1", work_dir="/tmp/j"), r"^--work_dir is the dispatcher's")):
            with self.assertRaisesRegex(settings_lib.SettingsError, pattern):
                sources.InputServiceSettings(**values).validate()


if __name__ == "__main__":
    absltest.main()
