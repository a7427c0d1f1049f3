"""tf.data input: TFRecord shards -> parsed Examples -> preprocessed images -> global batches.

Runs on the CPU. Training reads epoch after epoch, forever, and drops the last partial batch
(towers need equal batches); evaluation reads every example once, in order.

With a seed, the training stream is a function of the seed alone: epoch e reads the shards in
an order drawn from (seed, e), through a shuffle buffer seeded the same way, and the k-th record
of epoch e is distorted with a seed made of (seed, e, k). So the stream can start anywhere: a
run that tracks its position (a variable saved in every checkpoint: the records of the order
trained on) resumes with the batch the uninterrupted run would have read next, skipping at most
one epoch's records (read, not decoded). The workers of a cluster each read their share of that
one order (shares.py), from one position. With sampling weights (--balanced_sampling), each
epoch keeps its length but draws each record as many times as its label's weight says on
average, from the same seeds (_resampled_epoch).
A record whose JPEG is truncated or not a JPEG is counted and, in training, replaced by the next
good record (so the order never shifts), in evaluation skipped; with `strict` it stops the run
with an error that names the file.
"""

import dataclasses
import random

import tensorflow as tf

from inception.config import recipe
from inception.inputs import damaged
from inception.inputs import preprocessing
from inception.inputs import resampling
from inception.inputs import shares

tf1 = tf.compat.v1
AUTOTUNE = tf.data.AUTOTUNE
DEFAULT_SHUFFLE_BUFFER = 10_000
EPOCH_SEED_STRIDE = 1 << 24  # epoch seeds (seed * stride + epoch) of two seeds never meet
LAST_EPOCH = 1 << 40  # "forever"


@dataclasses.dataclass(frozen=True)
class InputBatch:
    """Tensors of one batch and the ops that drive the pipeline.

    images: float32 [batch, size, size, 3] in [-1, 1]; labels: int32 [batch] in [0, num_classes).
    corrupt_records: int64 scalar, records skipped (or in training replaced) so far because their
      image was damaged.
    initializer: run once per session before reading; training starts reading at `position`.
    position: int64 variable, saved in checkpoints: the records of the global order trained on
      so far (the step graph adds `global_batch` each update); None when it is not tracked.
    global_batch: the records of the order one step consumes: this batch times the workers
      whose shares make the step (shares.InputShare.count).
    on_device: None, or (synthetic.py) callable(device, rows, index) -> (images, labels) of
      tower `index` made on its `device`, which the towers read instead of `images`/`labels`.
    """
    images: tf.Tensor
    labels: tf.Tensor
    corrupt_records: tf.Tensor
    initializer: tf.Operation
    position: tf.Variable = None
    global_batch: int = None
    on_device: object = None

    @property
    def records_per_step(self):
        """The records of the input one step consumes: `global_batch`, or this batch alone
        where it is not set (an epoch is so many steps)."""
        return self.global_batch or int(self.images.shape[0])


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


def fresh_seed():
    """A seed for a run given none: different every run (from the OS's entropy)."""
    return random.SystemRandom().randrange(2**31 - 1)


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


@dataclasses.dataclass(frozen=True)
class TrainStream:
    """What the training batches are made of: distorted images of `shards` (TFRecord paths),
    forever, in batches of `batch_size`.

    seed: int for a reproducible order and distortions; None for a fresh random one (and
      non-deterministic, slightly faster parallel reads). strict: fail on a damaged image
      instead of replacing it. crop: recipe.CropSettings of the random training crop.
    threads: size of a private thread pool for the pipeline (0: tf.data's shared default).
    augmentation: settings.AugmentationSettings for RandAugment and random erasing after the
      distortions (preprocessing.train_image); None: the distortions alone.
    examples_per_epoch: the records in `shards`: the position is tracked (InputBatch.position)
      and reading starts at it; None: not tracked, reading starts at epoch 0. A resume lands
      where the uninterrupted run read only when this is the shards' true count (an epoch is
      where their records end, and the start epoch is position // it).
    sampling_weights: the times each label's record is drawn per epoch on average
      (--balanced_sampling: label_weights.balanced_weights); each epoch keeps its length
      (_resampled_epoch). None: each record once an epoch.
    """
    shards: tuple
    batch_size: int
    image_size: int
    num_classes: int
    seed: int = None
    strict: bool = False
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    crop: recipe.CropSettings = recipe.ORIGINAL_CROP
    threads: int = 0
    augmentation: object = None
    examples_per_epoch: int = None
    sampling_weights: object = None


