"""A cluster that goes on with fewer workers and then more (2 -> 1 -> 2) against a straight
2-worker run, each cluster's workers in threads of this process (a server each, the real
launch.train), sharing one --train_dir as workers on shared storage do. tf-slim keeps its
argument scopes in one list per process, so the workers build their graphs one at a time.

The one worker left takes twice the micro-batches (config/update_shape.py): every update
averages the same examples, each tower's slice holds the same records (inputs/shares.py) and
draws the same dropout masks (towers numbered among every worker's), so the forward passes are
the same: the first step after the change computes the straight run's tower losses exactly.
The gradients differ only in the order in which they are summed (two micro-batches added on
one worker against a ring over 2), and a sum of two terms is the same float in either order:
the resized run ends bit for bit as the straight one. With more terms the order does change
the bits (4 -> 2 -> 4 workers ended 0.04% away in the weights: docs/cluster.md).
"""

import re
import shutil
import threading
import unittest
from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import cluster as cluster_lib
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from tests import testing_utils
from tests.distributed import local_cluster

TINY = dict(dataset="demo", **testing_utils.tiny_model(aux_head=True), batch_size=2, num_towers=1,
            seed=1, deterministic=True, eval_every_n_steps=0, log_every_n_steps=1,
            save_checkpoint_steps=1, save_summaries_steps=1)
DATA = testing_utils.DemoData(train=24, validation=10)


def setUpModule():
    tf.config.experimental.enable_op_determinism()  # once, for every thread's run


_BUILDING = threading.Lock()
_GRAPH_BUILDER = launch.graph_builder


def one_graph_at_a_time(*args, **kwargs):
    """launch.graph_builder whose graphs are built one at a time in this process."""
    build = _GRAPH_BUILDER(*args, **kwargs)

    def build_graph():
        with _BUILDING:
            return build()
    return build_graph


@mock.patch.object(launch, "graph_builder", one_graph_at_a_time)
def train_cluster(train_dir, num_workers, max_steps):
    """Trains `num_workers` workers (a thread each) to `max_steps`; returns their log lines."""
    hosts = [f"127.0.0.1:{port}" for port in local_cluster.free_ports(num_workers)]
    lines = [[] for _ in range(num_workers)]
    failures = []

    def work(task):
        cluster = cluster_lib.cluster_settings("worker", task, [], hosts,
                                               startup_timeout_secs=240, step_timeout_secs=240)
        try:
            launch.train(settings_lib.train_settings(
                train_dir=train_dir, data_dir=DATA.path, max_steps=max_steps, cluster=cluster,
                **TINY), log=lines[task].append)
        except Exception as error:  # pylint: disable=broad-except
            failures.append((task, error))
    threads = [threading.Thread(target=work, args=(task,)) for task in range(num_workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    if failures or any(thread.is_alive() for thread in threads):
        raise AssertionError(f"{failures}\n" + "\n".join(lines[0][-20:]))
    return lines


def checkpoint_values(train_dir, step=None):
    """{name: value} of the newest checkpoint of `train_dir`, or of the one of `step`."""
    directory = RunDirectory(train_dir)
    reader = tf.train.load_checkpoint(directory.newest() if step is None else
                                      directory.prefix(step))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_dtype_map()}


def stopped_at(train_dir, step):
    """A new run directory holding `train_dir`'s settings and its checkpoint of `step` alone."""
    copy = testing_utils.temp_dir("resize_4_2_4")
    source = RunDirectory(train_dir)
    for path in tf.io.gfile.glob(source.prefix(step) + ".*") + [source.file(SETTINGS_FILE)]:
        shutil.copy(path, copy)
    RunDirectory(copy).rewrite_state([RunDirectory(copy).prefix(step)])
    return copy


def logged_losses(lines, step):
    """The loss each worker logged at `step` ([one per worker])."""
    return [float(re.search(rf": step {step}, loss = ([\d.]+)", "\n".join(worker)).group(1))
            for worker in lines]


class ResizeTest(unittest.TestCase):

    def test_two_then_one_then_two_workers_train_as_two_all_along(self):
        straight = testing_utils.temp_dir("resize_straight")
        two_all_along = train_cluster(straight, 2, 3)
        # The 2-worker cluster stopped after step 1 is the straight run's step 1 (a restart of
        # the same cluster is bit for bit the run never stopped: collective_test).
        resized = stopped_at(straight, 1)
        one = train_cluster(resized, 1, 2)
        self.assertIn("the cluster changed since the last checkpoint: 2 worker(s) x 1 "
                      "tower(s), batch 2 per worker x 1 micro-batch(es) = 4 -> 1 worker(s) x 1 "
                      "tower(s), batch 2 per worker x 2 micro-batch(es) = 4", "\n".join(one[0]))
        self.assertIn("(--accumulate_steps=2)", "\n".join(one[0]))
        # Its first step computes each tower of the straight run's step 2 on the same records
        # with the same dropout masks: the worker's two micro-batches are the straight run's
        # workers 0 and 1. Summaries hold float32 and the loss terms are added by threads in
        # the order they end, so two runs may differ in the last bit (seen: 2.7945535 against
        # 2.7945538); log lines round to 4 decimals.
        scalars, straight_scalars = (testing_utils.read_scalars(path)
                                     for path in (resized, straight))
        straight_loss = dict(straight_scalars["loss/tower_0/total_loss"])[2]
        self.assertAlmostEqual(dict(scalars["loss/tower_0/total_loss"])[2], straight_loss,
                               delta=1e-6 * straight_loss)
        self.assertAlmostEqual(dict(scalars["loss/tower_1/total_loss"])[2],
                               logged_losses(two_all_along, 2)[1], delta=5e-5)

        two = train_cluster(resized, 2, 3)
        self.assertIn("2 micro-batch(es) = 4 -> 2 worker(s)", "\n".join(two[0]))
        want, got = checkpoint_values(straight), checkpoint_values(resized)
        self.assertEqual(sorted(got), sorted(want))
        self.assertEqual(int(got["global_step"]), 3)
        self.assertEqual(int(got["input_position"]), int(want["input_position"]))
        self.assertEqual(int(got["input_position"]), 3 * 4)
        differ = [name for name in want if not np.array_equal(got[name], want[name])]
        self.assertEqual(differ, [], f"{len(differ)} of {len(want)} tensors differ")
        self.assertTrue(all(np.all(np.isfinite(value)) for value in got.values()
                            if value.dtype.kind == "f"))


if __name__ == "__main__":
    absltest.main()
