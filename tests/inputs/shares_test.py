"""Workers reading shares of one order (inputs/shares.py), and damaged records that keep their
slot (inputs/damaged.py): against the stream one process reads, an independent reading."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.inputs import preprocessing
from inception.inputs.shares import InputShare
from tests import testing_utils
from tests.inputs.records import jpeg_bytes
from tests.inputs.records import record
from tests.inputs.records import stream
from tests.inputs.records import write_shard

tf1 = tf.compat.v1
# Starts and ends like a JPEG, so the completeness check passes; the decoder fails.
UNDECODABLE = b"\xff\xd8\xff\xe0" + np.random.RandomState(7).bytes(500) + b"\xff\xd9"
DAMAGED_LABEL = 3


def assert_same(got, want):
    """Checks that two lists of (images, labels) batches are equal, bit for bit."""
    for (images, labels), (want_images, want_labels) in zip(got, want, strict=True):
        np.testing.assert_array_equal(labels, want_labels)
        np.testing.assert_array_equal(images, want_images)


class SharesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        directory = testing_utils.temp_dir("shares")
        # Good records carry labels 1 and 2, damaged ones DAMAGED_LABEL: a slot whose label is
        # DAMAGED_LABEL kept a damaged record's own data.
        good = [record(jpeg_bytes(i), i % 2 + 1, f"img{i}.jpg") for i in range(8)]
        cls.shards = [write_shard(directory, good[:5], index=0, total=2),
                      write_shard(directory, good[5:], index=1, total=2)]
        damaged_dir = testing_utils.temp_dir("shares_damaged")
        damaged = [record(jpeg_bytes(100)[:300], DAMAGED_LABEL, "truncated.jpg"),
                   record(b"not an image", DAMAGED_LABEL, "garbage.jpg"),
                   record(UNDECODABLE, DAMAGED_LABEL, "undecodable.jpg")]
        cls.damaged_shards = [write_shard(damaged_dir, good[:3] + damaged[:2], index=0, total=2),
                              write_shard(damaged_dir, good[3:] + damaged[2:], index=1, total=2)]

    def test_two_workers_read_the_halves_of_what_one_process_reads(self):
        whole, _ = stream(self.shards, 8, 0, 4, 6)  # three epochs of 8
        halves = [stream(self.shards, 8, 0, 2, 6, InputShare(worker, 2))[0] for worker in (0, 1)]
        for worker, half in enumerate(halves):
            assert_same(half, [(images[2 * worker:2 * worker + 2],
                                      labels[2 * worker:2 * worker + 2])
                                     for images, labels in whole])

    def test_half_the_workers_read_two_of_the_former_chunks_each(self):
        quarters = [stream(self.shards, 8, 4, 1, 6, InputShare(worker, 4))[0]
                    for worker in range(4)]
        halves = [stream(self.shards, 8, 4, 2, 6, InputShare(worker, 2))[0] for worker in (0, 1)]
        for worker, half in enumerate(halves):
            assert_same(half, [
                (np.concatenate([quarters[2 * worker][step][0],
                                 quarters[2 * worker + 1][step][0]]),
                 np.concatenate([quarters[2 * worker][step][1],
                                 quarters[2 * worker + 1][step][1]]))
                for step in range(6)])

    def test_damaged_records_keep_their_slots_so_a_resumed_stream_reads_the_same(self):
        # 11 records, 3 of them damaged (two found before decoding, one by the decoder).
        with tf.Graph().as_default():
            self.assertTrue(tf1.Session().run(preprocessing.is_complete_jpeg(
                tf.constant(UNDECODABLE))))
        whole, corrupt = stream(self.damaged_shards, 11, 0, 2, 11)  # two epochs of 11
        self.assertGreaterEqual(corrupt, 6)  # two epochs read (prefetching reads on)
        for position in (4, 10, 14):
            with self.subTest(position=position):
                started, _ = stream(self.damaged_shards, 11, position, 2, 2)
                assert_same(started, whole[position // 2:position // 2 + 2])
        # Every slot holds a good record: a damaged record's slot holds the next good one.
        labels = np.concatenate([labels for _, labels in whole])
        self.assertEqual(len(labels), 22)
        self.assertEqual(set(labels.tolist()), {1, 2})

    def test_a_workers_share_resumed_past_damaged_records_reads_the_same(self):
        # A damaged slot takes the next good record of its own share, so each share is its
        # own stream: the same from a position as from the start.
        for worker in (0, 1):
            share = InputShare(worker, 2)
            whole, _ = stream(self.damaged_shards, 11, 0, 2, 8, share)
            for position in (4, 12):  # the global position: 4 records a step
                with self.subTest(worker=worker, position=position):
                    started, _ = stream(self.damaged_shards, 11, position, 2, 2, share)
                    assert_same(started, whole[position // 4:position // 4 + 2])


if __name__ == "__main__":
    absltest.main()
