"""Training on a cluster of one parameter server and two workers, as subprocesses of the real
entry point (local_cluster.py): on hosts of their own, a worker stopped by a signal, then a
partition of the network, each followed by a resume that ends as a plain run; on 127.0.0.1, a
worker killed mid-run and one stopped early by the chief's validation."""

import json
import os
import re
import subprocess
import sys
import time
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import cluster as cluster_lib
from inception.config import plans
from inception.config import settings as settings_lib
from inception.distributed import worker as worker_lib
from inception.driver import launch
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from tests import lab as lab_lib
from tests import testing_utils
from tests.distributed import local_cluster
from tests.distributed.local_cluster import error_lines
from tests.distributed.local_cluster import RESTART_EXIT_CODE
from tests.distributed.local_cluster import RUN_TIMEOUT_SECS
from tests.distributed.local_cluster import step_lines

tf1 = tf.compat.v1

# A parameter server notices a lost worker within PROBE_INTERVAL_SECS * PROBE_FAILURES (plus
# its probes' time); the other tasks' calls to it then fail at once.
LOST_WORKER_BOUND_SECS = 45
SEEDED = ("--seed=1", "--deterministic")  # runs that repeat themselves bit for bit
DATA = testing_utils.DemoData(train=24, validation=10)


# pylint: disable-next=invalid-name
def LocalCluster(train_dir, max_steps, extra_flags=(), num_towers=1, lab=None):
    """The cluster of these tests: one parameter server and two workers of `num_towers`
    towers (one: each tower graph costs a task about 10 s of CPU at every start), on 127.0.0.1
    or each on a host of `lab`."""
    return local_cluster.LocalCluster(DATA.path, train_dir, max_steps, num_ps=1,
                                      extra_flags=extra_flags, num_towers=num_towers, lab=lab)


def assert_plain_run(test, codes, outputs, train_dir, last_step, num_towers):
    """Checks with `test` a run of `num_towers` towers per worker that trained from scratch to
    `last_step` and ended: every task exited 0 without an error, each synchronous update took
    one gradient from each worker, and its checkpoint and summaries are complete."""
    test.assertEqual(codes, {"ps0": 0, "worker0": 0, "worker1": 0}, outputs)
    for name, output in outputs.items():
        test.assertNotIn("Traceback", output, name)
        test.assertEqual(error_lines(output), [], name)
    # One gradient from each worker per update: each worker took part in every synchronous
    # step, and saw the global step advance by one each time.
    steps = list(range(1, last_step + 1))
    for worker in ("worker0", "worker1"):
        test.assertEqual([step for step, _ in step_lines(outputs[worker])], steps,
                         outputs[worker])
    test.assertIn("each update averages the gradients of 2 worker(s)", outputs["worker0"])
    test.assertIn("all 2 worker(s) are done", outputs["ps0"])

    latest = RunDirectory(train_dir).newest()
    test.assertEqual(latest, os.path.join(train_dir, f"model.ckpt-{last_step}"))
    reader = tf.train.load_checkpoint(latest)
    test.assertEqual(int(reader.get_tensor("global_step")), last_step)
    names = reader.get_variable_to_dtype_map()
    weights = "InceptionV3/Logits/Conv2d_1c_1x1/weights"
    for name in (weights, f"{weights}/ExponentialMovingAverage", f"{weights}/RMSProp"):
        test.assertIn(name, names)
    for name, dtype in names.items():
        if dtype.is_floating:
            test.assertTrue(np.all(np.isfinite(reader.get_tensor(name))), name)

    scalars = testing_utils.read_scalars(train_dir)
    test.assertEqual([step for step, _ in scalars["loss/mean_loss"]], steps)
    for step, mean_loss in scalars["loss/mean_loss"]:
        towers = [dict(scalars[f"loss/tower_{i}/total_loss"])[step] for i in range(num_towers)]
        # Summaries store float32 (7 digits) of losses near 1.5: 4 places is their rounding.
        test.assertAlmostEqual(mean_loss, sum(towers) / num_towers, places=4)
    with open(os.path.join(train_dir, SETTINGS_FILE), encoding="utf-8") as f:
        test.assertEqual(json.load(f)["image_size"], 107)


