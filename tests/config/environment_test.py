"""Slurm's environment (inside srun) gives the cluster TensorFlow's SlurmClusterResolver reads;
set in this process's environment, as srun sets it."""

import os
import unittest
from unittest import mock

from absl.testing import absltest

from inception.config import cluster as cluster_lib

TWO_NODES = {"SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "gpu[07-08]",
             "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}


def from_slurm(procid, **overrides):
    environment = dict(TWO_NODES, SLURM_PROCID=str(procid), **overrides)
    with mock.patch.dict(os.environ, environment, clear=False):
        os.environ.pop("TF_CONFIG", None)
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        settings = cluster_lib.cluster_settings("", 0, [], [], cluster_port=3000,
                                                environment=dict(os.environ))
        assert os.environ.get("CUDA_VISIBLE_DEVICES") == before, "the resolver chose GPUs"
        return settings


class SlurmTest(unittest.TestCase):

    def test_every_task_of_the_step_is_a_worker_on_its_nodes_ports(self):
        settings = from_slurm(3)
        self.assertEqual(settings.worker_hosts,
                         ("gpu07:3000", "gpu07:3001", "gpu08:3000", "gpu08:3001"))
        self.assertEqual((settings.job_name, settings.task_id), ("worker", 3))
        self.assertTrue(settings.collective)
        self.assertTrue(from_slurm(0).is_chief)

    def test_a_step_of_one_task_trains_alone(self):
        self.assertIsNone(from_slurm(0, SLURM_STEP_NUM_TASKS="1", SLURM_STEP_NODELIST="gpu07",
                                     SLURM_STEP_TASKS_PER_NODE="1"))

    def test_a_step_whose_tasks_do_not_add_up_is_one_line(self):
        with self.assertRaisesRegex(cluster_lib.ClusterConfigError,
                                    "cannot read the Slurm step's tasks"):
            from_slurm(0, SLURM_STEP_TASKS_PER_NODE="1")


if __name__ == "__main__":
    absltest.main()
