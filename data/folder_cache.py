"""A folder of images as a data set: its TFRecord shards, built once into a cache with the
builder's own code and rebuilt only when the folder's files change.

Layouts of `<folder>` (what --data_dir names):
- `<folder>/train/<label>/<image>` and `<folder>/validation/<label>/<image>`: built by
  image_folders.build_from_folders, so the shards are record for record those of the builder
  run by hand with the same shard counts;
- `<folder>/<label>/<image>` (or only `<folder>/train/<label>/<image>`) with a validation
  fraction f, 0 < f < 1: of each label's images, in sorted order, round(f * n) evenly spaced
  ones (at least one, never all) go to validation, the rest to train (split_by_fraction).

Where the cache lives and the stamp beside its shards that records the folder, the fraction
and a fingerprint of the folder's files (from stat: no image is read) are cache_stamp's. The
same fingerprint reuses the shards; any file added, removed or changed rebuilds them. A build
goes into a temporary sibling directory, the stamp is written last, and the directory is then
renamed into place: a killed build never leaves a cache that looks valid (the next build
removes what it left).

Evaluation, export and classify only know the folder a run trained on, not its fraction: a
folder of label folders given without a fraction uses the fraction its one cache recorded
(cache_stamp.recorded_fraction); with none or several, the error says what to pass.
"""

import os
import shutil

from common import files
from common import holdout
from data import cache_stamp
from data import image_folders
from data import output_directory
from data import shard_writer
from data import tfrecord_format
from data.errors import BuildError

# About 100 MB of photos a shard (the original's ImageNet shards held ~1250 images). Training
# reads at least 2 shards interleaved, in a shuffled order; counts are multiples of NUM_THREADS
# because build_shards gives each thread the same number of shards.
IMAGES_PER_SHARD = 1024
# Fixed (not the machine's cores), so the same folder gives the same shards on every machine.
NUM_THREADS = 2
SPLITS = ("train", "validation")
# Only what tells an image folder from another folder of sub-folders; a build reads every file.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def looks_like_image_folder(path):
    """Whether `path` is a local folder of label sub-folders of images (directly, or under
    train/ and validation/) that holds no TFRecord shards: a shards directory never is one."""
    if not path or files.is_url(path) or not os.path.isdir(path):
        return False
    if any(tfrecord_format.SHARD_PATTERN.match(name) for name in os.listdir(path)):
        return False
    return any(_holds_labelled_images(os.path.join(path, sub)) for sub in ("", *SPLITS))


def cached_shards(folder, validation_fraction=0.0, log=print, progress_stream=None):
    """The directory of `folder`'s shards and labels.txt, built (or rebuilt) when its files
    differ from those the cache was built from (see the module docstring).

    Args:
      folder: the image folder; relative paths are taken from the working directory.
      validation_fraction: the fraction of each label's images held out for validation in a
        folder of label folders; 0.0 uses the fraction of the folder's one cache. Ignored
        (with a note) for a folder with train/ and validation/.
      log: called with one line before building (or on reuse) and the builder's lines.
      progress_stream: where the build's progress bar goes (stderr by default).

    Raises BuildError (a cli.UserError) with one line saying what to do.
    """
    folder = os.path.abspath(folder)
    fraction, roots = folder_layout(folder, validation_fraction, log)
    target = cache_stamp.cache_path(folder, fraction)
    counts, digest = cache_stamp.fingerprint(folder, roots)
    stamp = {"version": cache_stamp.CACHE_VERSION, "folder": folder,
             "validation_fraction": fraction, "images": sum(counts.values()),
             "fingerprint": digest}
    previous = cache_stamp.read_stamp(target)
    how = (f"{fraction:g} of each label's images for validation" if fraction
           else "its train/ and validation/ folders")
    if previous == stamp and _is_complete(target):
        # A split taken from the cache, not asked for, is said: a user may expect a new one.
        given = ("" if validation_fraction or not fraction else
                 "; no --validation_fraction given, so the split of its last build: pass one "
                 "to split it otherwise")
        log(f"using the cached shards of {folder} in {target} ({how}; its files are "
            f"unchanged{given})")
        return target
    log(f"{'rebuilding' if previous else 'building'} TFRecord shards of the "
        f"{stamp['images']} images in {folder} ({how}) into {target}; they are reused until "
        "its files change")

    def build(output_dir, build_log):
        if fraction:
            return _build_by_fraction(roots[0][1], fraction, output_dir, build_log,
                                      progress_stream)
        return image_folders.build_from_folders(_split_options(output_dir, dict(roots), counts),
                                                log=build_log, progress_stream=progress_stream)
    _build_into_place(target, stamp, build, log)
    return target


def find_cache(folder, validation_fraction=0.0):
    """The cache directory of `folder` if one was built (not checked against the folder's files,
    nothing built), else "": what a trained run's labels.txt is read from."""
    folder = os.path.abspath(folder)
    try:
        fraction, _ = folder_layout(folder, validation_fraction, lambda line: None)
    except BuildError:
        return ""
    target = cache_stamp.cache_path(folder, fraction)
    return target if cache_stamp.read_stamp(target) is not None else ""


