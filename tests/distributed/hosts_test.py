"""What crosses machines, on hosts of a lab (tests/lab.py: each its own address and its own
localhost on one bridge): the lab itself; the tf.data service with its dispatcher and its
worker on two hosts feeding a 2-worker all-reduce cluster on two more; a partition of a
2-worker all-reduce cluster, survived as a blip, ended as a cut, and restarted exactly."""

import re
import subprocess
import sys
import time
import unittest

import tensorflow as tf
from absl.testing import absltest

from inception.run.directory import RunDirectory
from tests import lab as lab_lib
from tests import testing_utils
from tests.distributed import local_cluster
from tests.distributed.local_cluster import error_lines
from tests.distributed.local_cluster import RESTART_EXIT_CODE
from tests.distributed.local_cluster import RUN_TIMEOUT_SECS
from tests.distributed.local_cluster import step_lines

DATA = testing_utils.DemoData(train=24, validation=10)
SERVICE_PORT = 5050
SEEDED = ("--seed=1", "--deterministic")
# Shorter than the step watch's span of failed probes (loop/liveness.py: 10 s, then 3 probes
# 10 s apart), so training goes on; TCP's retransmissions resume the step within seconds.
BLIP_SECS = 5
# What a partition may take to end every task with the default timeouts: the step watch's
# 30-40 s, a busy machine's margin on top.
PARTITION_BOUND_SECS = 150
# A host that answers within this long answers; a cut one does not.
CONNECT_TIMEOUT_SECS = 3
ECHO_SERVER = ("import socket\n"
               "server = socket.create_server(('0.0.0.0', 7000))\n"
               "while True:\n"
               "    connection, _ = server.accept()\n"
               "    connection.sendall(b'hello')\n"
               "    connection.close()\n")


