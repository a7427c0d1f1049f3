"""--synthetic_input: the towers train on one fixed random batch made on their own devices, with
no reading, decoding or copying from the host, so a step's time is the step's alone (as
tf_cnn_benchmarks' --data_name=synthetic). Set beside a run on the real input, it tells a
slow input from a slow step.

Each tower device holds its slice of the batch in local variables (never checkpointed),
filled once by the local-variable initializer: images uniform in [-1, 1] like the real
input's, labels uniform over the data set's classes (label 0, the background, left out).
"""

import tensorflow as tf

from inception.inputs import pipeline

tf1 = tf.compat.v1


def synthetic_input(batch_size, image_size, num_classes, seed=None):
    """InputBatch of `batch_size` examples whose towers read fixed random tensors on their
    devices (InputBatch.on_device); its `images` and `labels` only give the batch's shapes."""
    def on_device(device, rows, index):
        with tf.device(device), tf1.variable_scope(f"synthetic_input_{index}"):
            tower_seed = None if seed is None else seed + index
            images = _local("images", tf.random.uniform(
                [rows, image_size, image_size, 3], -1.0, 1.0, seed=tower_seed))
            labels = _local("labels", tf.random.uniform(
                [rows], 1, num_classes, dtype=tf.int32, seed=tower_seed))
        return images, labels

    return pipeline.InputBatch(
        images=tf.zeros([batch_size, image_size, image_size, 3]),
        labels=tf.zeros([batch_size], tf.int32), corrupt_records=tf.constant(0, tf.int64),
        initializer=tf.no_op(), on_device=on_device)


def _local(name, initial_value):
    variable = tf1.Variable(initial_value, trainable=False, name=name,
                            collections=[tf1.GraphKeys.LOCAL_VARIABLES])
    return variable.read_value()
