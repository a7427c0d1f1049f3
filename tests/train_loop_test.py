"""The training loop on a small model: NaN check of every tower, checkpoints, resume, signals."""

import os
import signal
import threading
import time
import unittest

import numpy as np
import tensorflow as tf

from inception import checkpoints
from inception import train_graph
from inception import train_loop
from inception.cadence import Cadence
from inception.stop_request import StopRequest
from tests import testing_utils

tf1 = tf.compat.v1
BATCH = 8
NUM_TOWERS = 2


def small_model_factory(nan_tower=None, nan_from_step=None):
    """make_model_fn(bn_decay) for train_graph; optionally NaN in one tower from a step on."""
    base = testing_utils.small_conv_model_fn()

    def make_model_fn(bn_decay):
        del bn_decay

        def model_fn(images, labels):
            terms = base(images, labels)
            scope = tf1.get_default_graph().get_name_scope()
            if nan_tower is not None and scope.startswith(f"tower_{nan_tower}"):
                step = tf1.train.get_global_step()
                poisoned = tf.where(step + 1 >= nan_from_step, np.float32("nan"), 0.0)
                terms = {name: value + poisoned for name, value in terms.items()}
            return terms
        return model_fn
    return make_model_fn


def build_graph_fn(**factory_args):
    def build():
        optimization = train_graph.OptimizationSettings(batch_size=BATCH, examples_per_epoch=64,
                                                        initial_learning_rate=0.01)
        return train_graph.build_train_graph(
            testing_utils.synthetic_input(BATCH), small_model_factory(**factory_args),
            optimization,
            [f"/cpu:{i}" for i in range(NUM_TOWERS)])
    return build


def loop_settings(train_dir, max_steps, **overrides):
    values = dict(train_dir=train_dir, max_steps=max_steps, batch_size=BATCH,
                  log_every_n_steps=1, save_summaries_steps=1, save_checkpoint_steps=5,
                  save_interval_secs=0)
    values.update(overrides)
    return train_loop.LoopSettings(**values)


def run(train_dir, max_steps, log=None, **factory_args):
    return train_loop.run_training(build_graph_fn(**factory_args),
                                   testing_utils.cpu_session_config(NUM_TOWERS),
                                   loop_settings(train_dir, max_steps),
                                   log=log if log is not None else (lambda line: None))


def train_steps(variable_device, steps=3):
    """Variables after `steps` steps of the small model with the given variable device."""
    with tf.Graph().as_default():
        optimization = train_graph.OptimizationSettings(batch_size=BATCH, examples_per_epoch=64,
                                                        initial_learning_rate=0.01)
        built = train_graph.build_train_graph(
            testing_utils.synthetic_input(BATCH), small_model_factory(), optimization,
            [f"/cpu:{i}" for i in range(NUM_TOWERS)], variable_device=variable_device)
        devices = {v.op.name: v.device for v in tf1.global_variables()}
        config = testing_utils.cpu_session_config(NUM_TOWERS + 1)
        with tf1.Session(config=config) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            for _ in range(steps):
                session.run(built.stages[0].train_op)
            values = {v.op.name: session.run(v) for v in tf1.global_variables()}
    return devices, values


class StopRequestTest(unittest.TestCase):

    def test_the_handler_only_records_and_the_next_check_logs_once(self):
        # Logging inside the handler could interrupt a print of the main code ("reentrant
        # call inside <stdout>", seen in the eval watch test).
        lines = []
        previous = signal.getsignal(signal.SIGTERM)
        with StopRequest(lines.append, "stopping") as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs in the main thread between bytecodes
            self.assertEqual(stop.signal_number, signal.SIGTERM)
            self.assertEqual(lines, [])
            self.assertTrue(stop.requested)
            self.assertTrue(stop.requested)
        self.assertEqual(lines, ["SIGTERM received: stopping (send it again to stop at once)."])
        self.assertIs(signal.getsignal(signal.SIGTERM), previous)


class VariableDeviceTest(unittest.TestCase):

    def test_variables_and_updates_follow_variable_device_with_the_same_result(self):
        on_cpu0_devices, on_cpu0 = train_steps("/cpu:0")
        on_cpu2_devices, on_cpu2 = train_steps("/cpu:2")
        del on_cpu0_devices["global_step"], on_cpu2_devices["global_step"]  # no device pinned
        self.assertTrue(all(d.lower().endswith("cpu:0") for d in on_cpu0_devices.values()),
                        on_cpu0_devices)
        self.assertTrue(all(d.lower().endswith("cpu:2") for d in on_cpu2_devices.values()),
                        on_cpu2_devices)
        self.assertEqual(sorted(on_cpu0), sorted(on_cpu2))
        self.assertGreater(on_cpu0["global_step"], 0)
        for name, value in on_cpu0.items():
            np.testing.assert_allclose(on_cpu2[name], value, rtol=1e-6, atol=1e-7,
                                       err_msg=name)


