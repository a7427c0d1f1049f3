"""The training loop on a small model: NaN check of every tower, checkpoints, resume, signals."""

import os
import signal
import threading
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.loop import guards
from inception.loop import session_loop
from inception.run.directory import RunDirectory
from inception.run.health import CheckpointWriteError
from inception.step import step_graph
from tests import testing_utils
from tests.loop.loop_fixture import BATCH
from tests.loop.loop_fixture import NUM_TOWERS
from tests.loop.loop_fixture import build_graph_fn
from tests.loop.loop_fixture import loop_settings
from tests.loop.loop_fixture import run
from tests.loop.loop_fixture import small_model_factory

tf1 = tf.compat.v1


def train_steps(variable_device, steps=3):
    """Variables after `steps` steps of the small model with the given variable device."""
    with tf.Graph().as_default():
        built = step_graph.build_train_graph(
            testing_utils.synthetic_input(BATCH), small_model_factory(),
            testing_utils.optimization(initial_learning_rate=0.01),
            testing_utils.sharing_of([f"/cpu:{i}" for i in range(NUM_TOWERS)],
                                     variable_device=variable_device), 64)
        devices = {v.op.name: v.device for v in tf1.global_variables()}
        config = testing_utils.cpu_session_config(NUM_TOWERS + 1)
        with tf1.Session(config=config) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            for _ in range(steps):
                session.run(built.stages[0].train_op)
            values = {v.op.name: session.run(v) for v in tf1.global_variables()}
    return devices, values


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
            # The same kernels on another virtual CPU device of this machine: equal up to the
            # thread pool's reduction order (float32 rounding, relative 1e-7).
            np.testing.assert_allclose(on_cpu2[name], value, rtol=1e-6, atol=1e-7,
                                       err_msg=name)


class NanCheckTest(unittest.TestCase):

    def test_nan_in_a_tower_that_is_not_the_last_is_caught_and_named(self):
        train_dir = testing_utils.temp_dir("nan")
        with self.assertRaises(guards.DivergenceError) as caught:
            run(train_dir, 20, nan_tower=0, nan_from_step=8)
        error = caught.exception
        self.assertEqual(error.step, 8)
        self.assertEqual(error.bad_towers, [0])
        self.assertIn("step 8 in tower_0 (", str(error))
        latest = RunDirectory(train_dir).newest()
        self.assertEqual(latest, os.path.join(train_dir, "model.ckpt-5"))
        self.assertIn("model.ckpt-5", str(error))
        testing_utils.assert_finite_checkpoint(self, latest)
        reader = tf.train.load_checkpoint(latest)
        self.assertEqual(int(reader.get_tensor("global_step")), 5)

    def test_the_update_that_poisons_the_weights_is_caught_before_its_checkpoint(self):
        # Step 10's loss is still finite, but its update writes NaN into the weights, and a
        # checkpoint is due at step 10: the step is caught there, not at step 11, and no
        # checkpoint holds the poison.
        train_dir = testing_utils.temp_dir("nan_update")
        with self.assertRaises(guards.DivergenceError) as caught:
            run(train_dir, 20, nan_gradient_from_step=10)
        error = caught.exception
        self.assertEqual(error.step, 10)
        self.assertEqual(error.bad_towers, [0])
        self.assertIn("the update of step 10 is not finite in tower_0", str(error))
        self.assertIn("the last healthy checkpoint is " + os.path.join(train_dir, "model.ckpt-5"),
                      str(error))
        self.assertEqual(RunDirectory(train_dir).newest(),
                         os.path.join(train_dir, "model.ckpt-5"))
        self.assertFalse(os.path.exists(os.path.join(train_dir, "model.ckpt-10.index")))
        testing_utils.assert_finite_checkpoint(self, RunDirectory(train_dir).newest())
        # A rerun without the fault (a sane learning rate) continues from the good checkpoint.
        lines = []
        resumed = run(train_dir, 12, log=lines.append)
        self.assertEqual(resumed.step, 12)
        self.assertTrue(any("resumed from" in line and "(step 5)" in line for line in lines))
        testing_utils.assert_finite_checkpoint(self, resumed.checkpoint)

    def test_a_checkpoint_is_never_written_with_non_finite_variables(self):
        # Losses and gradients stay finite; a statistic outside the gradients turns Inf. The
        # check before the save refuses it, on the periodic and on the final save alike.
        for max_steps, statistic_step in ((20, 7), (3, 2)):
            with self.subTest(max_steps=max_steps):
                train_dir = testing_utils.temp_dir("inf_statistic")
                with self.assertRaises(guards.DivergenceError) as caught:
                    run(train_dir, max_steps, inf_statistic_at_step=statistic_step)
                saved_at = 10 if max_steps == 20 else 3
                self.assertIn(f"not finite at step {saved_at} (e.g. net/statistic)",
                              str(caught.exception))
                for path in RunDirectory(train_dir).listed():
                    testing_utils.assert_finite_checkpoint(self, path)

    def test_nan_in_the_last_tower_is_caught_too(self):
        train_dir = testing_utils.temp_dir("nan_last")
        with self.assertRaises(guards.DivergenceError) as caught:
            run(train_dir, 20, nan_tower=NUM_TOWERS - 1, nan_from_step=3)
        self.assertEqual(caught.exception.bad_towers, [NUM_TOWERS - 1])
        self.assertIsNone(RunDirectory(train_dir).newest())
        self.assertIn("no checkpoint was written", str(caught.exception))

    def test_finite_run_logs_mean_over_towers(self):
        train_dir = testing_utils.temp_dir("finite")
        lines = []
        result = run(train_dir, 3, log=lines.append)
        step_lines = [line for line in lines if ": step " in line]
        self.assertEqual(len(step_lines), 3)
        # The start-up line once, after the first step's lines, with the parts this call measured.
        startup = [line for line in lines if line.startswith("start-up: ")]
        self.assertEqual(len(startup), 1, lines)
        self.assertLess(lines.index(step_lines[0]), lines.index(startup[0]), lines)
        self.assertLess(lines.index(startup[0]), lines.index(step_lines[1]), lines)
        self.assertRegex(startup[0], r"^start-up: [\d.]+ s to the end of the first step \(graph "
                                     r"[\d.]+ s, session and restore [\d.]+ s, first step [\d.]+ s\)$")
        self.assertRegex(step_lines[-1], r"step 3, loss = [0-9.]+ \([0-9.]+ examples/sec; "
                                         r"[0-9.]+ sec/batch; input wait [0-9]+%\)$")
        scalars = testing_utils.read_scalars(train_dir)
        step3 = {tag: dict(values).get(3) for tag, values in scalars.items()}
        towers = [step3[f"loss/tower_{i}/total_loss"] for i in range(NUM_TOWERS)]
        self.assertAlmostEqual(step3["loss/mean_loss"], float(np.mean(towers)), places=5)
        self.assertAlmostEqual(result.last_mean_loss, step3["loss/mean_loss"], places=5)
        self.assertNotAlmostEqual(towers[0], towers[1], places=4)


