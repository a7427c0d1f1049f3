"""Ctrl-C and SIGTERM in every phase of the entry points: one line, exit status 130 / 143 (for
training's SIGTERM, a preemption, --restart_exit_code), nothing half-written; a second signal
stops at once, even inside one long TensorFlow call.

Each case runs an entry point in its own process, with one function of the phase under test
wrapped so that the process sends itself the signal there, as a user's Ctrl-C would arrive.
"""

import os
import signal
import subprocess
import sys
import time
import unittest

from absl.testing import absltest

from inception.config import recovery
from tests import testing_utils

# Runs `module` as the entry point after wrapping `target` (module:attribute) so that it first
# sends `signum` to this process; `kind` "before" signals, then calls the original.
DRIVER = """
import importlib, os, runpy, signal, sys
sys.path[:0] = {path!r}
sys.argv = {argv!r}
owner_name, attribute = {target!r}.split(":")
owner = importlib.import_module(owner_name)
holder = owner
for part in attribute.split(".")[:-1]:
    holder = getattr(holder, part)
name = attribute.split(".")[-1]
original = getattr(holder, name)

def wrapped(*args, **kwargs):
    os.kill(os.getpid(), {signum})
    return original(*args, **kwargs)
setattr(holder, name, wrapped)
runpy.run_module({module!r}, run_name="__main__")
"""

# A step that sits in one long TensorFlow call (a dequeue from an empty queue, one hour timeout)
# while two SIGINTs arrive 0.5 s apart: the second must end the process at once.
LONG_STEP = """
import os, runpy, signal, sys, threading, time
sys.path[:0] = {path!r}
sys.argv = {argv!r}
import tensorflow as tf
from inception.loop import hooks as hooks_lib
tf1 = tf.compat.v1
original = hooks_lib.WorkerHooks.run_step

def long_step(self, session, fetches, step, metadata=None):
    if step == 2:
        with tf.Graph().as_default():
            queue = tf1.FIFOQueue(1, tf.float32)
            take = queue.dequeue()
            with tf1.Session() as waiting:
                for delay in (0.5, 1.0):
                    threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
                print("long step begins at", time.time(), flush=True)
                waiting.run(take, options=tf1.RunOptions(timeout_in_ms=3_600_000))
        print("long step ended", flush=True)
    return original(self, session, fetches, step, metadata)
hooks_lib.WorkerHooks.run_step = long_step
runpy.run_module("inception.train", run_name="__main__")
"""

DATA = testing_utils.DemoData(train=16, validation=4)


def status_of(signum, module):
    """The exit status `module`'s process ends with after `signum`: 128 + it, except training's
    SIGTERM, which asks a scheduler for a restart."""
    if module == "inception.train" and signum == signal.SIGTERM:
        return recovery.DEFAULT_RESTART_EXIT_CODE
    return 128 + signum


def train_argv(train_dir, **extra):
    """Flags of a tiny, quick training run on the test data."""
    flags = dict(train_dir=train_dir, data_dir=DATA.path, dataset="demo", eval_every_n_steps=0,
                 image_size=75,
                 depth_multiplier=0.1, batch_size=2, num_gpus=1, max_steps=4,
                 save_checkpoint_steps=0, save_interval_secs=0, log_every_n_steps=1)
    flags.update(extra)
    return ["train"] + [f"--{name}={value}" for name, value in flags.items()]


def run_script(script, timeout=600):
    """(return code, stdout, stderr, seconds) of `script` run by this Python."""
    started = time.time()
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=timeout, check=False,
                               env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    return (completed.returncode, completed.stdout, completed.stderr,
            time.time() - started)


