"""Builds the TFRecord shards of labelled image files in the original Inception format.

What the folder-tree and ImageNet builders share: listing a folder's images, a fixed-seed
shuffle, spreading the images over shards and the shards over threads (each thread writes its
own range of shards; parallel_write writes them), the summary, and publishing the shards only
when all of them are whole and every label kept an image. Every shard is written under a
temporary name that does not look like a shard; the shards of every split are renamed into
place together at the end, so an interrupted or failed build leaves nothing that looks complete
(and the next build removes what a killed one left).
"""

import collections
import dataclasses
import os
import random

from common import image_limits
from common.progress import ProgressBar
from data import output_directory
from data import parallel_write
from data import tfrecord_format
from data.errors import BuildError

SHUFFLE_SEED = 12345
_NAMES_SHOWN = 5  # of the sub-folders a listing drops, in its one log line


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
    """What a build wrote for one split; `skipped` lists (path, reason) of the images left out
    (undecodable, or over the pixel limit)."""
    split: str
    num_shards: int
    written: int
    skipped: tuple


def list_folder(directory):
    """([sorted paths of the regular, non-hidden files], [sorted names of the non-hidden
    sub-folders]) directly inside `directory`: the files are the images, the sub-folders are
    what a build leaves out."""
    files, folders = [], []
    with os.scandir(directory) as entries:  # the entries' types come with the listing
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_file():
                files.append(entry.path)
            elif entry.is_dir():
                folders.append(entry.name)
    return sorted(files), sorted(folders)


def describe_dropped_folders(place, folders):
    """One log line naming the sub-folders `folders` (e.g. "daisy/extra") a listing of `place`
    left out, the first few by name; None when there are none."""
    if not folders:
        return None
    shown = ", ".join(folders[:_NAMES_SHOWN])
    more = f" and {len(folders) - _NAMES_SHOWN} more" if len(folders) > _NAMES_SHOWN else ""
    return (f"note: ignoring {len(folders)} sub-folder(s) of {place} (images are read only "
            f"from the folder itself; move them up to use them): {shown}{more}")


def shuffled(sources, seed=SHUFFLE_SEED):
    """`sources` in a fixed pseudo-random order, so classes mix within and across shards."""
    order = list(sources)
    random.Random(seed).shuffle(order)
    return order


