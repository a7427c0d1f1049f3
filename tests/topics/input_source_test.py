"""Where training's input comes from (config/sources.py): the tf.data service feeding a run
(dispatcher and workers in this process), a lost service ending it in one line with its last
checkpoint intact, a lost worker of two not stopping it, --synthetic_input and the refusals."""

import functools
import time
import unittest
from unittest import mock

import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.config import sources
from inception.driver import launch
from inception.inputs import service
from tests import testing_utils

TINY = dict(**testing_utils.tiny_model(), batch_size=4, num_towers=2, seed=3,
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
    return dispatcher, [service.start_worker(address) for _ in range(workers)]


@functools.lru_cache(maxsize=None)
def two_worker_run():
    """8 steps fed by a service of two workers, the first stopped after step 2; run once per
    process for the two tests that read it: (TrainResult, log lines, the dispatcher's address)."""
    dispatcher, workers = start_service(2)

    def stop_one_at_step_2(line):
        if "step 2, loss" in line:
            workers[0].stop()
    try:
        result, lines, _ = train("worker_lost", log=stop_one_at_step_2, max_steps=8,
                                 input_service=dispatcher.target, input_service_timeout_secs=60)
    finally:
        for server in workers[1:] + [dispatcher]:
            server.stop()
    return result, lines, dispatcher.target


class InputServiceTrainingTest(unittest.TestCase):

    def test_the_service_feeds_training_and_the_log_says_so(self):
        # The run of test_a_lost_worker_of_two_does_not_stop_training: fed by the service
        # throughout, by one worker after step 2.
        result, lines, target = two_worker_run()
        self.assertEqual(result.step, 8)
        self.assertTrue(any(f": input: from the tf.data service at {target}, job "
                            in line for line in lines), lines)
        # The service's reads are timed like the local pipeline's (loop/feed_wait.py).
        self.assertTrue(any("input wait" in line for line in loss_lines(lines)), lines)

    def test_a_lost_service_ends_training_in_one_line_and_keeps_the_checkpoint(self):
        dispatcher, workers = start_service(1)
        train_dir = testing_utils.temp_dir("service_lost")

        def stop_at_step_2(line):
            if "step 2, loss" in line:
                for server in workers:
                    server.stop()
        started = time.monotonic()
        with mock.patch.object(launch, "FIRST_STEP_EXTRA_SECS", 60):
            with self.assertRaisesRegex(service.InputServiceError,
                                        r"^training got no input from the tf.data service at "
                                        r".* for 3 s after step \d+: its dispatcher or every "
                                        r"worker is gone"):
                try:
                    train("service_lost", log=stop_at_step_2, max_steps=400, train_dir=train_dir,
                          input_service=dispatcher.target, input_service_timeout_secs=3)
                finally:
                    dispatcher.stop()
        self.assertLess(time.monotonic() - started, 240)
        checkpoint = tf.train.latest_checkpoint(train_dir)
        self.assertIsNotNone(checkpoint)
        testing_utils.assert_finite_checkpoint(self, checkpoint)

    def test_a_lost_worker_of_two_does_not_stop_training(self):
        result, _, _ = two_worker_run()
        self.assertEqual(result.step, 8)


class SyntheticInputTest(unittest.TestCase):

    def test_synthetic_input_trains_and_the_log_says_so(self):
        result, lines, _ = train("synthetic", synthetic_input=True, max_steps=6)
        self.assertEqual(result.step, 6)
        self.assertTrue(any("input: synthetic" in line for line in lines), lines)
        # No input is read, so none is waited for: the loss lines say nothing of it.
        self.assertTrue(loss_lines(lines), lines)
        self.assertFalse([line for line in loss_lines(lines) if "input wait" in line], lines)


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