# The input's functions are TensorFlow code with no Python control flow on tensors: built with
# autograph off, tf.data traces them as they are instead of rewriting their source first
# (about 1.4 s of each training pipeline's build on a 2-core CPU; the same ops).
@tf.autograph.experimental.do_not_convert
def build_train_input(stream, position=None, share=shares.ALL, service=None):
    """The training batches of `stream` (a TrainStream).

    Args:
      position: the int64 variable of the position (shares.position_variable(), placed by the
        caller: a cluster's chief saves it for every worker); None: made here when tracked.
      share: shares.InputShare: this worker's share of the order, in chunks of the batch size.
        With `service` only its count matters: the records one step of the cluster consumes
        (the service hands each batch to one trainer).
      service: service.ServiceInput: the tf.data service's workers make the batches, each
        taking whole epochs (from the first after `position`, or the first); None: here.

    Returns:
      InputBatch with static shapes [batch_size, image_size, image_size, 3] and [batch_size].
    """
    deterministic = stream.seed is not None
    seed = fresh_seed() if stream.seed is None else stream.seed
    image_size, examples_per_epoch = stream.image_size, stream.examples_per_epoch
    position, first_epoch, skipped = shares.start(position, examples_per_epoch, service)

    def epoch_records(epoch):
        if stream.sampling_weights is None:
            return _epoch_records(stream.shards, seed, epoch, stream.shuffle_buffer,
                                  deterministic)
        return _resampled_epoch(stream.shards, seed, epoch, stream.shuffle_buffer,
                                deterministic, stream.sampling_weights,
                                examples_per_epoch or -1)

    def preprocess(element):
        image_seed, serialized = element
        encoded, label, boxes, filename = parse_example(serialized)
        image, ok = damaged.decode_or_skip(
            encoded, filename,
            lambda: preprocessing.train_image(encoded, boxes, image_size, image_seed,
                                              stream.crop, stream.augmentation),
            image_size, None, stream.strict)
        return image, label, filename, ok

    kept = _kept(tf.data.Dataset.range(first_epoch, LAST_EPOCH), epoch_records, preprocess,
                 stream, skipped, share, whole_epochs=service is not None)
    batch = _batched(kept, stream.batch_size, stream.num_classes, damaged.corrupt_counter(),
                     drop_remainder=True, threads=stream.threads,
                     distribute=service.distribute if service else None)
    return dataclasses.replace(batch, position=position,
                               global_batch=stream.batch_size * share.count)


def _kept(epochs, epoch_records, preprocess, stream, skipped, share, whole_epochs):
    """The filled slots (_filled) of the records of `epochs` after `skipped`, `share` of them
    in chunks of the stream's batch size; with `whole_epochs` (the service, which hands whole
    epochs to its workers: its one source is the epochs), each epoch filled on its own, all of
    it."""
    if whole_epochs:
        return epochs.flat_map(
            lambda epoch: _filled(epoch_records(epoch), preprocess, stream.strict))
    records = shares.take_share(epochs.flat_map(epoch_records).skip(skipped), share,
                                stream.batch_size)
    return _filled(records, preprocess, stream.strict)


def _filled(records, preprocess, strict):
    """(damaged records before it, image, label, filename) of every slot of `records`
    (damaged.fill_slots)."""
    decoded = _decoded(records.enumerate(), preprocess, strict)
    return damaged.fill_slots(decoded.filter(
        lambda slot, image, label, filename, ok: ok).map(
            lambda slot, image, label, filename, ok: (slot, image, label, filename)))


@tf.autograph.experimental.do_not_convert  # as build_train_input
def build_eval_input(shards, batch_size, image_size, num_classes, strict=False, max_examples=0):
    """Evaluation batches: every record of `shards` once, in order; the last batch may be short.

    Args:
      max_examples: read only the first this many records (0: all).

    Returns:
      InputBatch; the batch dimension is unknown (None) because of the last partial batch.
    """
    counter = damaged.corrupt_counter()
    records = _records(shards, False, None, True)
    if max_examples:
        records = records.take(max_examples)

    def preprocess(serialized):
        encoded, label, _, filename = parse_example(serialized)
        image, ok = damaged.decode_or_skip(
            encoded, filename, lambda: preprocessing.eval_image(encoded, image_size),
            image_size, counter, strict)
        return image, label, filename, ok

    decoded = _decoded(records.enumerate(), preprocess, strict)
    if not strict:
        decoded = decoded.map(damaged.gap_counter(counter))
    kept = decoded.filter(lambda index, image, label, filename, ok: ok).map(
        lambda index, image, label, filename, ok: (tf.constant(0, tf.int64), image, label,
                                                   filename))  # counted above
    return _batched(kept, batch_size, num_classes, counter, drop_remainder=False)


def _decoded(indexed_records, preprocess, strict):
    """(index, image, label, filename, ok) of each (index, record), in order; without
    `strict`, a record that fails to decode (a JPEG that looks complete) is dropped rather
    than ending a long run: the gap it leaves in the indices is what counts (or fills) it."""
    # The decoding map keeps the records' order (it stays parallel).
    dataset = indexed_records.map(lambda index, record: (index, *preprocess(record)),
                                  num_parallel_calls=AUTOTUNE, deterministic=True)
    return dataset if strict else dataset.ignore_errors(log_warning=True)


def _batched(examples, batch_size, num_classes, counter, drop_remainder, threads=0,
             distribute=None):
    """InputBatch of (damaged records before it, image, label, filename) examples, each label
    checked; the damaged records are added to `counter` as their batch is read. `distribute`:
    callable(dataset) -> the dataset served elsewhere (service.py), or None."""
    # After ignore_errors on purpose: a label the model cannot represent must stop the run.
    dataset = examples.map(lambda missing, image, label, filename: (
        missing, image, damaged.checked_label(label, num_classes, filename)))
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    if distribute is not None:
        dataset = distribute(dataset)
    dataset = dataset.prefetch(AUTOTUNE)
    if threads:
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        dataset = dataset.with_options(options)
    iterator = tf1.data.make_initializable_iterator(dataset)
    missing, images, labels = iterator.get_next()
    # Counted here, not inside the pipeline: a service's workers cannot reach this variable.
    with tf.control_dependencies([counter.assign_add(tf.reduce_sum(missing))]):
        images, labels = tf.identity(images), tf.identity(labels)
    return InputBatch(images=images, labels=labels, corrupt_records=counter.read_value(),
                      initializer=iterator.initializer)
