"""A worker's share of the one global order of training records.

A cluster's workers read one seeded order of records (pipeline.py), and each takes its share
by index: the order is cut into chunks of one worker's batch, and chunk c goes to worker
c % workers. Step s then trains on records [s * G, (s + 1) * G) of the order (G: the global
batch), whichever worker reads which chunk, so one global position (the records consumed)
says where every worker goes on, and a cluster of another size goes on from the same place:
with half the workers and twice the micro-batches, a worker's chunk is two of the former
chunks, in order. Every worker reads every record (bytes only: reading is cheap next to
decoding) and decodes its share alone; tf.data's `shard` also reads everything it skips.
A damaged record never shifts a share: damaged.py fills its slot.
"""

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class InputShare:
    """The share of the global order this process reads: worker `index` of `count`."""
    index: int = 0
    count: int = 1


ALL = InputShare()  # one process reads the whole order


def take_share(records, share, chunk):
    """The elements of `records` in `share`: consecutive chunks of `chunk` elements, chunk c
    to worker c % share.count."""
    if share.count == 1:
        return records
    return records.enumerate().filter(
        lambda index, element: tf.equal((index // chunk) % share.count, share.index)).map(
            lambda index, element: element)
