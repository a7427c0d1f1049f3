"""The probes that name the tasks of a cluster that no longer answer."""

import socket
import threading
import time

from absl.testing import absltest

import tensorflow as tf

from inception.config.cluster import ClusterSettings
from inception.distributed import connections
from inception.distributed import member


def _listening_socket():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server, "127.0.0.1:%d" % server.getsockname()[1]


class UnreachableTasksTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.me, my_address = _listening_socket()
        self.peer, self.peer_address = _listening_socket()
        self.settings = ClusterSettings("worker", 0, (), (my_address, self.peer_address))
        self.addCleanup(self.me.close)
        self.addCleanup(self.peer.close)

    def test_a_listening_peer_is_not_named(self):
        self.assertEqual(connections.unreachable_tasks(self.settings), "")

    def test_a_closed_port_is_named(self):
        self.peer.close()
        self.assertEqual(connections.unreachable_tasks(self.settings),
                         f"worker 1 at {self.peer_address}")

    def test_settling_names_a_peer_whose_port_closes_a_moment_later(self):
        # A killed task's connections can break before its listening port closes.
        closer = threading.Timer(1.0, self.peer.close)
        closer.start()
        self.addCleanup(closer.cancel)
        self.assertEqual(connections.unreachable_tasks(self.settings), "")
        started = time.monotonic()
        down = connections.unreachable_tasks(self.settings, settle_secs=30.0)
        self.assertEqual(down, f"worker 1 at {self.peer_address}")
        # It returns as soon as the port is closed, not after the whole settle time.
        self.assertLess(time.monotonic() - started, 25.0)

    def test_settling_gives_up_when_every_peer_answers(self):
        started = time.monotonic()
        self.assertEqual(connections.unreachable_tasks(self.settings, settle_secs=1.0), "")
        self.assertGreaterEqual(time.monotonic() - started, 1.0)



class TimedOutStepTest(absltest.TestCase):

    def explain_timeout(self, input_service):
        worker = member.ClusterMember.__new__(member.ClusterMember)  # no server needed here
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            gone = "127.0.0.1:%d" % unused.getsockname()[1]
        worker.cluster = ClusterSettings("worker", 0, (), (gone, gone))
        worker.input_service = input_service
        return str(worker.explain(tf.errors.DeadlineExceededError(None, None, "deadline"),
                                  "after step 3", 30))

    def test_a_worker_reading_from_the_input_service_names_it_too(self):
        message = self.explain_timeout("grpc://input-host:5050")
        self.assertIn("no synchronous update within 30 s", message)
        self.assertIn("or the input service at grpc://input-host:5050 stopped serving", message)
        self.assertNotIn("input service", self.explain_timeout(""))


if __name__ == "__main__":
    absltest.main()
