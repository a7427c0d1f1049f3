"""Writes groups of TFRecord shards at once, one thread per group, each image read into a record.

What shard_writer hands each thread: a list of (shard path, ImageSource list) whose shards it
writes one after another. Each image becomes an upright RGB JPEG record (image_convert); an
undecodable or oversized one is skipped and named. The threads share one progress bar, and when
one fails (or the user interrupts) the others stop after their current image.
"""

import concurrent.futures
import os
import threading

import tensorflow as tf

from common import image_limits
from data import image_convert
from data import tfrecord_format
from data.image_convert import UndecodableImageError


def read_record(source, max_image_pixels=image_limits.MAX_IMAGE_PIXELS):
    """The ImageRecord for `source`; raises UndecodableImageError for a bad or unreadable file
    or one of more than `max_image_pixels` pixels."""
    try:
        with open(source.path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise UndecodableImageError(error.strerror or str(error)) from None
    encoded, height, width, orientation = image_convert.to_rgb_jpeg(data, max_image_pixels)
    return tfrecord_format.ImageRecord(
        encoded_jpeg=encoded, label=source.label, text=source.text, height=height, width=width,
        filename=os.path.basename(source.path), synset=source.synset,
        boxes=image_convert.upright_boxes(source.boxes, orientation))


def write_shard_groups(groups, max_image_pixels, bar):
    """Writes each group of [(shard path, sources)] on its own thread, counting every image on
    the ProgressBar `bar` (closed at the end); [(written, [(path, reason) skipped])] per group."""
    progress = _SharedProgress(bar)
    try:
        return _run_in_threads(groups, max_image_pixels, progress)
    finally:
        progress.close()


def _run_in_threads(groups, max_image_pixels, progress):
    """Runs `_write_shard_group` for each group on its own thread; [(written, skipped)]."""
    cancel = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(groups)) as pool:
        futures = [pool.submit(_write_shard_group, group, max_image_pixels, cancel, progress)
                   for group in groups]
        try:
            concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            for future in futures:
                if future.done() and future.exception() is not None:
                    raise future.exception()
            return [future.result() for future in futures]
        except BaseException:
            cancel.set()  # the other threads stop after their current image
            raise


class _Cancelled(Exception):
    """Another thread failed (or the user interrupted); this one stops early."""


def _write_shard_group(shards, max_image_pixels, cancel, progress):
    written, skipped = 0, []
    for temporary_path, sources in shards:
        with tf.io.TFRecordWriter(temporary_path) as writer:
            for source in sources:
                if cancel.is_set():
                    raise _Cancelled()
                try:
                    record = read_record(source, max_image_pixels)
                except UndecodableImageError as error:
                    skipped.append((source.path, str(error)))
                else:
                    writer.write(tfrecord_format.make_example(record).SerializeToString())
                    written += 1
                progress.update(1)
    return written, skipped


class _SharedProgress:
    """A ProgressBar that several threads update."""

    def __init__(self, bar):
        self._bar = bar
        self._lock = threading.Lock()

    def update(self, amount):
        with self._lock:
            self._bar.update(amount)

    def close(self):
        with self._lock:
            self._bar.close()
