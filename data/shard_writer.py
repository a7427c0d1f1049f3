"""Writes labelled image files into TFRecord shards in the original Inception format.

What the folder-tree and ImageNet builders share: turning any image Pillow reads into an RGB
JPEG, a fixed-seed shuffle, spreading the images over shards and the shards over threads (each
thread writes its own range of shards), a progress bar, and publishing the shards only when all
of them are whole. Every shard is written under a temporary name that does not look like a
shard; the shards of every split are renamed into place together at the end, so an interrupted
or failed build leaves nothing that looks complete.
"""

import concurrent.futures
import dataclasses
import io
import os
import random
import threading

import numpy as np
import tensorflow as tf
from PIL import Image

from common.progress import ProgressBar
from data import tfrecord_format
from data.errors import BuildError

SHUFFLE_SEED = 12345
# Pillow's advice: above 95 the file grows a lot for no visible gain.
JPEG_QUALITY = 95
# The training pipeline treats a JPEG as complete only when its end-of-image marker lies within
# this many bytes of the end (image_processing.is_complete_jpeg); other JPEGs are re-encoded.
_JPEG_END_WINDOW = 64
_JPEG_END_MARKER = b"\xff\xd9"
_PASS_THROUGH_FORMATS = ("JPEG", "MPO")  # MPO: a camera JPEG with extra frames appended
_PILLOW_DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


class UndecodableImageError(Exception):
    """An image file that cannot be read or decoded; the builder skips it."""


@dataclasses.dataclass(frozen=True)
class ImageSource:
    """One image file to write, and what its Example says about it.

    label: 1-based class (0 is background); text: the class's name; boxes: BoundingBox tuple.
    """
    path: str
    label: int
    text: str
    synset: str = ""
    boxes: tuple = ()


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """The images of one split (e.g. "train") and the number of shards to spread them over."""
    split: str
    sources: tuple
    num_shards: int


@dataclasses.dataclass(frozen=True)
class SplitResult:
    """What a build wrote for one split; `skipped` lists (path, reason) of undecodable images."""
    split: str
    num_shards: int
    written: int
    skipped: tuple


