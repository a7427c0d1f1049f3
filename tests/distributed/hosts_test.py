"""What crosses machines, on hosts of a lab (tests/lab.py: each its own address and its own
localhost on one bridge): the lab itself; the tf.data service with its dispatcher and its
worker on two hosts feeding a 2-worker all-reduce cluster on two more; a 2-worker all-reduce
cluster stopped by a signal, cut off by a blip and by a partition, and resumed to the bits of
a run never stopped. A parameter-server cluster on such hosts: distributed_test."""

import subprocess
import sys
import unittest

import tensorflow as tf
from absl.testing import absltest

from inception.parallel import copies as copies_lib
from inception.run.directory import RunDirectory
from tests import lab as lab_lib
from tests import testing_utils
from tests.distributed import local_cluster
from tests.distributed.local_cluster import error_lines
from tests.distributed.local_cluster import RESTART_EXIT_CODE
from tests.distributed.local_cluster import RUN_TIMEOUT_SECS
from tests.distributed.local_cluster import step_lines

DATA = testing_utils.DemoData(train=24, validation=10)
SEEDED = ("--seed=1", "--deterministic")  # runs that repeat themselves bit for bit
LEAN_SEEDED = SEEDED + local_cluster.NO_VALIDATION
SERVICE_PORT = 5050
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


def collective_cluster(train_dir, max_steps, extra_flags=(), lab=None):
    """Two workers of one tower and no parameter server, each on a host of `lab` (or on
    127.0.0.1). One tower: each tower graph costs a task about 10 s of CPU at every start, and
    several towers per worker are collective_test's."""
    return local_cluster.LocalCluster(DATA.path, train_dir, max_steps, num_ps=0,
                                      extra_flags=extra_flags, num_towers=1, lab=lab)


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


class AllReduceAcrossHostsTest(unittest.TestCase):
    """A 2-worker all-reduce cluster, each worker on a host of its own."""

    def test_a_signal_a_blip_and_a_partition_then_a_resume_are_the_run_never_stopped(self):
        """Each worker on a host of its own (tests/lab.py): stopped by a SIGTERM; resumed,
        worker 1's host cut off for a few seconds (survived), then for good (both end with the
        restart code, in time, worker 1 naming worker 0); resumed again to the end. The
        stopped and resumed cluster train without validation; the run never stopped validates
        at its end as the demo does by default, which changes no variable."""
        lab_lib.skip_without_lab(self)
        with lab_lib.Lab(2) as lab:
            self.stop_cut_and_resume(lab)

    def stop_cut_and_resume(self, lab):
        """The test above on `lab`'s hosts."""
        train_dir = testing_utils.temp_dir("collective_train")
        with collective_cluster(train_dir, max_steps=100_000, extra_flags=LEAN_SEEDED,
                                lab=lab) as cluster:
            codes, outputs = local_cluster.stop_worker_1_by_signal(cluster, RUN_TIMEOUT_SECS)
        self.assertEqual(codes, {"worker0": RESTART_EXIT_CODE, "worker1": RESTART_EXIT_CODE},
                         outputs)
        self.assertIn("sent the model to the other worker(s)", outputs["worker0"])
        self.assertIn("all-reduce over the collective ring across 2 workers", outputs["worker0"])
        step, saved = local_cluster.chief_saved_after_peer_stop(self, outputs["worker0"],
                                                                train_dir)
        # Both ran every step to the one the chief saved: the signalled worker logged its
        # last, the chief learnt from it that the others stop (and logs no line for it).
        self.assertEqual([number for number, _ in step_lines(outputs["worker1"])],
                         list(range(1, step + 1)), outputs["worker1"])
        self.assertEqual([number for number, _ in step_lines(outputs["worker0"])],
                         list(range(1, step)), outputs["worker0"])
        names = tf.train.load_checkpoint(saved).get_variable_to_dtype_map()
        self.assertFalse([name for name in names if name.startswith(copies_lib.COPY_PREFIX)])

        with collective_cluster(train_dir, max_steps=100_000, lab=lab,
                                extra_flags=LEAN_SEEDED + local_cluster.DEFAULT_STEP_TIMEOUT,
                                ) as cluster:
            codes, outputs, _ = local_cluster.survive_a_blip_then_cut_off(cluster, "worker1")
        local_cluster.check_partition_ended(self, cluster, "worker1", codes, outputs)
        self.assertIn(f"worker 0 at {cluster.addresses['worker0']}", error_lines(
            outputs["worker1"])[0])
        self.assertEqual(RunDirectory(train_dir).newest(), saved)  # nothing saved since
        lab.mend(cluster.hosts["worker1"])

        with collective_cluster(train_dir, max_steps=step + 2, extra_flags=LEAN_SEEDED,
                                lab=lab) as cluster:
            codes = cluster.wait_all(list(cluster.processes), RUN_TIMEOUT_SECS)
            outputs = {name: cluster.output(name) for name in cluster.processes}
        self.assertEqual(codes, {"worker0": 0, "worker1": 0}, outputs)
        self.assertIn(f"resumed from {saved} (step {step})", outputs["worker0"])
        for name, output in outputs.items():
            self.assertNotIn("Traceback", output, name)
            self.assertEqual(error_lines(output), [], name)
            self.assertEqual([number for number, _ in step_lines(output)],
                             [step + 1, step + 2], output)
        latest = RunDirectory(train_dir).newest()
        self.assertEqual(int(tf.train.load_checkpoint(latest).get_tensor("global_step")),
                         step + 2)
        # The stopped and resumed cluster wrote what a cluster never stopped writes.
        straight_dir = testing_utils.temp_dir("collective_straight")
        with collective_cluster(straight_dir, max_steps=step + 2, extra_flags=SEEDED) as cluster:
            codes = cluster.wait_all(list(cluster.processes), RUN_TIMEOUT_SECS)
        self.assertEqual(codes, {"worker0": 0, "worker1": 0})
        local_cluster.assert_same_checkpoints(self, train_dir, straight_dir)


if __name__ == "__main__":
    absltest.main()
