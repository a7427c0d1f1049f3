"""A cluster without parameter servers: the workers all-reduce every tower's gradients.

In one process (two servers on 127.0.0.1, a session each): 2 workers x 2 towers against one
process with 4 towers and the variables on one device, an independent computation. As
subprocesses of the real entry point (local_cluster.py): a killed worker (a signal, a blip
and a partition, each followed by a resume, run on hosts of their own: hosts_test.py).
"""

import functools
import re
import signal
import threading
import time
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import cluster as cluster_lib
from inception.config import settings as settings_lib
from inception.distributed import collective
from inception.inputs import pipeline
from inception.loop import guards
from inception.loop import session_loop
from inception.model import synced_batch_norm
from inception.parallel import all_reduce
from inception.parallel import copies as copies_lib
from inception.run.directory import RunDirectory
from inception.step import step_graph
from tests import faults
from tests import testing_utils
from tests.model import small_models
from tests.distributed import local_cluster
from tests.distributed.local_cluster import error_lines
from tests.distributed.local_cluster import RESTART_EXIT_CODE
from tests.distributed.local_cluster import RUN_TIMEOUT_SECS

tf1 = tf.compat.v1

STEPS = 3
BATCH = 8  # the global batch: 4 per worker, 2 per tower
TWO = ["/cpu:0", "/cpu:1"]
FOUR = ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
# Float32 sums of the same terms in another order (the ring over two processes against
# add_n on one device): a few ulps of values of order 1 per step, grown over STEPS RMSProp
# steps, as in parallel/replicated_test.py (measured there: at most 2e-7). A worker's batch
# counted twice or not at all moves the weights by 1e-3 or more.
TOLERANCE = 2e-6
# The other worker's collective fails within a second of a peer's end (gRPC fail-fast,
# measured 0.1 s on loopback); the rest is the process's own exit.
LOST_WORKER_BOUND_SECS = 30
SEEDED = ("--seed=1", "--deterministic")  # runs that repeat themselves bit for bit
LEAN_SEEDED = SEEDED + local_cluster.NO_VALIDATION
DATA = testing_utils.DemoData(train=24, validation=10)


def worker_input(worker, num_workers):
    """Worker `worker`'s share of each global batch of testing_utils.synthetic_input(BATCH):
    the examples a one-process run's towers 2w and 2w+1 get."""
    images, labels = testing_utils.random_batch(64)
    share = BATCH // num_workers
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(
        BATCH, drop_remainder=True).map(
            lambda x, y: (x[worker * share:(worker + 1) * share],
                          y[worker * share:(worker + 1) * share]))
    iterator = tf1.data.make_initializable_iterator(dataset)
    image_batch, label_batch = iterator.get_next()
    return pipeline.InputBatch(images=image_batch, labels=label_batch,
                               corrupt_records=tf.constant(0, tf.int64),
                               initializer=iterator.initializer)


def optimization():
    return testing_utils.optimization(initial_learning_rate=0.1, optimizer="rmsprop")