def shard_bounds(num_images, num_shards):
    """[(start, end)] of each shard's images: consecutive, sizes differ by at most one."""
    cuts = [shard * num_images // num_shards for shard in range(num_shards + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def check_plans(plans, num_threads, max_image_pixels=image_limits.MAX_IMAGE_PIXELS):
    """Raises BuildError unless every split's shards divide evenly over `num_threads` threads
    and the pixel limit is positive."""
    if num_threads < 1:
        raise BuildError(f"--num_threads={num_threads} must be at least 1.")
    if max_image_pixels < 1:
        raise BuildError(f"--max_image_pixels={max_image_pixels} must be at least 1 (default "
                         f"{image_limits.MAX_IMAGE_PIXELS}).")
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


def build_shards(plans, output_dir, label_names, num_threads, log=print, progress_stream=None,
                 max_image_pixels=image_limits.MAX_IMAGE_PIXELS):
    """Writes the shards of every plan and `labels.txt` into `output_dir`.

    Images are shuffled with a fixed seed; undecodable and oversized ones are skipped, named in
    the summary and counted. Nothing is published unless every shard of every split is whole
    and every label of a split kept at least one image. Partial shards that killed builds on
    this machine left in `output_dir` are removed first.

    Args:
      plans: SplitPlan per split.
      output_dir: created if missing; must not hold shards of these splits already, nor
        shards of other splits or a labels.txt that name the labels differently.
      label_names: label_names[i - 1] names label i; written to labels.txt.
      num_threads: threads writing at once; must divide every plan's num_shards.
      log: called with each progress and summary line.
      progress_stream: where the progress bar goes (stderr by default).
      max_image_pixels: images declaring more pixels (width x height) are skipped undecoded.

    Returns:
      [SplitResult] in the order of `plans`.
    """
    check_plans(plans, num_threads, max_image_pixels)
    output_directory.check_output_directory(output_dir, [plan.split for plan in plans],
                                            label_names)
    os.makedirs(output_dir, exist_ok=True)
    cleanup = output_directory.describe_cleanup(
        output_dir, *output_directory.remove_stale_partial_files(output_dir))
    if cleanup:
        log(cleanup)
    writer = _SplitWriter(output_dir, num_threads, max_image_pixels, log, progress_stream)
    try:
        results = []
        for plan in plans:
            results.append(writer.write(plan))
            check_every_label_kept(plan, results[-1], label_names)
        for final_path, temporary_path in writer.temporary_paths.items():
            os.replace(temporary_path, final_path)
    except BaseException:
        _remove_files(writer.temporary_paths.values())
        raise
    tfrecord_format.write_labels_file(
        os.path.join(output_dir, tfrecord_format.LABELS_FILE), label_names)
    for line in summary_lines(results, output_dir):
        log(line)
    return results


def check_every_label_kept(plan, result, label_names):
    """Raises BuildError when every image `plan` has of some label was skipped in `result`:
    a split without a single example of a label trains or evaluates it meaninglessly."""
    skipped = dict(result.skipped)
    given = collections.Counter(source.label for source in plan.sources)
    lost = collections.Counter(source.label for source in plan.sources
                               if source.path in skipped)
    empty = sorted(label for label, count in given.items() if lost[label] == count)
    if not empty:
        return
    label = empty[0]
    example = next(source.path for source in plan.sources
                   if source.label == label and source.path in skipped)
    others = f" (and {len(empty) - 1} more label(s))" if len(empty) > 1 else ""
    reason = " ".join(skipped[example].split())
    raise BuildError(
        f"every {plan.split} image of label '{label_names[label - 1]}'{others} was skipped "
        f"({given[label]} file(s), e.g. {example}: {reason}); nothing was published: replace "
        "those files with readable images or leave the label out, then rerun.")


def summary_lines(results, output_dir):
    """Human-readable lines: images and shards per split, then every skipped image."""
    lines = [f"{result.split}: {result.written} images in {result.num_shards} shards in "
             f"{output_dir}" for result in results]
    skipped = [entry for result in results for entry in result.skipped]
    if skipped:
        lines.append(f"skipped {len(skipped)} image(s) that could not be decoded or were "
                     "too large:")
        lines.extend(f"  {path}: {reason}" for path, reason in skipped)
    return lines


class _SplitWriter:
    """Writes one split at a time into temporary shards, remembering them all for publishing."""

    def __init__(self, output_dir, num_threads, max_image_pixels, log, progress_stream):
        self.temporary_paths = {}  # final shard path -> temporary path
        self._output_dir = output_dir
        self._num_threads = num_threads
        self._max_image_pixels = max_image_pixels
        self._log = log
        self._progress_stream = progress_stream

    def write(self, plan):
        """Writes `plan`'s shards under temporary names; returns its SplitResult."""
        sources = shuffled(plan.sources)
        self._log(f"{plan.split}: {len(sources)} images -> {plan.num_shards} shards, "
                  f"{self._num_threads} thread(s)")
        shards = []
        for index, (start, end) in enumerate(shard_bounds(len(sources), plan.num_shards)):
            final_path = os.path.join(self._output_dir, tfrecord_format.shard_name(
                plan.split, index, plan.num_shards))
            self.temporary_paths[final_path] = output_directory.temporary_shard_path(final_path)
            shards.append((self.temporary_paths[final_path], sources[start:end]))
        bar = ProgressBar(len(sources), label="images", stream=self._progress_stream)
        per_thread = plan.num_shards // self._num_threads
        groups = [shards[thread * per_thread:(thread + 1) * per_thread]
                  for thread in range(self._num_threads)]
        outcomes = parallel_write.write_shard_groups(groups, self._max_image_pixels, bar)
        written = sum(count for count, _ in outcomes)
        skipped = tuple(entry for _, entries in outcomes for entry in entries)
        return SplitResult(split=plan.split, num_shards=plan.num_shards, written=written,
                           skipped=skipped)


def _remove_files(paths):
    """Removes the files among `paths` that exist (only ever our own temporary shards)."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
