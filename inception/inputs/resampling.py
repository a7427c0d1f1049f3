"""Balanced sampling (--balanced_sampling): each record drawn floor(w + u) times, w its
label's sampling weight (label_weights.balanced_weights: n / (k x n_c)) and u uniform from the
record's own seed, so w times on average; a rare image repeats, a common one is sometimes
passed over. The pipeline cuts what this gives to the epoch's usual length.

Our own rather than tf.data's rejection_resample: that one draws most of a fixed-length epoch
from the start of the source order and never reaches its end (label shares 0.45 / 0.23 / 0.32
for 0.33 each in pipeline_test's set), and prints warnings of its own; a draw per record keeps
every record's chance the same.
"""

import tensorflow as tf

RESAMPLING_DRAW = 1  # folded into a record's seed for its draw, apart from its image's draws


def resampled(records, sampling_weights):
    """The records of `records` ((per-record seed [2], serialized Example)) each repeated as
    often as its draw says, without their seeds. A label past `sampling_weights` weighs 1,
    so the pipeline still refuses it by name."""
    weights = tf.constant(tuple(sampling_weights) + (1.0,), tf.float32)

    def draws(record_seed, record):
        label = tf.clip_by_value(record_label(record), 0, len(sampling_weights))
        chance = tf.random.stateless_uniform([], tf.random.experimental.stateless_fold_in(
            record_seed, RESAMPLING_DRAW))
        count = tf.cast(tf.floor(tf.gather(weights, label) + chance), tf.int64)
        return tf.data.Dataset.from_tensors(record).repeat(count)
    return records.flat_map(draws)


def record_label(record):
    """int64: the label of a serialized Example, parsing nothing else."""
    return tf.io.parse_single_example(record, {"image/class/label": tf.io.FixedLenFeature(
        [], tf.int64)})["image/class/label"]