class NanCheckTest(unittest.TestCase):

    def test_nan_in_a_tower_that_is_not_the_last_is_caught_and_named(self):
        train_dir = testing_utils.temp_dir("nan")
        with self.assertRaises(train_loop.NonFiniteLossError) as caught:
            run(train_dir, 20, nan_tower=0, nan_from_step=8)
        error = caught.exception
        self.assertEqual(error.step, 8)
        self.assertEqual(error.bad_towers, [0])
        self.assertIn("step 8 in tower_0 (", str(error))
        latest = checkpoints.latest_checkpoint(train_dir)
        self.assertEqual(latest, os.path.join(train_dir, "model.ckpt-5"))
        self.assertIn("model.ckpt-5", str(error))
        reader = tf.train.load_checkpoint(latest)
        for name in reader.get_variable_to_shape_map():
            value = reader.get_tensor(name)
            if np.issubdtype(np.asarray(value).dtype, np.floating):
                self.assertTrue(np.all(np.isfinite(value)), name)
        self.assertEqual(int(reader.get_tensor("global_step")), 5)

    def test_nan_in_the_last_tower_is_caught_too(self):
        train_dir = testing_utils.temp_dir("nan_last")
        with self.assertRaises(train_loop.NonFiniteLossError) as caught:
            run(train_dir, 20, nan_tower=NUM_TOWERS - 1, nan_from_step=3)
        self.assertEqual(caught.exception.bad_towers, [NUM_TOWERS - 1])
        self.assertIsNone(checkpoints.latest_checkpoint(train_dir))
        self.assertIn("no checkpoint was written", str(caught.exception))

    def test_finite_run_logs_mean_over_towers(self):
        train_dir = testing_utils.temp_dir("finite")
        lines = []
        result = run(train_dir, 3, log=lines.append)
        step_lines = [line for line in lines if ": step " in line]
        self.assertEqual(len(step_lines), 3)
        self.assertRegex(step_lines[-1], r"step 3, loss = [0-9.]+ \([0-9.]+ examples/sec; "
                                         r"[0-9.]+ sec/batch\)$")
        scalars = testing_utils.read_scalars(train_dir)
        step3 = {tag: dict(values).get(3) for tag, values in scalars.items()}
        towers = [step3[f"tower_{i}/total_loss"] for i in range(NUM_TOWERS)]
        self.assertAlmostEqual(step3["mean_loss"], float(np.mean(towers)), places=5)
        self.assertAlmostEqual(result.last_mean_loss, step3["mean_loss"], places=5)
        self.assertNotAlmostEqual(towers[0], towers[1], places=4)


class ResumeTest(unittest.TestCase):

    def test_resume_continues_global_step(self):
        train_dir = testing_utils.temp_dir("resume")
        first = run(train_dir, 4)
        self.assertEqual(first.step, 4)
        self.assertEqual(first.checkpoint, os.path.join(train_dir, "model.ckpt-4"))
        lines = []
        second = run(train_dir, 7, log=lines.append)
        self.assertEqual(second.step, 7)
        self.assertTrue(any("resumed from" in line and "(step 4)" in line for line in lines))
        self.assertEqual([line.split("step ")[1].split(",")[0] for line in lines
                          if ": step " in line], ["5", "6", "7"])
        reader = tf.train.load_checkpoint(second.checkpoint)
        self.assertEqual(int(reader.get_tensor("global_step")), 7)
        self.assertTrue(os.path.exists(os.path.join(train_dir, "model.ckpt-4.index")))

    def test_finished_run_does_nothing(self):
        train_dir = testing_utils.temp_dir("finished")
        run(train_dir, 2)
        lines = []
        result = run(train_dir, 2, log=lines.append)
        self.assertEqual(result.step, 2)
        self.assertTrue(any("nothing to train" in line for line in lines))


class SignalTest(unittest.TestCase):

    def test_sigterm_saves_a_checkpoint_and_stops(self):
        train_dir = testing_utils.temp_dir("sigterm")
        started = threading.Event()

        def log(line):
            if ": step " in line and not started.is_set():
                started.set()
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()

        result = train_loop.run_training(
            build_graph_fn(), testing_utils.cpu_session_config(NUM_TOWERS),
            loop_settings(train_dir, 10**7, save_checkpoint_steps=0), log=log)
        self.assertEqual(result.stopped_by_signal, signal.SIGTERM)
        self.assertLess(result.step, 10**7)
        self.assertEqual(result.checkpoint, os.path.join(train_dir, f"model.ckpt-{result.step}"))
        self.assertEqual(checkpoints.latest_checkpoint(train_dir), result.checkpoint)
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)


class CadenceTest(unittest.TestCase):

    def test_steps_and_seconds(self):
        cadence = Cadence(every_steps=10, every_secs=60, start_step=0, start_time=0.0)
        self.assertFalse(cadence.due(9, 59.0))
        self.assertTrue(cadence.due(10, 0.0))
        self.assertTrue(cadence.due(1, 60.0))
        cadence.mark(10, 30.0)
        self.assertFalse(cadence.due(19, 89.0))
        self.assertTrue(cadence.check_and_mark(20, 31.0))
        self.assertFalse(cadence.due(21, 32.0))

    def test_zero_means_never(self):
        cadence = Cadence(every_steps=0, every_secs=0)
        self.assertFalse(cadence.due(10**9, 10.0**9))


if __name__ == "__main__":
    unittest.main()
