"""tf.data input: TFRecord shards -> parsed Examples -> preprocessed images -> global batches.

Runs on the CPU. Training reads epoch after epoch, forever, and drops the last partial batch
(towers need equal batches); evaluation reads every example once, in order.

With a seed, the training stream is a function of the seed alone: epoch e reads the shards in
an order drawn from (seed, e), through a shuffle buffer seeded the same way, and the k-th record
of epoch e is distorted with a seed made of (seed, e, k). So the stream can start anywhere: a
run that tracks its position (a variable saved in every checkpoint) resumes with the batch the
uninterrupted run would have read next, skipping at most one epoch's records (read, not
decoded). Damaged records that were skipped shift that position by their number. With
sampling weights (--balanced_sampling), each epoch keeps its length but draws each record as
many times as its label's weight says on average, from the same seeds (_resampled_epoch).
A record whose JPEG is truncated or not a JPEG is skipped and counted (or, with `strict`, stops
the run with an error that names the file).
"""

import dataclasses
import random
import sys

import tensorflow as tf

from common import cli
from common import error_lines
from inception.config import recipe
from inception.inputs import preprocessing
from inception.inputs import resampling

tf1 = tf.compat.v1
AUTOTUNE = tf.data.AUTOTUNE
DEFAULT_SHUFFLE_BUFFER = 10_000
EPOCH_SEED_STRIDE = 1 << 24  # epoch seeds (seed * stride + epoch) of two seeds never meet
LAST_EPOCH = 1 << 40  # "forever"


@dataclasses.dataclass(frozen=True)
class InputBatch:
    """Tensors of one batch and the ops that drive the pipeline.

    images: float32 [batch, size, size, 3] in [-1, 1]; labels: int32 [batch] in [0, num_classes).
    corrupt_records: int64 scalar, records skipped so far because their image was damaged.
    initializer: run once per session before reading; training starts reading at `position`.
    position: int64 variable, saved in checkpoints: the examples trained on so far (the step
      graph adds each update's examples); None when the position is not tracked.
    """
    images: tf.Tensor
    labels: tf.Tensor
    corrupt_records: tf.Tensor
    initializer: tf.Operation
    position: tf.Variable = None