def reach(lab, host, address):
    """What `host` reads from a connection to `address` (host, port), or the error's name."""
    script = ("import socket, sys\n"
              "try:\n"
              f"    with socket.create_connection({address!r}, timeout={CONNECT_TIMEOUT_SECS}) "
              "as c:\n"
              "        print(c.recv(64).decode() or 'connected')\n"
              "except OSError as error:\n"
              "    print(type(error).__name__)\n")
    done = subprocess.run(lab.command(host, [sys.executable, "-c", script]), capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout.strip()


class LabTest(unittest.TestCase):

    def setUp(self):
        lab_lib.skip_without_lab(self)

    def test_hosts_reach_each_other_have_their_own_localhost_and_can_be_cut_off(self):
        with lab_lib.Lab(2) as lab:
            server = subprocess.Popen(lab.command(2, [sys.executable, "-c", ECHO_SERVER]))
            self.addCleanup(server.kill)
            there = (lab.address(2), 7000)
            for _ in range(50):  # until the server listens
                if reach(lab, 1, there) != "ConnectionRefusedError":
                    break
            self.assertEqual(reach(lab, 1, there), "hello")
            # Host 1's localhost is its own: nothing listens on its port 7000.
            self.assertEqual(reach(lab, 1, ("127.0.0.1", 7000)), "ConnectionRefusedError")
            lab.cut(2)  # a partition: no answer at all, not a refusal
            self.assertIn(reach(lab, 1, there), ("TimeoutError", "timeout"))
            lab.mend(2)
            self.assertEqual(reach(lab, 1, there), "hello")


class InputServiceAcrossHostsTest(unittest.TestCase):

    def setUp(self):
        lab_lib.skip_without_lab(self)

    def test_a_service_on_two_hosts_feeds_a_cluster_on_two_others(self):
        """Trainers on hosts 1 and 2 (all-reduce, one tower each), the dispatcher on host 3, its
        one worker on host 4 (registered by default under the address host 4 reaches host 3
        from: TensorFlow's default, localhost, sent each trainer to its own machine, where
        they waited for ever). Each step consumes both trainers' batches of 4: the input
        position, from which the schedule counts epochs, advances by 8."""
        steps, batch = 4, 4
        train_dir = testing_utils.temp_dir("hosts_service")
        with lab_lib.Lab(4) as lab:
            dispatcher = f"{lab.address(3)}:{SERVICE_PORT}"
            cluster = local_cluster.LocalCluster(
                DATA.path, train_dir, steps, num_ps=0, num_towers=1, lab=lab,
                extra_flags=(f"--input_service=grpc://{dispatcher}",
                             *local_cluster.NO_VALIDATION))
            cluster.start("dispatcher", "inception.input_service",
                          [f"--port={SERVICE_PORT}", "--num_workers=0"], host=3)
            cluster.start("service_worker", "inception.input_service",
                          [f"--dispatcher={dispatcher}", "--num_workers=1"], host=4)
            with cluster:  # the trainers, once the service has its worker
                cluster.wait_for_output("dispatcher", r"^1 worker\(s\) registered",
                                        RUN_TIMEOUT_SECS)
                trainers = cluster.wait_all(["worker0", "worker1"], RUN_TIMEOUT_SECS)
                outputs = {name: cluster.output(name) for name in cluster.processes}
        self.assertEqual(trainers, {"worker0": 0, "worker1": 0}, outputs)
        self.assertRegex(outputs["service_worker"],
                         rf"registering with the dispatcher at {dispatcher} as "
                         rf"{lab.address(4)} \(the address this machine reaches the dispatcher")
        for name in ("worker0", "worker1"):
            self.assertEqual(error_lines(outputs[name]), [], outputs[name])
            self.assertEqual([step for step, _ in step_lines(outputs[name])],
                             list(range(1, steps + 1)), outputs[name])
        reader = tf.train.load_checkpoint(RunDirectory(train_dir).newest())
        self.assertEqual(int(reader.get_tensor("global_step")), steps)
        self.assertEqual(int(reader.get_tensor("input_position")), steps * 2 * batch)


class PartitionTest(unittest.TestCase):

    def setUp(self):
        lab_lib.skip_without_lab(self)

    def test_a_blip_is_survived_a_partition_ends_both_workers_and_the_restart_is_exact(self):
        """A 2-worker all-reduce cluster (one tower each, seeded, a checkpoint every 2 steps)
        with the default step timeout (600 s): worker 1's host cut off for 5 s, which training
        survives; then cut off for good: both workers end with the restart code within 150 s,
        each naming the other; mended and started again, the run ends with the bits of a run
        never cut."""
        flags = SEEDED + local_cluster.NO_VALIDATION + ("--save_checkpoint_steps=2",
                                                        "--step_timeout_secs=600")
        train_dir = testing_utils.temp_dir("hosts_partition")
        with lab_lib.Lab(2) as lab, local_cluster.LocalCluster(
                DATA.path, train_dir, 100_000, num_ps=0, num_towers=1, lab=lab,
                extra_flags=flags) as cluster:
            cluster.wait_for_output("worker1", r": step 2, loss", RUN_TIMEOUT_SECS)
            lab.cut(cluster.hosts["worker1"])
            time.sleep(BLIP_SECS)
            lab.mend(cluster.hosts["worker1"])
            before = len(step_lines(cluster.output("worker1")))
            cluster.wait_for_output("worker1", rf": step {before + 2}, loss", RUN_TIMEOUT_SECS)
            lab.cut(cluster.hosts["worker1"])
            cut_at = time.monotonic()
            codes = {name: cluster.wait(name, PARTITION_BOUND_SECS) for name in cluster.processes}
            ended = time.monotonic() - cut_at
            outputs = {name: cluster.output(name) for name in cluster.processes}
        self.assertEqual(codes, {"worker0": RESTART_EXIT_CODE, "worker1": RESTART_EXIT_CODE},
                         outputs)
        print(f"the partition ended every task {ended:.1f} s after the cut")
        self.assertLess(ended, PARTITION_BOUND_SECS)
        for name, other in (("worker0", "worker1"), ("worker1", "worker0")):
            self.assertNotIn("Traceback", outputs[name])
            self.assertEqual(len(error_lines(outputs[name])), 1, outputs[name])
            self.assertRegex(error_lines(outputs[name])[0],
                             rf"lost contact with the cluster \(not answering now: worker "
                             rf"{other[-1]} at {re.escape(cluster.addresses[other])}\)")
        resume_at = int(tf.train.load_checkpoint(RunDirectory(train_dir).newest())
                        .get_tensor("global_step"))
        last = resume_at + 2
        with lab_lib.Lab(2) as lab, local_cluster.LocalCluster(
                DATA.path, train_dir, last, num_ps=0, num_towers=1, lab=lab,
                extra_flags=flags) as cluster:
            codes = cluster.wait_all(list(cluster.processes), RUN_TIMEOUT_SECS)
            resumed = cluster.output("worker0")
        self.assertEqual(codes, {"worker0": 0, "worker1": 0}, resumed)
        self.assertIn(f"(step {resume_at})", resumed)
        straight_dir = testing_utils.temp_dir("hosts_straight")
        with local_cluster.LocalCluster(DATA.path, straight_dir, last, num_ps=0, num_towers=1,
                                        extra_flags=flags) as cluster:
            codes = cluster.wait_all(list(cluster.processes), RUN_TIMEOUT_SECS)
        self.assertEqual(codes, {"worker0": 0, "worker1": 0})
        local_cluster.assert_same_checkpoints(self, train_dir, straight_dir)


if __name__ == "__main__":
    absltest.main()