class ClusterRunTest(unittest.TestCase):

    def test_a_signal_and_a_partition_stop_every_task_and_the_resumed_run_is_a_plain_run(self):
        """Each task on a host of its own (tests/lab.py): a cluster stopped by a SIGTERM to a
        worker; the same resumed, worker 1's host cut off for a few seconds (survived), then
        for good (every task ends with the restart code, in time); the same resumed for two
        more steps; and a plain run of as many steps from scratch, with the demo's default
        validation and two towers per worker, which assert_plain_run checks as a run from
        start to end (the tests' one such run of a parameter-server cluster)."""
        lab_lib.skip_without_lab(self)
        with lab_lib.Lab(3) as lab:
            self.stop_cut_and_resume(lab)

    def stop_cut_and_resume(self, lab):
        """The test above on `lab`'s hosts."""
        train_dir = testing_utils.temp_dir("cluster_signal")
        stopped_flags = SEEDED + local_cluster.NO_VALIDATION
        with LocalCluster(train_dir, max_steps=100_000, extra_flags=stopped_flags,
                          lab=lab) as cluster:
            codes, outputs = local_cluster.stop_worker_1_by_signal(cluster,
                                                                   LOST_WORKER_BOUND_SECS)
        # A preemption: every task exits with the restart code, the parameter server too.
        self.assertEqual(codes, {"ps0": RESTART_EXIT_CODE, "worker0": RESTART_EXIT_CODE,
                                 "worker1": RESTART_EXIT_CODE}, outputs)
        self.assertIn("stopped by SIGTERM", outputs["worker1"])
        step, _ = local_cluster.chief_saved_after_peer_stop(self, outputs["worker0"], train_dir)
        self.assertEqual(step_lines(outputs["worker1"])[-1][0], step)

        with LocalCluster(train_dir, max_steps=100_000, lab=lab,
                          extra_flags=stopped_flags + local_cluster.DEFAULT_STEP_TIMEOUT,
                          ) as cluster:
            codes, outputs, _ = local_cluster.survive_a_blip_then_cut_off(cluster, "worker1")
        local_cluster.check_partition_ended(self, cluster, "worker1", codes, outputs)
        lab.mend(cluster.hosts["worker1"])

        with LocalCluster(train_dir, max_steps=step + 2, extra_flags=stopped_flags,
                          lab=lab) as cluster:
            codes = cluster.wait_all(list(cluster.processes), RUN_TIMEOUT_SECS)
        self.assertEqual(codes, {"ps0": 0, "worker0": 0, "worker1": 0})
        straight_dir = testing_utils.temp_dir("cluster_straight")
        with LocalCluster(straight_dir, max_steps=step + 2, extra_flags=SEEDED) as cluster:
            codes = cluster.wait_all(list(cluster.processes), RUN_TIMEOUT_SECS)
            outputs = {name: cluster.output(name) for name in cluster.processes}
        assert_plain_run(self, codes, outputs, straight_dir, step + 2, num_towers=1)
        local_cluster.assert_same_checkpoints(self, train_dir, straight_dir)

    def test_a_killed_worker_stops_the_others_with_one_line_errors(self):
        """No validation: what is tested is how the tasks stop."""
        train_dir = testing_utils.temp_dir("cluster_killed")
        with LocalCluster(train_dir, max_steps=100_000,
                          extra_flags=local_cluster.NO_VALIDATION) as cluster:
            cluster.wait_for_output("worker1", r": step 2, loss", RUN_TIMEOUT_SECS)
            cluster.kill("worker1")
            killed_at = time.time()
            codes = cluster.wait_all(["ps0", "worker0"], LOST_WORKER_BOUND_SECS)
            elapsed = time.time() - killed_at
            outputs = {name: cluster.output(name) for name in ("ps0", "worker0")}
        self.assertLess(elapsed, LOST_WORKER_BOUND_SECS)
        worker1 = re.escape(cluster.addresses["worker1"])
        for name, output in outputs.items():
            self.assertEqual(codes[name], RESTART_EXIT_CODE, output)
            self.assertNotIn("Traceback", output, name)
            self.assertEqual(len(error_lines(output)), 1, output)
        self.assertRegex(error_lines(outputs["ps0"])[0],
                         f"worker 1 at {worker1} stopped answering before it finished")
        self.assertRegex(error_lines(outputs["worker0"])[0],
                         f"worker 0 after step \\d+: lost contact with the cluster .*"
                         f"not answering now: .*worker 1 at {worker1}.*Stop every task")

    def test_the_chiefs_early_stopping_ends_every_task_with_status_0(self):
        """Two towers per worker (the tests' one parameter-server cluster of several), checked
        by assert_plain_run as a run from start to its early end."""
        train_dir = testing_utils.temp_dir("cluster_early")
        # A validation every step, and the first one without improvement stops the run.
        early = ("--eval_every_n_steps=1", "--stop_after_evals_without_improvement=1")
        with LocalCluster(train_dir, 100_000, extra_flags=early, num_towers=2) as cluster:
            codes = cluster.wait_all(list(cluster.processes), RUN_TIMEOUT_SECS)
            outputs = {name: cluster.output(name) for name in cluster.processes}
        self.assertIn("the chief's validation stopped the run early", outputs["worker1"])
        last_step = step_lines(outputs["worker0"])[-1][0]
        assert_plain_run(self, codes, outputs, train_dir, last_step, num_towers=2)