class EarlyPhaseTest(unittest.TestCase):
    """A signal before the training loop: one line and the exit status, no traceback."""

    def check_phase(self, target, signum, module="inception.train", argv=None):
        train_dir = testing_utils.temp_dir("signal_phase")
        code, _, stderr, _ = run_script(DRIVER.format(
            path=sys.path, argv=argv or train_argv(train_dir), target=target,
            signum=int(signum), module=module))
        self.assertEqual(code, status_of(signum, module), stderr[-2000:])
        self.assertNotIn("Traceback", stderr)
        last = stderr.strip().splitlines()[-1]
        self.assertEqual(last, f"error: stopped by {signal.Signals(signum).name}; files "
                               "already written stay valid and nothing was left half-written "
                               "(rerun the same command to go on).")
        return train_dir

    def test_while_tensorflow_starts(self):
        self.check_phase("inception.driver.startup:quiet_tensorflow", signal.SIGINT)

    def test_while_the_run_is_resolved(self):
        self.check_phase("inception.driver.resolution:resolve_run", signal.SIGTERM)

    def test_while_the_graph_is_built(self):
        train_dir = self.check_phase("inception.step.step_graph:build_train_graph",
                                     signal.SIGINT)
        self.assertEqual([name for name in os.listdir(train_dir) if "ckpt" in name], [])

    def test_while_the_session_starts(self):
        self.check_phase("inception.loop.resume:prepare_fresh_start", signal.SIGINT)

    def trained_run(self):
        """A training directory with one checkpoint."""
        train_dir = testing_utils.temp_dir("signal_trained")
        completed = subprocess.run([sys.executable, "-m", "inception.train"]
                                   + train_argv(train_dir, max_steps=1)[1:],
                                   capture_output=True, text=True, timeout=600, check=False,
                                   env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(completed.returncode, 0, completed.stderr[-2000:])
        return train_dir

    def test_while_evaluating(self):
        train_dir = self.trained_run()
        self.check_phase("inception.validation.scoring:build_eval_graph", signal.SIGINT,
                         module="inception.eval",
                         argv=["eval", f"--checkpoint_dir={train_dir}", "--run_once"])

    def test_while_exporting_nothing_is_left_half_written(self):
        train_dir = self.trained_run()
        export_dir = os.path.join(testing_utils.temp_dir("signal_export_out"), "models")
        self.check_phase("inception.serving.saved_model:_signatures", signal.SIGTERM,
                         module="inception.export",
                         argv=["export", f"--checkpoint_dir={train_dir}",
                               f"--export_dir={export_dir}"])
        self.assertEqual(os.listdir(export_dir) if os.path.isdir(export_dir) else [], [])


class LoopPhaseTest(unittest.TestCase):

    def test_sigterm_in_the_loop_saves_and_exits_with_the_restart_code(self):
        train_dir = testing_utils.temp_dir("signal_loop")
        code, stdout, stderr, _ = run_script(DRIVER.format(
            path=sys.path, argv=train_argv(train_dir, max_steps=10**6),
            target="inception.loop.hooks:WorkerHooks.run_step", signum=int(signal.SIGTERM),
            module="inception.train"))
        self.assertEqual(code, recovery.DEFAULT_RESTART_EXIT_CODE, stderr[-2000:])
        self.assertIn("SIGTERM received: saving a checkpoint after this step and stopping",
                      stdout)
        self.assertIn("stopped by SIGTERM at step 1; run the same command to resume.", stdout)
        self.assertTrue(os.path.exists(os.path.join(train_dir, "model.ckpt-1.index")))

    def test_a_second_ctrl_c_during_one_long_step_stops_at_once(self):
        train_dir = testing_utils.temp_dir("signal_twice")
        code, stdout, stderr, _ = run_script(LONG_STEP.format(
            path=sys.path, argv=train_argv(train_dir, max_steps=10**6)))
        self.assertEqual(code, 130, stderr[-2000:])
        self.assertIn("long step begins", stdout)
        # The long call waits an hour, and run_script gives the whole run 600 s: it ended
        # because of the second signal, inside the call.
        self.assertNotIn("long step ended", stdout)
        self.assertIn("SIGINT received again: stopping at once", stderr)
        self.assertNotIn("Traceback", stderr)
        # The checkpoint before stays the newest: this stop wrote none.
        self.assertFalse(any(name.endswith(".index") for name in os.listdir(train_dir)))


if __name__ == "__main__":
    absltest.main()
