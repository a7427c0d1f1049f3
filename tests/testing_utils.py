"""Helpers shared by the tests: virtual CPU sessions, tiny models, tiny data, event files."""

import glob
import os
import tempfile

import numpy as np
import tensorflow as tf

from data import demo_data
from inception import input_pipeline

tf1 = tf.compat.v1


def temp_dir(prefix):
    """A fresh directory under Bazel's TEST_TMPDIR (or the system's temporary directory)."""
    return tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("TEST_TMPDIR"))


def cpu_session_config(num_devices):
    """ConfigProto with `num_devices` virtual CPU devices, small thread pools."""
    config = tf1.ConfigProto(allow_soft_placement=False)
    config.device_count["CPU"] = num_devices
    return config


def tiny_demo_data(train=48, validation=20):
    """A small demo data set (same generator as the real one) in a temporary cache."""
    return demo_data.ensure_demo_data(cache_dir=temp_dir("demo_cache"),
                                      counts={"train": train, "validation": validation},
                                      log=lambda message: None)


def small_conv_model_fn(num_classes=4, weight_decay=0.01, unused_variable=False):
    """model_fn(images, labels) -> {'cross_entropy': ...}: conv, pool, dense; no batch norm.

    Deterministic per example (no dropout, no batch statistics), so a mean over towers equals
    the single-device loss on the whole batch. With `unused_variable`, it also creates a
    variable that no loss uses.
    """
    def model_fn(images, labels):
        kernel = tf1.get_variable("net/conv/kernel", [3, 3, images.shape[-1], 8],
                                  initializer=tf1.glorot_uniform_initializer(seed=1),
                                  regularizer=_l2(weight_decay))
        bias = tf1.get_variable("net/conv/bias", [8], initializer=tf1.constant_initializer(0.1))
        net = tf.nn.relu(tf.nn.conv2d(images, kernel, 1, "SAME") + bias)
        net = tf.reduce_mean(net, axis=[1, 2])
        weights = tf1.get_variable("net/logits/weights", [8, num_classes],
                                   initializer=tf1.glorot_uniform_initializer(seed=2),
                                   regularizer=_l2(weight_decay))
        if unused_variable:
            tf1.get_variable("net/unused/weights", [3], initializer=tf1.ones_initializer())
        logits = tf.matmul(net, weights)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        return {"cross_entropy": loss}

    return model_fn


def _l2(weight_decay):
    if not weight_decay:
        return None
    return lambda weights: weight_decay * tf.nn.l2_loss(weights)


def random_batch(batch_size, size=8, channels=3, num_classes=4, seed=0):
    """float32 images [B, size, size, channels] in [-1, 1] and int32 labels [B]."""
    rng = np.random.RandomState(seed)
    images = rng.uniform(-1, 1, size=(batch_size, size, size, channels)).astype(np.float32)
    labels = rng.randint(0, num_classes, size=batch_size).astype(np.int32)
    return images, labels


def read_scalars(log_dir):
    """{tag: [(step, value), ...]} of every scalar in the event files under `log_dir`."""
    scalars = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for event in tf1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def synthetic_input(batch_size):
    """An InputBatch of random 8x8 images and labels in [0, 4), forever."""
    images, labels = random_batch(64)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(
        batch_size, drop_remainder=True)
    iterator = tf1.data.make_initializable_iterator(dataset)
    image_batch, label_batch = iterator.get_next()
    return input_pipeline.InputBatch(images=image_batch, labels=label_batch,
                                     corrupt_records=tf.constant(0, tf.int64),
                                     initializer=iterator.initializer)