class _Worker:
    """One worker's graph and session on its own in-process server."""

    def __init__(self, task, cluster_spec, model_fn):
        config = collective.collective_config(testing_utils.cpu_session_config(2))
        self.server = tf1.train.Server(cluster_spec, job_name="worker", task_index=task,
                                       config=config)
        self.device = f"/job:worker/task:{task}"
        self.graph = tf.Graph()
        with self.graph.as_default(), tf.device(self.device):
            self.built = step_graph.build_train_graph(
                worker_input(task, 2), lambda decay: model_fn, optimization(),
                testing_utils.sharing_of(
                    TWO, all_reduce.AllReduceSpec(all_reduce.RING, 2, num_workers=2)), 64)
            saved = copies_lib.saved_variables(tf1.global_variables())
            self.saved = {name: saved[name] for name in sorted(saved)}
            self.broadcast = all_reduce.broadcast_variables(
                list(self.saved.values()), f"{self.device}/cpu:0", 2, task == 0,
                all_reduce.InstanceKeys(all_reduce.WORKER_INSTANCE_KEYS))
            self.init = tf1.global_variables_initializer()
            # The small model's initial weights are seeded, the same on both workers: the
            # other worker moves its own away, so that the broadcast has something to do.
            self.perturb = tf.group(*[tf1.assign_add(v, tf.ones_like(v))
                                      for v in self.saved.values() if v.dtype.is_floating])
            self.task = task
            self.everything = {v.op.name: v for v in tf1.global_variables()}
        self.config = config
        self.config.device_filters[:] = [self.device]
        self.before = self.after_broadcast = self.values = None
        self.failure = None

    def train(self, steps):
        """Initializes, takes the chief's variables, runs `steps` steps; keeps the values."""
        try:
            with tf1.Session(self.server.target, graph=self.graph, config=self.config) as sess:
                sess.run([self.init, self.built.input_initializer])
                if self.task != 0:
                    sess.run(self.perturb)
                self.before = sess.run(self.saved)
                sess.run(self.broadcast, options=tf1.RunOptions(timeout_in_ms=60_000))
                sess.run(self.built.fill_copies)
                self.after_broadcast = sess.run(self.saved)
                ops = self.built.stages[0]
                for _ in range(steps):
                    sess.run(ops.train_op, options=tf1.RunOptions(timeout_in_ms=60_000))
                self.values = sess.run(self.everything)
        except Exception as error:  # pylint: disable=broad-except
            self.failure = error  # reported by the test's thread