class ClusterPlanTest(unittest.TestCase):

    def settings(self):
        return cluster_lib.cluster_settings("worker", 0, ["ps:2222"], ["w0:2222", "w1:2222"])

    def test_multi_stage_plans_are_refused(self):
        options = settings_lib.train_settings(
            train_dir=testing_utils.temp_dir("cluster_plan"), data_dir=DATA.path,
            dataset="demo", eval_every_n_steps=0,
            plan=plans.parse_stages("head:1:InceptionV3/Logits;all"),
            cluster=self.settings())
        with self.assertRaisesRegex(plans.PlanError, "one-stage plans only"):
            launch.train(options, log=lambda line: None)

    def test_command_line_error_is_one_line(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        result = subprocess.run(
            [sys.executable, "-m", "inception.train", "--job_name=worker",
             "--ps_hosts=127.0.0.1:1", "--worker_hosts=127.0.0.1:2",
             "--num_replicas_to_aggregate=2"],
            capture_output=True, text=True, timeout=120, env=env, check=False)
        self.assertEqual(result.returncode, 2, result.stderr[-2000:])
        self.assertEqual(len(error_lines(result.stderr)), 1, result.stderr[-2000:])
        self.assertIn("--num_replicas_to_aggregate=2", result.stderr)


class PinnedInternalsTest(unittest.TestCase):
    """The one private TensorFlow attribute the cluster code reads, pinned."""

    def test_sync_replicas_optimizer_keeps_its_token_queue(self):
        with tf.Graph().as_default():
            weights = tf1.get_variable("w", [2])
            optimizer = tf1.train.SyncReplicasOptimizer(
                tf1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=1,
                total_num_replicas=1)
            optimizer.apply_gradients([(tf.ones([2]), weights)],
                                      global_step=tf1.train.get_or_create_global_step())
            optimizer.ready_for_local_init_op.mark_used()  # for MonitoredSession, unused here
            try:
                queue = worker_lib.sync_token_queue(optimizer)
            except AttributeError:
                self.fail("TensorFlow renamed SyncReplicasOptimizer._sync_token_queue: find the "
                          "token queue's new name in tensorflow/python/training/"
                          "sync_replicas_optimizer.py and update "
                          "inception/distributed/worker.py:sync_token_queue.")
            self.assertIsNotNone(queue.close())


if __name__ == "__main__":
    absltest.main()
