"""A small model with batch norm for the tests of --sync_batch_norm: two convolutions, each
followed by tf-slim's batch norm or the synchronized one, small enough that two ways of
computing a step agree to float32 rounding."""

import itertools

import tensorflow as tf
from tf_slim.nets import inception_v3

from inception.model import mixed_precision
from inception.model.slim_compat import tf_slim as slim
from inception.parallel import towers

tf1 = tf.compat.v1


def small_batch_norm_model_fn(groups=None, compute_dtype=None):
    """model_fn(images, labels) -> towers.ModelOutputs: two 3x3 convolutions with batch norm
    (tf-slim's, or synchronized over `groups`, a synced_batch_norm.BatchNormGroups), a mean
    over space, a dense layer; seeded initial weights; the convolutions in `compute_dtype` over
    float32 variables when given. One model_fn per graph: it counts the towers it builds."""
    built = itertools.count()

    def model_fn(images, labels):
        statistics = groups and groups.for_tower(next(built))
        normalizer = statistics.batch_norm if statistics else slim.batch_norm
        with slim.arg_scope(inception_v3.inception_v3_arg_scope(batch_norm_decay=0.9)), \
                slim.arg_scope([slim.batch_norm], is_training=True), \
                slim.arg_scope([slim.conv2d], normalizer_fn=normalizer), \
                mixed_precision.building_in(compute_dtype):
            net = slim.conv2d(mixed_precision.to_compute(images, compute_dtype), 8, [3, 3],
                              scope="net/conv1",
                              weights_initializer=tf1.glorot_uniform_initializer(seed=1))
            net = slim.conv2d(net, 8, [3, 3], stride=2, scope="net/conv2",
                              weights_initializer=tf1.glorot_uniform_initializer(seed=2))
        net = mixed_precision.to_float32(net)
        logits = slim.fully_connected(
            tf.reduce_mean(net, [1, 2]), 4, activation_fn=None, scope="net/logits",
            weights_initializer=tf1.glorot_uniform_initializer(seed=3))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        return towers.ModelOutputs({"cross_entropy": loss}, logits=logits, labels=labels)
    return model_fn