def to_rgb_jpeg(data):
    """Returns (jpeg_bytes, height, width) for the image file contents `data`.

    A complete RGB JPEG passes through byte for byte; PNG, greyscale (8 or 16 bit), CMYK and
    anything else Pillow reads is converted to an RGB JPEG (transparent areas over white). Raises
    UndecodableImageError when `data` is not an image that decodes completely.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            if _can_pass_through(image, data):
                return data, image.height, image.width
            rgb = _flatten_to_rgb(image)
            buffer = io.BytesIO()
            rgb.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    except Image.UnidentifiedImageError:
        raise UndecodableImageError("not an image file (no image format recognizes it)") from None
    except _PILLOW_DECODE_ERRORS as error:
        raise UndecodableImageError(str(error) or type(error).__name__) from None
    return buffer.getvalue(), rgb.height, rgb.width


def _can_pass_through(image, data):
    return (image.format in _PASS_THROUGH_FORMATS and image.mode == "RGB"
            and _JPEG_END_MARKER in data[-_JPEG_END_WINDOW:])


def _flatten_to_rgb(image):
    if image.mode.startswith("I;16"):
        # 16-bit greyscale: Pillow's own conversion would clip everything above 255 to white.
        pixels = np.clip(np.asarray(image, dtype=np.int64) >> 8, 0, 255).astype(np.uint8)
        return Image.fromarray(pixels, "L").convert("RGB")
    has_alpha = image.mode in ("RGBA", "LA", "PA") or (
        image.mode == "P" and "transparency" in image.info)
    if not has_alpha:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def read_record(source):
    """The ImageRecord for `source`; raises UndecodableImageError for a bad or unreadable file."""
    try:
        with open(source.path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise UndecodableImageError(error.strerror or str(error)) from None
    encoded, height, width = to_rgb_jpeg(data)
    return tfrecord_format.ImageRecord(
        encoded_jpeg=encoded, label=source.label, text=source.text, height=height, width=width,
        filename=os.path.basename(source.path), synset=source.synset, boxes=source.boxes)


def list_image_files(directory):
    """Sorted paths of the regular, non-hidden files directly inside `directory`."""
    names = sorted(name for name in os.listdir(directory) if not name.startswith("."))
    paths = (os.path.join(directory, name) for name in names)
    return [path for path in paths if os.path.isfile(path)]


def shuffled(sources, seed=SHUFFLE_SEED):
    """`sources` in a fixed pseudo-random order, so classes mix within and across shards."""
    order = list(sources)
    random.Random(seed).shuffle(order)
    return order


def shard_bounds(num_images, num_shards):
    """[(start, end)] of each shard's images: consecutive, sizes differ by at most one."""
    cuts = [shard * num_images // num_shards for shard in range(num_shards + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def check_plans(plans, num_threads):
    """Raises BuildError unless every split's shards divide evenly over `num_threads` threads."""
    if num_threads < 1:
        raise BuildError(f"--num_threads={num_threads} must be at least 1.")
    if not plans:
        raise BuildError("nothing to build; pass --train_directory and/or "
                         "--validation_directory.")
    for plan in plans:
        if plan.num_shards < 1:
            raise BuildError(f"--{plan.split}_shards={plan.num_shards} must be at least 1.")
        if plan.num_shards % num_threads:
            raise BuildError(
                f"--{plan.split}_shards={plan.num_shards} is not a multiple of "
                f"--num_threads={num_threads}; each thread writes the same number of shards, "
                "so pick a shard count divisible by the thread count.")
        if not plan.sources:
            raise BuildError(f"no {plan.split} images found; check --{plan.split}_directory.")


def check_output_directory(output_dir, splits, label_names):
    """Raises BuildError if `output_dir` already holds shards of `splits` or other labels."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise BuildError(f"--output_directory={output_dir} is a file; pass a directory.")
    for split in splits:
        existing = tfrecord_format.list_shards(output_dir, split)
        if existing:
            raise BuildError(
                f"{output_dir} already contains {len(existing)} {split} shard(s) (e.g. "
                f"{os.path.basename(existing[0])}); use another --output_directory or delete "
                "them first.")
    labels_path = os.path.join(output_dir, tfrecord_format.LABELS_FILE)
    if os.path.exists(labels_path) and (
            tfrecord_format.read_labels_file(labels_path) != list(label_names)):
        raise BuildError(f"{labels_path} already exists and lists other labels; use another "
                         "--output_directory or delete that file first.")


def build_shards(plans, output_dir, label_names, num_threads, log=print, progress_stream=None):
    """Writes the shards of every plan and `labels.txt` into `output_dir`.

    Images are shuffled with a fixed seed; undecodable ones are skipped, named in the summary
    and counted. Nothing is published unless every shard of every split is whole.

    Args:
      plans: SplitPlan per split.
      output_dir: created if missing; must not hold shards of these splits already.
      label_names: label_names[i - 1] names label i; written to labels.txt.
      num_threads: threads writing at once; must divide every plan's num_shards.
      log: called with each progress and summary line.
      progress_stream: where the progress bar goes (stderr by default).

    Returns:
      [SplitResult] in the order of `plans`.
    """
    check_plans(plans, num_threads)
    check_output_directory(output_dir, [plan.split for plan in plans], label_names)
    os.makedirs(output_dir, exist_ok=True)
    temporary_paths = {}  # final shard path -> temporary path
    try:
        results = [_write_split(plan, output_dir, num_threads, temporary_paths, log,
                                progress_stream) for plan in plans]
        for final_path, temporary_path in temporary_paths.items():
            os.replace(temporary_path, final_path)
    except BaseException:
        _remove_files(temporary_paths.values())
        raise
    tfrecord_format.write_labels_file(
        os.path.join(output_dir, tfrecord_format.LABELS_FILE), label_names)
    for line in summary_lines(results, output_dir):
        log(line)
    return results


def summary_lines(results, output_dir):
    """Human-readable lines: images and shards per split, then every skipped image."""
    lines = [f"{result.split}: {result.written} images in {result.num_shards} shards in "
             f"{output_dir}" for result in results]
    skipped = [entry for result in results for entry in result.skipped]
    if skipped:
        lines.append(f"skipped {len(skipped)} image(s) that could not be decoded:")
        lines.extend(f"  {path}: {reason}" for path, reason in skipped)
    return lines


def temporary_shard_path(final_path):
    """Where a shard is written before it is whole; the name never matches a shard's pattern."""
    return f"{final_path}.partial-{os.getpid()}"


def _write_split(plan, output_dir, num_threads, temporary_paths, log, progress_stream):
    sources = shuffled(plan.sources)
    log(f"{plan.split}: {len(sources)} images -> {plan.num_shards} shards, "
        f"{num_threads} thread(s)")
    shards = []
    for index, (start, end) in enumerate(shard_bounds(len(sources), plan.num_shards)):
        final_path = os.path.join(output_dir,
                                  tfrecord_format.shard_name(plan.split, index, plan.num_shards))
        temporary_paths[final_path] = temporary_shard_path(final_path)
        shards.append((temporary_paths[final_path], sources[start:end]))
    progress = _SharedProgress(ProgressBar(len(sources), label="images", stream=progress_stream))
    per_thread = plan.num_shards // num_threads
    groups = [shards[thread * per_thread:(thread + 1) * per_thread]
              for thread in range(num_threads)]
    try:
        outcomes = _run_in_threads(groups, progress)
    finally:
        progress.close()
    written = sum(count for count, _ in outcomes)
    skipped = tuple(entry for _, entries in outcomes for entry in entries)
    return SplitResult(split=plan.split, num_shards=plan.num_shards, written=written,
                       skipped=skipped)


def _run_in_threads(groups, progress):
    """Runs `_write_shard_group` for each group on its own thread; [(written, skipped)]."""
    cancel = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(groups)) as pool:
        futures = [pool.submit(_write_shard_group, group, cancel, progress) for group in groups]
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


def _write_shard_group(shards, cancel, progress):
    written, skipped = 0, []
    for temporary_path, sources in shards:
        with tf.io.TFRecordWriter(temporary_path) as writer:
            for source in sources:
                if cancel.is_set():
                    raise _Cancelled()
                try:
                    record = read_record(source)
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


def _remove_files(paths):
    """Removes the files among `paths` that exist (only ever our own temporary shards)."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