def train_two_workers(model_fn, steps=STEPS):
    """Two workers of two towers each, trained `steps` steps side by side in threads;
    `model_fn`, or `model_fn(task)` for a callable marked `per_task`."""
    ports = local_cluster.free_ports(2)
    spec = tf1.train.ClusterSpec({"worker": [f"127.0.0.1:{port}" for port in ports]})
    workers = [_Worker(task, spec, model_fn(task) if getattr(model_fn, "per_task", False)
                       else model_fn) for task in range(2)]
    threads = [threading.Thread(target=worker.train, args=(steps,)) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    for worker in workers:
        if worker.failure is not None:
            raise worker.failure
    return workers


def train_one_process(model_fn, initial, steps=STEPS):
    """Four towers on one process, the variables on one device, from the values `initial`."""
    with tf.Graph().as_default():
        built = step_graph.build_train_graph(
            testing_utils.synthetic_input(BATCH), lambda decay: model_fn, optimization(),
            testing_utils.sharing_of(FOUR), 64)
        with tf1.Session(config=testing_utils.cpu_session_config(4)) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            for variable in tf1.global_variables():
                variable.load(initial[variable.op.name], session)
            for _ in range(steps):
                session.run(built.stages[0].train_op)
            return session.run({v.op.name: v for v in tf1.global_variables()})


class TwoWorkersEqualOneProcessTest(unittest.TestCase):

    def test_two_workers_of_two_towers_equal_four_towers_on_one_device(self):
        model_fn = testing_utils.small_conv_model_fn()
        chief, other = train_two_workers(model_fn)
        # The broadcast did something: the workers started from different weights, and after
        # it both hold the chief's.
        differed = [name for name in chief.before
                    if not np.array_equal(chief.before[name], other.before[name])]
        self.assertTrue(any(name.endswith("weights") for name in differed), differed)
        for name, value in chief.before.items():
            np.testing.assert_array_equal(other.after_broadcast[name], value, err_msg=name)
        # The same update on every worker: all copies of both workers bit for bit equal.
        self.assertEqual(sorted(chief.values), sorted(other.values))
        for name, value in chief.values.items():
            np.testing.assert_array_equal(other.values[name], value, err_msg=name)
            if name.startswith(copies_lib.COPY_PREFIX):
                original = name.split("/", 1)[1]
                np.testing.assert_array_equal(value, chief.values[original], err_msg=name)
        reference = train_one_process(model_fn, chief.before)
        self.assertEqual(int(reference["global_step"]), STEPS)
        for name, value in reference.items():
            np.testing.assert_allclose(chief.values[name], value, rtol=0, atol=TOLERANCE,
                                       err_msg=name)
        # And the comparison can fail: one step fewer is far outside the tolerance.
        shorter = train_one_process(model_fn, chief.before, steps=STEPS - 1)
        weights = [name for name in shorter if name.endswith("weights")]
        self.assertTrue(any(np.max(np.abs(shorter[name] - chief.values[name])) > 100 * TOLERANCE
                            for name in weights))


class SyncedBatchNormAcrossWorkersTest(unittest.TestCase):

    def test_two_workers_synchronized_equal_four_synchronized_towers_on_one_device(self):
        """--sync_batch_norm over every tower of the cluster: its collectives span the two
        workers, and 3 steps equal one process whose 4 towers synchronize (weights and moving
        statistics within TOLERANCE, as above)."""
        def worker_model_fn(task):
            return small_models.small_batch_norm_model_fn(synced_batch_norm.BatchNormGroups(
                group_size=4, towers_per_worker=2, first_device=2 * task))
        worker_model_fn.per_task = True
        chief, other = train_two_workers(worker_model_fn)
        reference = train_one_process(small_models.small_batch_norm_model_fn(
            synced_batch_norm.BatchNormGroups(group_size=4, towers_per_worker=4)), chief.before)
        moving = [name for name in reference if "moving_" in name]
        self.assertTrue(moving)
        for name, value in reference.items():
            np.testing.assert_allclose(chief.values[name], value, rtol=0, atol=TOLERANCE,
                                       err_msg=name)
            np.testing.assert_allclose(other.values[name], value, rtol=0, atol=TOLERANCE,
                                       err_msg=name)
        unsynced = train_one_process(small_models.small_batch_norm_model_fn(), chief.before)
        self.assertTrue(any(np.max(np.abs(unsynced[name] - chief.values[name]))
                            > 100 * TOLERANCE for name in moving))


class WantsToStopAtStep2(collective.CollectiveWorker):
    """A worker that wants to stop once it reached step 2, as a signal or the chief's early
    stopping would make it."""

    reached = 0

    def run_step(self, session, fetches, step, metadata=None):
        out, self.reached = super().run_step(session, fetches, step, metadata)
        return out, self.reached

    def agree_to_stop(self, signal_number, early):
        if self.reached >= 2 and signal_number is None:
            signal_number = signal.SIGTERM
        return super().agree_to_stop(signal_number, early)


class StopsEarlyAtStep2(WantsToStopAtStep2):
    """A chief whose validation stops the run early once it reached step 2."""

    def agree_to_stop(self, signal_number, early):
        return collective.CollectiveWorker.agree_to_stop(self, signal_number,
                                                         early or self.reached >= 2)


class CollectiveLoopTest(unittest.TestCase):
    """Two CollectiveWorkers in this process (a server and a thread each) through the real
    training loop."""

    def run_workers(self, model_fns, max_steps, kinds=(collective.CollectiveWorker,) * 2):
        """Each worker's TrainResult, or the exception that ended its run (worker `task` of
        class kinds[task])."""
        hosts = [f"127.0.0.1:{port}" for port in local_cluster.free_ports(2)]
        train_dir = testing_utils.temp_dir("collective_loop")
        outcomes = [None, None]
        lines = [[], []]

        def run(task):
            settings = cluster_lib.cluster_settings("worker", task, [], hosts,
                                                    startup_timeout_secs=60,
                                                    step_timeout_secs=60)
            config = testing_utils.cpu_session_config(2)
            try:
                worker = kinds[task](settings, config, log=lines[task].append)
                outcomes[task] = session_loop.run_training(
                    functools.partial(testing_utils.build_small_train_graph,
                                      make_model_fn=lambda decay: model_fns[task],
                                      all_reduce=all_reduce.AllReduceSpec(
                                          all_reduce.RING, 2, num_workers=2)),
                    config, settings_lib.LoopSettings(
                        train_dir=train_dir, max_steps=max_steps,
                        save_summaries_steps=0, save_checkpoint_steps=0),
                    log=lines[task].append, worker=worker)
            except Exception as error:  # pylint: disable=broad-except
                outcomes[task] = error
        threads = [threading.Thread(target=run, args=(task,)) for task in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        self.assertFalse(any(thread.is_alive() for thread in threads), lines)
        return outcomes, lines, train_dir

    def test_both_workers_train_to_the_end_and_the_chief_saves(self):
        model_fn = testing_utils.small_conv_model_fn()
        (chief, other), lines, train_dir = self.run_workers([model_fn, model_fn], 3)
        self.assertIsInstance(chief, session_loop.TrainResult, lines)
        self.assertIsInstance(other, session_loop.TrainResult, lines)
        self.assertEqual((chief.step, other.step), (3, 3))
        self.assertEqual(chief.checkpoint, RunDirectory(train_dir).newest())
        # The two workers' mean losses differ (each its own batches) but both are finite.
        self.assertTrue(np.isfinite(chief.last_mean_loss) and np.isfinite(other.last_mean_loss))

    def test_a_worker_that_wants_to_stop_stops_both_after_the_next_step(self):
        model_fn = testing_utils.small_conv_model_fn()
        (chief, other), lines, train_dir = self.run_workers(
            [model_fn, model_fn], 100, kinds=(collective.CollectiveWorker, WantsToStopAtStep2))
        self.assertIsInstance(chief, session_loop.TrainResult, lines)
        self.assertIsInstance(other, session_loop.TrainResult, lines)
        self.assertEqual((chief.step, other.step), (3, 3))
        self.assertTrue(chief.stopped_by_peer)
        self.assertFalse(chief.stopped_early)  # a signal is not early stopping
        self.assertEqual(chief.peer_signal, signal.SIGTERM)
        self.assertFalse(other.stopped_by_peer)
        self.assertEqual(chief.checkpoint, f"{train_dir}/model.ckpt-3")

    def test_the_chiefs_early_stopping_ends_the_other_worker_as_early_stopping(self):
        model_fn = testing_utils.small_conv_model_fn()
        (chief, other), lines, _ = self.run_workers(
            [model_fn, model_fn], 100, kinds=(StopsEarlyAtStep2, collective.CollectiveWorker))
        self.assertIsInstance(other, session_loop.TrainResult, lines)
        self.assertEqual((chief.step, other.step), (3, 3))
        self.assertTrue(other.stopped_by_peer)
        self.assertTrue(other.stopped_early)

    def test_a_nan_on_one_worker_stops_both_at_that_step(self):
        plain = testing_utils.small_conv_model_fn()
        poisoned = faults.poisoned_on_tower_1_at_step(1)
        (chief, other), lines, _ = self.run_workers([plain, poisoned], 5)
        self.assertIsInstance(other, guards.DivergenceError, lines)
        self.assertIsInstance(chief, guards.DivergenceError, lines)
        self.assertEqual((chief.step, other.step), (2, 2))
        self.assertIn("in tower_1", str(other))
        self.assertIn("loss is not finite at step 2 on another worker of the cluster (1 "
                      "tower(s); see its log)", str(chief))


def collective_cluster(train_dir, max_steps, extra_flags=(), num_towers=2):
    """Two workers of `num_towers` towers and no parameter server on 127.0.0.1."""
    return local_cluster.LocalCluster(DATA.path, train_dir, max_steps, num_ps=0,
                                      extra_flags=extra_flags, num_towers=num_towers)


class CollectiveClusterRunTest(unittest.TestCase):

    def test_a_killed_worker_stops_the_other_with_one_line(self):
        """One tower per worker and no validation: what is tested is how the tasks stop."""
        train_dir = testing_utils.temp_dir("collective_killed")
        with collective_cluster(train_dir, max_steps=100_000,
                                extra_flags=local_cluster.NO_VALIDATION, num_towers=1) as cluster:
            cluster.wait_for_output("worker0", r": step 2, loss", RUN_TIMEOUT_SECS)
            cluster.kill("worker1")
            killed_at = time.time()
            code = cluster.wait("worker0", LOST_WORKER_BOUND_SECS)
            elapsed = time.time() - killed_at
            output = cluster.output("worker0")
        self.assertLess(elapsed, LOST_WORKER_BOUND_SECS)
        self.assertEqual(code, RESTART_EXIT_CODE, output)
        self.assertNotIn("Traceback", output)
        self.assertEqual(len(error_lines(output)), 1, output)
        worker1 = re.escape(cluster.addresses["worker1"])
        self.assertRegex(error_lines(output)[0],
                         f"worker 0 after step \\d+: lost contact with the cluster .*"
                         f"not answering now: worker 1 at {worker1}.*Stop every task")


if __name__ == "__main__":
    absltest.main()
