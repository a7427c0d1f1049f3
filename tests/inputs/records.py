"""Tiny training records for the input tests: random JPEGs in the original TFRecord format,
written into shards."""

import io
import os

import numpy as np
import tensorflow as tf
from PIL import Image

from data import tfrecord_format
from inception.inputs import pipeline
from inception.inputs.shares import InputShare

tf1 = tf.compat.v1


def jpeg_bytes(seed, width=48, height=40):
    """A JPEG of random pixels drawn from `seed`."""
    rng = np.random.RandomState(seed)
    pixels = rng.randint(0, 256, size=(height, width, 3)).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


def record(encoded, label, name, boxes=()):
    """A serialized Example of the JPEG bytes `encoded` with `label` and file `name`."""
    return tfrecord_format.make_example(tfrecord_format.ImageRecord(
        encoded_jpeg=encoded, label=label, text=f"class{label}", height=40, width=48,
        filename=name, boxes=boxes)).SerializeToString()


def write_shard(directory, records, split="train", index=0, total=1):
    """Writes serialized `records` into a shard of `directory`; returns its path."""
    path = os.path.join(directory, tfrecord_format.shard_name(split, index, total))
    with tf.io.TFRecordWriter(path) as writer:
        for serialized in records:
            writer.write(serialized)
    return path


def stream(shards, examples, position, batch_size, count, share=InputShare(), seed=5,
           size=32, num_classes=4):
    """(`count` (images, labels) batches, the damaged records counted) of `share` of the
    seeded training order of `shards` (their `examples` records), started at `position`."""
    with tf.Graph().as_default():
        batch = pipeline.build_train_input(
            pipeline.TrainStream(shards, batch_size, size, num_classes, seed=seed,
                                 shuffle_buffer=4, examples_per_epoch=examples), share=share)
        with tf1.Session() as session:
            session.run([tf1.local_variables_initializer(), batch.position.initializer])
            session.run(batch.position.assign(position))
            session.run(batch.initializer)
            batches = [session.run([batch.images, batch.labels]) for _ in range(count)]
            return batches, int(session.run(batch.corrupt_records))
