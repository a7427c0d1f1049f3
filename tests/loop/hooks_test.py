"""The plain WorkerHooks: the one-machine behaviour of every hook the training loop calls (a
cluster worker's overrides: distributed/distributed_test); the watch on a step that waits
(loop/liveness.py)."""

import threading
import time
import unittest
from unittest import mock

import tensorflow as tf
from absl.testing import absltest

from inception.loop import hooks as hooks_lib
from inception.loop import liveness
from tests import testing_utils

tf1 = tf.compat.v1


class ReplicaTest(unittest.TestCase):

    def setUp(self):
        self.hooks = hooks_lib.WorkerHooks()

    def test_it_is_the_chief(self):
        self.assertIs(self.hooks.is_chief, True)

    def test_run_step_runs_the_fetches_once_and_counts_the_step(self):
        with tf.Graph().as_default() as graph:
            counter = tf1.get_variable("counter", initializer=tf.constant(0, tf.int64))
            fetches = {"count": counter.assign_add(1), "twice": 2 * counter.read_value()}
            with self.hooks.open_session(graph, tf1.ConfigProto()) as session:
                session.run(tf1.global_variables_initializer())
                values, step = self.hooks.run_step(session, fetches, 41)
                self.assertEqual(step, 42)
                self.assertEqual(values["count"], 1)
                self.assertEqual(sorted(values), ["count", "twice"])
                self.assertEqual(session.run(counter), 1)  # run once, not once per hook
                self.assertEqual(self.hooks.run_step(session, fetches, 42)[1], 43)

    def test_open_session_runs_the_given_graph_with_the_given_config(self):
        graph = tf.Graph()
        with graph.as_default():
            value = tf.constant(3) * 2
        with self.hooks.open_session(graph, testing_utils.cpu_session_config(3)) as session:
            self.assertIsInstance(session, tf1.Session)
            self.assertIs(session.graph, graph)
            self.assertEqual(session.run(value), 6)
            cpus = [d.name for d in session.list_devices() if d.device_type == "CPU"]
            self.assertEqual(len(cpus), 3, cpus)  # the config's virtual devices

    def test_only_a_non_chief_waits_for_the_chief(self):
        with self.assertRaisesRegex(NotImplementedError, "only a non-chief worker waits"):
            self.hooks.wait_until_ready(mock.Mock(spec=tf1.Session))

    def test_device_scope_places_nothing(self):
        with tf.Graph().as_default() as graph:
            with self.hooks.device_scope() as entered:
                variable = tf1.get_variable("v", [2])
                total = tf.reduce_sum(variable)
            self.assertIsNone(entered)
            self.assertEqual((variable.device, total.device), ("", ""))
            self.assertIs(tf1.get_default_graph(), graph)

    def test_the_other_hooks_add_and_run_nothing(self):
        with tf.Graph().as_default() as graph:
            tf.constant(1)
            before = len(graph.get_operations())
            self.assertIsNone(self.hooks.build(mock.Mock(name="train_graph")))
            self.assertEqual(len(graph.get_operations()), before)
        session = mock.Mock(spec=tf1.Session)
        for hook in (self.hooks.begin, self.hooks.before_save, self.hooks.finish):
            self.assertIsNone(hook(session), hook.__name__)
        self.assertEqual(session.mock_calls, [])


class PeerStoppedTest(unittest.TestCase):

    def test_it_carries_the_step_training_ended_at_and_whether_it_stopped_early(self):
        stopped = hooks_lib.PeerStopped(1200)
        self.assertEqual(stopped.step, 1200)
        self.assertEqual(str(stopped), "training ended by another task at step 1200")
        self.assertFalse(stopped.early)
        self.assertIsNone(stopped.signal_number)
        self.assertTrue(hooks_lib.PeerStopped(1200, early=True).early)
        self.assertEqual(hooks_lib.PeerStopped(1200, signal_number=15).signal_number, 15)


class AgreeToStopTest(unittest.TestCase):

    def test_a_single_process_stops_at_once_for_either_reason(self):
        hooks = hooks_lib.WorkerHooks()
        for signal_number, early in ((None, False), (15, False), (None, True), (2, True)):
            self.assertEqual(hooks.agree_to_stop(signal_number, early),
                             signal_number is not None or early)


class TimedWorkerHooksTest(unittest.TestCase):

    def test_a_step_past_its_limit_raises_the_given_error(self):
        """A step that waits for ever (a dequeue from an empty queue) ends after its limit
        with make_error(step, limit): the first step of a start gets the extra seconds."""
        with tf.Graph().as_default() as graph:
            waits = tf1.FIFOQueue(1, tf.float32).dequeue()
            with tf1.Session(graph=graph) as session:
                hooks = hooks_lib.TimedWorkerHooks(
                    0.2, 0.3, lambda step, waited: RuntimeError(f"{step}: {waited:g} s"))
                started = time.monotonic()
                with self.assertRaisesRegex(RuntimeError, r"^7: 0.5 s$"):
                    hooks.run_step(session, waits, 7)
                self.assertGreaterEqual(time.monotonic() - started, 0.5)
                hooks.steps_run = 1
                with self.assertRaisesRegex(RuntimeError, r"^8: 0.2 s$"):
                    hooks.run_step(session, waits, 8)


class StepWatchTest(unittest.TestCase):
    """A watch probing every 0.05 s after 0.05 s, lost after 3 failures in a row."""

    def watch(self, answers):
        """(a StepWatch whose probe gives `answers` in turn, then None; the lines it ended
        with; an Event set when it ended one)."""
        answers, lines, lost = list(answers), [], threading.Event()

        def on_lost(line):
            lines.append(line)
            lost.set()
        probe = lambda: answers.pop(0) if answers else None  # pylint: disable=unnecessary-lambda-assignment
        return liveness.StepWatch(probe, on_lost, after_secs=0.05, every_secs=0.05,
                                    lost_after=3), lines, lost

    def test_three_failures_in_a_row_end_the_step_with_the_last_reason(self):
        watch, lines, lost = self.watch(["gone 1", "gone 2", "gone 3"])
        with watch.around(lambda reason: f"lost: {reason}"):
            self.assertTrue(lost.wait(10))
        self.assertEqual(lines, ["lost: gone 3"])

    def test_an_answer_between_failures_starts_the_count_again(self):
        watch, lines, _ = self.watch(["gone", "gone", None, "gone", "gone", None, None])
        with watch.around(lambda reason: reason):
            time.sleep(0.8)  # all seven answers and more
        self.assertEqual(lines, [])

    def test_a_step_that_ends_is_not_probed_again(self):
        watch, lines, _ = self.watch(["gone"] * 3)
        with watch.around(lambda reason: reason):
            pass  # ends before the first probe
        time.sleep(0.4)
        self.assertEqual(lines, [])


if __name__ == "__main__":
    absltest.main()
