"""Damaged records: a JPEG that is truncated or not a JPEG (found before decoding), or one
that looks complete but fails to decode (dropped by tf.data's ignore_errors). Each is counted;
evaluation skips it, and training gives its slot to the next good record of the same stream
(fill_slots), so that damaged records never shift the order of the records a run trains on (a
resumed run, and a cluster's workers reading shares of one order, stay in step). With
`strict`, the first one stops the run with an error that names its file; `explain` turns
that error, and the other errors the input raises, into one line.
"""

import sys

import tensorflow as tf

from common import cli
from common import error_lines
from inception.inputs import preprocessing

tf1 = tf.compat.v1


class InputError(cli.UserError):
    """The input stopped a run (--strict_input, or a label the model cannot represent); the
    message is one line naming the record's file where known."""


INPUT_ERROR_MARKERS = ("drop --strict_input", "check --num_classes", "Invalid JPEG data",
                       "jpeg", "JPEG")


def explain(error):
    """An InputError for a TensorFlow error the input pipeline raised, or None for others."""
    cause = error_lines.root_cause(getattr(error, "message", str(error)))
    if not any(marker in cause for marker in INPUT_ERROR_MARKERS):
        return None
    if "drop --strict_input" in cause or "check --num_classes" in cause:
        return InputError(cause)
    return InputError(f"an input image could not be decoded ({cause}); remove it from the "
                      "shards, or drop --strict_input to skip such records.")


def checked_label(label, num_classes, filename):
    """`label` (int32), failing with a line naming the file when no logit represents it."""
    in_range = tf.logical_and(label >= 0, label < num_classes)
    message = tf.strings.format(
        "label {} of image {} is outside [0, {}); the data has more classes than the model: "
        "check --num_classes / labels.txt", (label, filename, num_classes))
    with tf.control_dependencies([tf.debugging.Assert(in_range, [message])]):
        return tf.identity(label)


def corrupt_counter():
    """The local int64 variable counting a pipeline's damaged records, at 0."""
    return tf1.Variable(0, dtype=tf.int64, trainable=False, name="corrupt_records",
                        collections=[tf1.GraphKeys.LOCAL_VARIABLES])


def gap_counter(counter):
    """A map function, run in order after ignore_errors: adds to `counter` the records missing
    before each one (dropped because they failed to decode)."""
    last = tf1.Variable(-1, dtype=tf.int64, trainable=False, name="last_record",
                        collections=[tf1.GraphKeys.LOCAL_VARIABLES])

    def count(index, image, label, filename, ok):
        missing = index - last - 1
        with tf.control_dependencies([counter.assign_add(tf.maximum(missing, 0))]):
            with tf.control_dependencies([last.assign(index)]):
                return tf.identity(index), image, label, filename, ok
    return count


def decode_or_skip(encoded, filename, decode, image_size, counter, strict):
    """Returns (image, ok); damaged images give ok=False and bump `counter` (None: counted
    later) or fail if strict.

    `decode` is a zero-argument callable returning float32 [image_size, image_size, 3].
    """
    ok = preprocessing.is_complete_jpeg(encoded)
    if strict:
        message = tf.strings.format("damaged or non-JPEG image {} in the input (remove it, or "
                                    "drop --strict_input to skip such records)", filename)
        with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
            return decode(), ok

    def skip():
        note = tf.print("not using a damaged or non-JPEG image:", filename,
                        output_stream=sys.stderr)
        counted = [] if counter is None else [counter.assign_add(1)]
        with tf.control_dependencies(counted + [note]):
            return tf.zeros([image_size, image_size, 3], tf.float32)

    return tf.cond(ok, decode, skip), ok


def fill_slots(elements):
    """(slot, *values) elements in increasing slot order, some slots missing (their record
    was damaged and dropped) -> (damaged records before it, *values) for every slot from 0
    on: a missing slot takes the next element's values, and the first element that fills
    missing slots counts them (int64)."""
    def count_missing(expected, element):
        slot, values = element[0], element[1:]
        return slot + 1, (slot - expected, values)

    def repeated(missing, values):
        counts = tf.concat([[missing], tf.zeros([missing], tf.int64)], axis=0)
        return tf.data.Dataset.from_tensor_slices(counts).map(
            lambda count: (count, *values))
    return elements.scan(tf.constant(0, tf.int64), count_missing).flat_map(repeated)