class SaveFailureTest(unittest.TestCase):

    def test_a_failed_save_leaves_nothing_and_keeps_the_previous_checkpoint(self):
        train_dir = testing_utils.temp_dir("full_disk")
        run(train_dir, 5)
        original_save = tf1.train.Saver.save

        def save_on_a_full_disk(saver, session, save_path, global_step=None, **kwargs):
            del saver, session, kwargs
            partial = f"{save_path}-{global_step}.data-00000-of-00001.tempstate1234"
            with open(partial, "wb") as handle:
                handle.write(b"\0" * 1000)  # what a save cut short leaves behind
            raise tf.errors.ResourceExhaustedError(
                None, None, f"{partial}; No space left on device\nHint: unrelated OOM advice")

        tf1.train.Saver.save = save_on_a_full_disk
        try:
            with self.assertRaises(CheckpointWriteError) as caught:
                run(train_dir, 8)
        finally:
            tf1.train.Saver.save = original_save
        message = str(caught.exception)
        self.assertIn(f"could not save checkpoint {train_dir}/model.ckpt-8 in {train_dir}",
                      message)
        self.assertIn("No space left on device", message)
        self.assertNotIn("Hint", message)
        self.assertRegex(message, r"needs about [\d,.]+ [KMG]B \([\d,.]+ [KMG]B free\)")
        self.assertIn("the newest checkpoint is still " + os.path.join(train_dir, "model.ckpt-5"),
                      message)
        self.assertEqual(RunDirectory(train_dir).newest(),
                         os.path.join(train_dir, "model.ckpt-5"))
        self.assertEqual([name for name in os.listdir(train_dir) if "tempstate" in name], [])
        resumed = run(train_dir, 8)  # space again: the rerun resumes from step 5
        self.assertEqual(resumed.step, 8)


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

        result = session_loop.run_training(
            build_graph_fn(), testing_utils.cpu_session_config(NUM_TOWERS),
            loop_settings(train_dir, 10**7, save_checkpoint_steps=0), log=log)
        self.assertEqual(result.stopped_by_signal, signal.SIGTERM)
        self.assertLess(result.step, 10**7)
        self.assertEqual(result.checkpoint, os.path.join(train_dir, f"model.ckpt-{result.step}"))
        self.assertEqual(RunDirectory(train_dir).newest(), result.checkpoint)
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)


class ValidationStub:
    """Stands in for validation.in_training.TrainingValidation: records what it was given and
    asks to stop at `stop_at`."""

    def __init__(self, every, stop_at=None):
        self.every, self.stop_at = every, stop_at
        self.validated, self.last_step, self.last_result = [], None, None

    def due(self, step):
        return step % self.every == 0

    def validate(self, checkpoint, wall_secs):
        assert wall_secs >= 0.0, wall_secs  # the run's wall time so far (health.RunClock)
        self.last_step = int(checkpoint.rsplit("-", 1)[1])
        self.validated.append((self.last_step, os.path.exists(checkpoint + ".index")))
        self.last_result = self.last_step
        return self.last_step == self.stop_at


class ValidationCadenceTest(unittest.TestCase):

    def train(self, max_steps, validation):
        return session_loop.run_training(
            build_graph_fn(), testing_utils.cpu_session_config(NUM_TOWERS),
            loop_settings(testing_utils.temp_dir("validated_loop"), max_steps),
            log=lambda line: None,
            companions=session_loop.LoopCompanions(validation=validation))

    def test_each_due_step_and_the_end_are_validated_on_a_saved_checkpoint(self):
        validation = ValidationStub(every=3)
        result = self.train(7, validation)
        # Saved every 5 steps; steps 3 and 6 are saved for validation, 7 at the end.
        self.assertEqual(validation.validated, [(3, True), (6, True), (7, True)])
        self.assertEqual((result.step, result.stopped_early, result.last_validation),
                         (7, False, 7))

    def test_early_stopping_ends_the_run_at_that_validation(self):
        validation = ValidationStub(every=2, stop_at=4)
        result = self.train(10, validation)
        self.assertEqual(validation.validated, [(2, True), (4, True)])
        self.assertEqual((result.step, result.stopped_early), (4, True))
        self.assertEqual(os.path.basename(result.checkpoint), "model.ckpt-4")


if __name__ == "__main__":
    absltest.main()
