"""A tiny evaluation model with known logits (logits[c] = mean(image) * w[c] + b[c]), its
checkpoints and its evaluation graph over the demo data's validation shards: for the tests of
scoring, validation, best-model keeping and export."""

import os

import numpy as np
import tensorflow as tf

from data import demo_data
from inception.config import settings as settings_lib
from inception.inputs import datasets
from inception.validation import scoring
from tests.testing_utils import temp_dir

tf1 = tf.compat.v1


TINY_EVAL = settings_lib.ModelSettings(num_classes=len(demo_data.CLASS_NAMES) + 1, image_size=16,
                                       depth_multiplier=1.0, dataset="demo")


def mean_feature_logits(images, settings):
    """A tiny model with known logits: logits[c] = mean(image) * w[c] + b[c]."""
    w = tf1.get_variable("tiny/w", [settings.num_classes])
    b = tf1.get_variable("tiny/b", [settings.num_classes])
    feature = tf.reduce_mean(images, axis=[1, 2, 3])
    return feature[:, tf.newaxis] * w + b


def write_tiny_checkpoint(directory, raw, averaged, step):
    """A checkpoint with raw values and different moving averages of tiny/w and tiny/b."""
    with tf.Graph().as_default():
        variables = {name: tf1.get_variable(f"tiny/{name}", initializer=raw[name])
                     for name in ("w", "b")}
        shadows = {f"tiny/{name}/ExponentialMovingAverage": tf1.get_variable(
            f"shadow_{name}", initializer=averaged[name]) for name in ("w", "b")}
        global_step = tf1.train.get_or_create_global_step()
        saver = tf1.train.Saver({**{v.op.name: v for v in variables.values()}, **shadows,
                                 "global_step": global_step})
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            session.run(global_step.assign(step))
            return saver.save(session, os.path.join(directory, "model.ckpt"), global_step=step,
                              write_meta_graph=False)


def tiny_eval_graph(data_dir, batch_size, max_examples=0):
    """scoring.build_eval_graph of mean_feature_logits (TINY_EVAL) over the validation shards
    of the demo data in `data_dir`."""
    shards = datasets.resolve_dataset("demo", data_dir).shards("validation")
    return scoring.build_eval_graph(shards, TINY_EVAL, batch_size=batch_size,
                                    max_examples=max_examples, logits_fn=mean_feature_logits)


def uniform_checkpoint_and_graph(data_dir, name, step, max_examples=0):
    """A tiny checkpoint (w = 1, b = 0) in a new directory and the evaluation graph of the tiny
    model over the validation shards of the demo data in `data_dir`, batches of 4."""
    values = {"w": np.ones(TINY_EVAL.num_classes, np.float32),
              "b": np.zeros(TINY_EVAL.num_classes, np.float32)}
    path = write_tiny_checkpoint(temp_dir(name), values, values, step=step)
    return path, tiny_eval_graph(data_dir, batch_size=4, max_examples=max_examples)


def validation_bytes(shards):
    """The encoded images of the shards, in the order the eval pipeline reads them (one record
    of each shard in turn)."""
    records = tf.data.Dataset.from_tensor_slices(shards).interleave(
        tf.data.TFRecordDataset, cycle_length=len(shards))
    dataset = records.map(lambda record: tf.io.parse_single_example(
        record, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})["image/encoded"])
    return [value.numpy() for value in dataset]