def parse_example(serialized):
    """Parses one original-format Example into (JPEG bytes, label, boxes, filename).

    Boxes are float32 [num_boxes, 4] as (ymin, xmin, ymax, xmax); records without boxes (the
    original builders' non-ImageNet sets) give [0, 4].
    """
    features = tf.io.parse_single_example(serialized, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/filename": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    })
    coordinates = [tf.sparse.to_dense(features[f"image/object/bbox/{key}"])
                   for key in ("ymin", "xmin", "ymax", "xmax")]
    boxes = tf.stack(coordinates, axis=1)
    label = tf.cast(features["image/class/label"], tf.int32)
    return features["image/encoded"], label, boxes, features["image/filename"]


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


def fresh_seed():
    """A seed for a run given none: different every run (from the OS's entropy)."""
    return random.SystemRandom().randrange(2**31 - 1)


def _corrupt_counter():
    return tf1.Variable(0, dtype=tf.int64, trainable=False, name="corrupt_records",
                        collections=[tf1.GraphKeys.LOCAL_VARIABLES])


def _gap_counter(counter):
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


def _checked_label(label, num_classes, filename):
    in_range = tf.logical_and(label >= 0, label < num_classes)
    message = tf.strings.format(
        "label {} of image {} is outside [0, {}); the data has more classes than the model: "
        "check --num_classes / labels.txt", (label, filename, num_classes))
    with tf.control_dependencies([tf.debugging.Assert(in_range, [message])]):
        return tf.identity(label)


def _decode_or_skip(encoded, filename, decode, image_size, counter, strict):
    """Returns (image, ok); damaged images give ok=False and bump `counter` (or fail if strict).

    `decode` is a zero-argument callable returning float32 [image_size, image_size, 3].
    """
    ok = preprocessing.is_complete_jpeg(encoded)
    if strict:
        message = tf.strings.format("damaged or non-JPEG image {} in the input (remove it, or "
                                    "drop --strict_input to skip such records)", filename)
        with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
            return decode(), ok

    def skip():
        note = tf.print("skipping a damaged or non-JPEG image:", filename, output_stream=sys.stderr)
        with tf.control_dependencies([counter.assign_add(1), note]):
            return tf.zeros([image_size, image_size, 3], tf.float32)

    return tf.cond(ok, decode, skip), ok


def _records(shards, shuffle_files, seed, deterministic):
    files = tf.data.Dataset.from_tensor_slices(shards)
    if shuffle_files:
        files = files.shuffle(len(shards), seed=seed, reshuffle_each_iteration=False)
    return files.interleave(tf.data.TFRecordDataset, cycle_length=min(len(shards), 16),
                            num_parallel_calls=AUTOTUNE, deterministic=deterministic)


def _epoch_records(shards, seed, epoch, shuffle_buffer, deterministic):
    """(per-record seed [2], record) of one epoch, in an order drawn from (seed, epoch) alone."""
    epoch_seed = seed * EPOCH_SEED_STRIDE + epoch
    records = _records(shards, True, epoch_seed, deterministic)
    records = records.shuffle(shuffle_buffer, seed=epoch_seed, reshuffle_each_iteration=False)
    return _seeded(records, seed, epoch)


def _seeded(records, seed, epoch):
    """(per-record seed [2], record): the k-th record of epoch `epoch` seeded by (seed, epoch,
    k)."""
    epoch_key = tf.stack([tf.constant(seed, tf.int64), epoch])
    return records.enumerate().map(
        lambda index, record: (tf.random.experimental.stateless_fold_in(epoch_key, index),
                               record))


def _resampled_epoch(shards, seed, epoch, shuffle_buffer, deterministic, sampling_weights,
                     length):
    """(per-record seed, record) of one resampled epoch (resampling.resampled) drawn from the
    ordinary epochs `epoch`, `epoch` + 1, ...; the k-th is seeded by (seed, epoch, k) as in an
    ordinary epoch, so a record drawn twice is distorted twice differently."""
    records = tf.data.Dataset.range(epoch, LAST_EPOCH).flat_map(
        lambda source: _epoch_records(shards, seed, source, shuffle_buffer, deterministic))
    return _seeded(resampling.resampled(records, sampling_weights).take(length), seed, epoch)


def build_train_input(shards, batch_size, image_size, num_classes, seed=None, strict=False,
                      shuffle_buffer=DEFAULT_SHUFFLE_BUFFER, crop=recipe.ORIGINAL_CROP,
                      threads=0, augmentation=None, examples_per_epoch=None,
                      sampling_weights=None):
    """Training batches: distorted images, forever, in global batches of `batch_size`.

    Args:
      shards: list of TFRecord paths.
      seed: int for a reproducible order and distortions; None for a fresh random one (and
        non-deterministic, slightly faster parallel reads).
      strict: fail on a damaged image instead of skipping it.
      crop: recipe.CropSettings of the random training crop.
      threads: size of a private thread pool for the pipeline (0: tf.data's shared default).
      augmentation: settings.AugmentationSettings for RandAugment and random erasing after
        the distortions (preprocessing.train_image); None: the distortions alone.
      examples_per_epoch: the records in `shards`: the position is tracked (InputBatch.
        position) and reading starts at it; None: not tracked, reading starts at epoch 0. A
        resume lands where the uninterrupted run read only when this is the shards' true
        count (an epoch is where their records end, and the start epoch is position // it).
      sampling_weights: the times each label's record is drawn per epoch on average
        (--balanced_sampling: label_weights.balanced_weights); each epoch keeps its length
        (_resampled_epoch). None: each record once an epoch.

    Returns:
      InputBatch with static shapes [batch_size, image_size, image_size, 3] and [batch_size].
    """
    deterministic = seed is not None
    if seed is None:
        seed = fresh_seed()
    counter = _corrupt_counter()
    position = None
    first_epoch = skipped = tf.constant(0, tf.int64)
    if examples_per_epoch:
        position = tf1.Variable(0, dtype=tf.int64, trainable=False, name="input_position")
        first_epoch = position // examples_per_epoch
        skipped = position % examples_per_epoch
    if sampling_weights is None:
        records = tf.data.Dataset.range(first_epoch, LAST_EPOCH).flat_map(
            lambda epoch: _epoch_records(shards, seed, epoch, shuffle_buffer, deterministic))
    else:
        records = tf.data.Dataset.range(first_epoch, LAST_EPOCH).flat_map(
            lambda epoch: _resampled_epoch(shards, seed, epoch, shuffle_buffer, deterministic,
                                           sampling_weights, examples_per_epoch or -1))
    records = records.skip(skipped)

    def preprocess(index, element):
        del index
        image_seed, serialized = element
        encoded, label, boxes, filename = parse_example(serialized)
        image, ok = _decode_or_skip(
            encoded, filename,
            lambda: preprocessing.train_image(encoded, boxes, image_size, image_seed, crop,
                                              augmentation),
            image_size, counter, strict)
        return image, label, filename, ok

    batch = _finish(records.enumerate(), preprocess, batch_size, num_classes, counter, strict,
                    drop_remainder=True, threads=threads)
    return dataclasses.replace(batch, position=position)


def build_eval_input(shards, batch_size, image_size, num_classes, strict=False, max_examples=0):
    """Evaluation batches: every record of `shards` once, in order; the last batch may be short.

    Args:
      max_examples: read only the first this many records (0: all).

    Returns:
      InputBatch; the batch dimension is unknown (None) because of the last partial batch.
    """
    counter = _corrupt_counter()
    records = _records(shards, False, None, True)
    if max_examples:
        records = records.take(max_examples)

    def preprocess(index, serialized):
        del index
        encoded, label, _, filename = parse_example(serialized)
        image, ok = _decode_or_skip(
            encoded, filename, lambda: preprocessing.eval_image(encoded, image_size),
            image_size, counter, strict)
        return image, label, filename, ok

    return _finish(records.enumerate(), preprocess, batch_size, num_classes, counter, strict,
                   drop_remainder=False)


def _finish(indexed_records, preprocess, batch_size, num_classes, counter, strict,
            drop_remainder, threads=0):
    # The decoding map keeps the records' order (it stays parallel): a JPEG that looks complete
    # but still fails to decode is dropped by ignore_errors rather than ending a long run, and
    # the gap it leaves in the record numbers is what counts it.
    dataset = indexed_records.map(lambda index, serialized: (index, *preprocess(index,
                                                                                serialized)),
                                  num_parallel_calls=AUTOTUNE, deterministic=True)
    if not strict:
        dataset = dataset.ignore_errors(log_warning=True).map(_gap_counter(counter))
    dataset = dataset.filter(lambda index, image, label, filename, ok: ok)
    # After ignore_errors on purpose: a label the model cannot represent must stop the run.
    dataset = dataset.map(lambda index, image, label, filename, ok: (
        image, _checked_label(label, num_classes, filename)))
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(AUTOTUNE)
    if threads:
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        dataset = dataset.with_options(options)
    iterator = tf1.data.make_initializable_iterator(dataset)
    images, labels = iterator.get_next()
    return InputBatch(images=images, labels=labels, corrupt_records=counter.read_value(),
                      initializer=iterator.initializer)
