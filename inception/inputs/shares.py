"""A worker's share of the one global order of training records, and where in that order
reading starts (the position: the records consumed, a variable saved in every checkpoint).

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

tf1 = tf.compat.v1


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


def start(position, examples_per_epoch, service=None):
    """(the position variable or None, the epoch to start reading in, the records of it to
    skip): where a training stream (pipeline.py) starts reading, at `position` when
    `examples_per_epoch` tracks it; from the `service`, at a whole epoch: the first after it
    that nothing was read from, or, for a job that does not start from the position
    (service.ServiceInput), the first."""
    if not examples_per_epoch:
        return None, 0, 0
    if position is None:
        position = position_variable()
    if service is not None and not service.from_position:
        return position, 0, 0
    if service is not None:
        return position, (position + examples_per_epoch - 1) // examples_per_epoch, 0
    return position, position // examples_per_epoch, position % examples_per_epoch


def position_variable():
    """The int64 variable of a training input's position (InputBatch.position), at 0."""
    return tf1.Variable(0, dtype=tf.int64, trainable=False, name="input_position")