def folder_layout(folder, validation_fraction=0.0, log=print):
    """(fraction, ((split, directory), ...)) of the absolute `folder`: (0.0, the train and
    validation directories), or (the fraction, (("", the directory of the label folders),)).
    A fraction of 0.0 for label folders is looked up in the cache; BuildError without one."""
    problem = holdout.fraction_problem(validation_fraction)
    if problem:
        raise BuildError(f"--validation_fraction={validation_fraction:g} {problem}.")
    train, validation = (os.path.join(folder, split) for split in SPLITS)
    if _holds_sub_folders(train) and _holds_sub_folders(validation):
        if validation_fraction:
            log(f"note: ignoring --validation_fraction={validation_fraction:g}: {folder} has "
                "its own validation/ folder")
        return 0.0, (("train", train), ("validation", validation))
    root = train if _holds_sub_folders(train) and not os.path.exists(validation) else folder
    fraction = float(validation_fraction) or cache_stamp.recorded_fraction(folder, root)
    return fraction, (("", root),)


def shard_count(num_images):
    """Shards for `num_images`: about IMAGES_PER_SHARD each, at least 2, a multiple of
    NUM_THREADS."""
    shards = max(2, -(-num_images // IMAGES_PER_SHARD))
    return -(-shards // NUM_THREADS) * NUM_THREADS


def split_by_fraction(sources, fraction, label_names):
    """(train, validation) ImageSource lists of `sources` (find_images': each label's images in
    sorted order): of each label's n images, the round(fraction * n) at evenly spaced positions
    (at least 1, at most n - 1) go to validation. BuildError for a label with one image."""
    by_label = {}
    for source in sources:
        by_label.setdefault(source.label, []).append(source)
    train, validation = [], []
    for label, images in sorted(by_label.items()):
        count = len(images)
        if count < 2:
            raise BuildError(
                f"label '{label_names[label - 1]}' has only {count} image(s) "
                f"({images[0].path}); holding out a validation fraction needs at least 2 per "
                "label: add images, or make train/ and validation/ sub-folders.")
        held = min(count - 1, max(1, int(count * fraction + 0.5)))
        chosen = {(2 * index + 1) * count // (2 * held) for index in range(held)}
        for position, source in enumerate(images):
            (validation if position in chosen else train).append(source)
    return train, validation


def _build_by_fraction(root, fraction, output_dir, log, progress_stream):
    label_names = image_folders.read_label_names("", root)
    sources = image_folders.find_images(root, label_names, "image", log=log)
    train, validation = split_by_fraction(sources, fraction, label_names)
    plans = [shard_writer.SplitPlan(split, tuple(chosen), shard_count(len(chosen)))
             for split, chosen in zip(SPLITS, (train, validation))]
    return shard_writer.build_shards(plans, output_dir, label_names, NUM_THREADS, log=log,
                                     progress_stream=progress_stream)


def _split_options(output_dir, split_dirs, counts):
    return image_folders.FolderBuildOptions(
        output_dir=output_dir, train_dir=split_dirs["train"],
        validation_dir=split_dirs["validation"], train_shards=shard_count(counts["train"]),
        validation_shards=shard_count(counts["validation"]), num_threads=NUM_THREADS)


def _build_into_place(target, stamp, build, log):
    """Runs `build(directory, log)` into a temporary sibling of `target`, writes `stamp` there
    last, then renames it to `target` (replacing the old cache)."""
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    _remove_leftovers(parent, os.path.basename(target))
    temporary, old = (f"{target}.{kind}-{os.getpid()}" for kind in ("tmp", "old"))
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        # The builder's lines name the directory the shards end up in, not the temporary one.
        build(temporary, lambda line: log(str(line).replace(temporary, target)))
        cache_stamp.write_stamp(temporary, stamp)
        if os.path.isdir(target):
            os.rename(target, old)
        try:
            os.rename(temporary, target)
        except OSError:
            # Unless another process just built the same cache.
            if cache_stamp.read_stamp(target) != stamp:
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def _remove_leftovers(parent, name):
    """Removes the `<name>.tmp-<pid>` / `.old-<pid>` directories of builds that were killed."""
    for entry in os.listdir(parent):
        match = cache_stamp.LEFTOVER.search(entry)
        if entry.startswith(f"{name}.") and match and \
                not output_directory.process_running(int(match["pid"])):
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _is_complete(directory):
    return os.path.isfile(os.path.join(directory, tfrecord_format.LABELS_FILE)) and all(
        tfrecord_format.list_shards(directory, split) for split in SPLITS)


def _holds_sub_folders(directory):
    return os.path.isdir(directory) and bool(image_folders.sub_folders(directory))


def _holds_labelled_images(directory):
    """Whether some label sub-folder of `directory` holds a file named like an image."""
    if not os.path.isdir(directory):
        return False
    for label in image_folders.sub_folders(directory):
        paths, _ = shard_writer.list_folder(os.path.join(directory, label))
        if any(path.lower().endswith(IMAGE_EXTENSIONS) for path in paths):
            return True
    return False
