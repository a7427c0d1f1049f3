"""deploy/slurm/train.sbatch as shipped, run by a real Slurm (tests/slurm_lab.py) on two hosts
of a lab (tests/lab.py): a 2-node all-reduce job preempted by `scancel --signal=TERM`, whose
restart loop starts the step again, and which ends with the bits of a run never preempted."""

import os
import re
import sys
import time
import unittest

import tensorflow as tf
from absl.testing import absltest

from inception.run.directory import RunDirectory
from tests import lab as lab_lib
from tests import slurm_lab
from tests import testing_utils
from tests.distributed import local_cluster

# The checkout this file lies in (through Bazel's runfiles links): the job runs from it, as the
# script asks, and starts the trainer with its bin/inception.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
SCRIPT = os.path.join(CHECKOUT, "deploy", "slurm", "train.sbatch")
DATA = testing_utils.DemoData(train=24, validation=10)
STEPS = 20
TRAIN_FLAGS = ("--dataset=demo", *testing_utils.tiny_flags(aux_head=True), "--num_gpus=1",
               "--batch_size=4", f"--max_steps={STEPS}", "--seed=1", "--deterministic",
               "--eval_every_n_steps=0", "--log_every_n_steps=1")
JOB_TIMEOUT_SECS = local_cluster.RUN_TIMEOUT_SECS * 2  # two starts of the cluster


class SlurmScriptTest(unittest.TestCase):

    def setUp(self):
        lab_lib.skip_without_lab(self)
        slurm_lab.ensure_installed()
        reason = slurm_lab.unavailable_reason()
        if reason is not None:
            if os.environ.get("CI") == "true":
                self.fail(f"Slurm must run in CI, but {reason}")
            self.skipTest(reason)

    def test_a_preempted_job_restarts_and_ends_as_one_never_preempted(self):
        train_dir = testing_utils.temp_dir("slurm_run")
        job_dir = testing_utils.temp_dir("slurm_job")
        with lab_lib.Lab(2) as lab, slurm_lab.SlurmLab(lab) as slurm:
            job, output = self.submit(slurm, train_dir, job_dir)
            wait_for(lambda: re.search(r": step 2, loss", read(output)), output)
            slurm.run(["scancel", "--signal=TERM", job])
            wait_for(lambda: "JobState=COMPLETED" in slurm.run(["scontrol", "show", "job", job])
                     or "JobState=FAILED" in slurm.run(["scontrol", "show", "job", job]),
                     output, JOB_TIMEOUT_SECS)
            state = slurm.run(["scontrol", "show", "job", job])
        log = read(output)
        self.assertIn("JobState=COMPLETED", state, log[-4000:])
        self.assertIn("ExitCode=0:0", state)
        self.assertEqual(log.count("a task was preempted or lost: starting every task again"), 1,
                         log[-4000:])
        self.assertEqual(len(re.findall(r"stopped by SIGTERM at step \d+", log)), 2, log[-4000:])
        self.assertEqual(int(tf.train.load_checkpoint(RunDirectory(train_dir).newest())
                             .get_tensor("global_step")), STEPS)
        straight_dir = testing_utils.temp_dir("slurm_straight")
        with local_cluster.LocalCluster(DATA.path, straight_dir, STEPS, num_ps=0, num_towers=1,
                                        extra_flags=TRAIN_FLAGS) as cluster:
            codes = cluster.wait_all(list(cluster.processes), local_cluster.RUN_TIMEOUT_SECS)
        self.assertEqual(codes, {"worker0": 0, "worker1": 0})
        local_cluster.assert_same_checkpoints(self, train_dir, straight_dir)

    def submit(self, slurm, train_dir, job_dir):
        """Submits the script as shipped to 2 nodes from the checkout, its trainer started by
        bin/inception in this process's Python environment; returns (the job's id, the path
        of its output, in `job_dir`)."""
        output = os.path.join(job_dir, "job.out")
        env = slurm.env()
        env.pop("INCEPTION_TRAIN", None)
        env.update(INCEPTION_VENV=sys.prefix, TF_CPP_MIN_LOG_LEVEL="2")
        submitted = slurm.run(
            ["sbatch", "--nodes=2", "--gpus-per-node=0", f"--output={output}",
             f"--chdir={CHECKOUT}", SCRIPT, f"--data_dir={DATA.path}", f"--train_dir={train_dir}",
             *TRAIN_FLAGS], env=env)
        return re.search(r"Submitted batch job (\d+)", submitted).group(1), output


def read(path):
    """The text of `path` so far ('' before it exists)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def wait_for(condition, output, timeout=local_cluster.RUN_TIMEOUT_SECS):
    """Waits until `condition()` holds; fails with the end of the job's `output` after
    `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout} s; the job's output:\n"
                                 f"{read(output)[-4000:]}")
        time.sleep(0.5)


if __name__ == "__main__":
    absltest.main()
