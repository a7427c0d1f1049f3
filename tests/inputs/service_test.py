"""The training input made by the tf.data service's workers (inputs/service.py), a dispatcher
and workers in this process on loopback ports: with one worker, the batches are the local
pipeline's, bit for bit; with two, every example is served once an epoch (whole epochs per
worker) and no batch twice; a resumed input starts at the next whole epoch."""

import collections
import time
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.inputs import pipeline
from inception.inputs import service
from inception.inputs import shares
from tests import testing_utils
from tests.inputs.records import jpeg_bytes
from tests.inputs.records import record
from tests.inputs.records import write_shard

tf1 = tf.compat.v1
EXAMPLES = 12  # each with a label of its own: 1..12
SIZE, BATCH, SEED = 32, 4, 7


def start_service(workers):
    """(a dispatcher, its `workers` workers) on free loopback ports."""
    dispatcher = service.start_dispatcher(0)
    address = dispatcher.target.split("://")[1]
    return dispatcher, [service.start_worker(address, "localhost") for _ in range(workers)]


def read_batches(shards, count, service_input=None, position=0, examples=EXAMPLES):
    """`count` (images, labels) batches of the seeded training input, from `position`."""
    with tf.Graph().as_default():
        position_variable = shares.position_variable()
        batch = pipeline.build_train_input(
            pipeline.TrainStream(shards, BATCH, SIZE, EXAMPLES + 1, seed=SEED, shuffle_buffer=4,
                                 examples_per_epoch=examples),
            position=position_variable, service=service_input)
        with tf1.Session() as session:
            session.run([tf1.local_variables_initializer(), position_variable.initializer])
            session.run(position_variable.assign(position))
            session.run(batch.initializer)
            return [session.run([batch.images, batch.labels]) for _ in range(count)]


class ServiceInputTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        directory = testing_utils.temp_dir("service_input")
        records = [record(jpeg_bytes(index), index + 1, f"img{index}.jpg")
                   for index in range(EXAMPLES)]
        cls.shards = [write_shard(directory, records[:6], index=0, total=2),
                      write_shard(directory, records[6:], index=1, total=2)]

    def served(self, workers, count, job, position=0, from_position=True):
        dispatcher, servers = start_service(workers)
        try:
            return read_batches(self.shards, count, service.ServiceInput(
                dispatcher.target, job, from_position=from_position), position)
        finally:
            for server in servers + [dispatcher]:
                server.stop()

    def test_one_worker_serves_the_local_pipelines_batches(self):
        local = read_batches(self.shards, 6)  # two epochs
        served = self.served(1, 6, "one_worker")
        for (local_images, local_labels), (images, labels) in zip(local, served):
            np.testing.assert_array_equal(labels, local_labels)
            np.testing.assert_array_equal(images, local_images)

    def test_two_workers_serve_each_example_once_an_epoch_and_no_batch_twice(self):
        served = self.served(2, 12, "two_workers")  # four epochs' records
        labels = np.concatenate([labels for _, labels in served]).tolist()
        counts = collections.Counter(labels)
        self.assertEqual(set(counts), set(range(1, EXAMPLES + 1)))
        # Each worker is part-way through at most one epoch: off by at most one each way.
        self.assertLessEqual(max(counts.values()) - min(counts.values()), 2, counts)
        batches = [tuple(labels) for _, labels in served]
        self.assertEqual(len(set(batches)), len(batches), batches)  # not the same epoch twice
        # Whole epochs of the one seeded order: every served batch, images included, is a batch
        # of the local pipeline's first epochs (each worker takes whole epochs of it).
        local = {tuple(labels): images for images, labels in read_batches(self.shards, 24)}
        for images, labels in served:
            self.assertIn(tuple(labels), local)
            np.testing.assert_array_equal(images, local[tuple(labels)])

    def test_a_resumed_input_starts_at_the_next_whole_epoch(self):
        local = read_batches(self.shards, 6)  # epochs 0 and 1
        resumed = self.served(1, 3, "resumed", position=5)  # 5 records of epoch 0 read
        for (local_images, local_labels), (images, labels) in zip(local[3:], resumed):
            np.testing.assert_array_equal(labels, local_labels)
            np.testing.assert_array_equal(images, local_images)

    def test_a_clusters_job_starts_at_the_orders_first_epoch(self):
        local = read_batches(self.shards, 3)
        shared = self.served(1, 3, "shared", position=5, from_position=False)
        for (_, local_labels), (_, labels) in zip(local, shared):
            np.testing.assert_array_equal(labels, local_labels)

    def test_an_address_where_nothing_listens_is_one_line(self):
        with self.assertRaisesRegex(service.InputServiceError,
                                    r"^--input_service=grpc://localhost:1: no dispatcher answers "
                                    r"there .*//inception:input_service -- --port=1`"):
            service.check_reachable("grpc://localhost:1")


class ReachabilityTest(unittest.TestCase):
    """What a trainer's watch asks (service.unreachable), of a dispatcher and a worker on
    loopback ports: each lost in turn."""

    def test_a_service_is_reachable_until_its_worker_then_its_dispatcher_is_gone(self):
        dispatcher = service.start_dispatcher(0)
        address = dispatcher.target
        self.assertIsNone(service.unreachable(address, workers_required=False))
        self.assertEqual(service.unreachable(address),
                         "no worker is registered with its dispatcher")
        worker = service.start_worker(address.split("://")[1], "localhost")
        worker_address = f"localhost:{service.bound_port(worker)}"
        for _ in range(100):  # until it registered
            if service.registered_worker_addresses(address.split("://")[1], 5):
                break
            time.sleep(0.1)
        self.assertEqual(service.registered_worker_addresses(address.split("://")[1], 5),
                         [worker_address])
        self.assertIsNone(service.unreachable(address))
        worker.stop()  # the dispatcher still lists it: its port refuses
        self.assertRegex(service.unreachable(address),
                         rf"^none of its 1 worker\(s\) answers \({worker_address}: "
                         r"Connection refused\)$")
        dispatcher.stop()
        self.assertRegex(service.unreachable(address),
                         rf"^its dispatcher at localhost:{address.rpartition(':')[2]} does not "
                         r"answer \(Connection refused\)$")


if __name__ == "__main__":
    absltest.main()
