"""Which data set a run trains on: where its shards are, its classes and its sizes.

Known sets: `demo` (embedded, generated on first use), `imagenet` (1000 classes), `flowers`
(5 classes). Any directory with a `labels.txt` (one label per line, line i is label i) works as
`custom`; shards without one need `num_classes`. Labels are 1-based; 0 is background, so the
network has one logit more than there are labels.

A folder of images (`<folder>/{train,validation}/<label>/<image>`, or `<folder>/<label>/<image>`
with a validation fraction) is a data set too: its shards are built once into a cache and
rebuilt when its files change (data/folder_cache.py). Its Dataset keeps the folder as
`data_dir`, what a run records (so resuming with the same --data_dir notes no change, and
evaluation, export and classify find the same cache from it), and reads `shard_dir`.
"""

import dataclasses
import os

import tensorflow as tf

from common import cli
from common import error_lines
from data import demo_data
from data import folder_cache
from data import tfrecord_format
from data.errors import BuildError
from inception.config import recipe
from inception.config.rules import DATASET_NAMES


class DataError(cli.UserError):
    """The data directory or its shards cannot be used; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class KnownDataset:
    """A standard data set's size: its labels and the examples of each subset (so a run need
    not count them)."""
    num_labels: int
    examples: dict


KNOWN_DATASETS = {
    "imagenet": KnownDataset(1000, {"train": 1281167, "validation": 50000}),
    "flowers": KnownDataset(5, {"train": 3170, "validation": 500}),
}


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A resolved data set.

    data_dir: the directory the user named (and a run records): shards, or an image folder.
    num_classes: number of logits, background included (labels.txt lines + 1).
    label_names: label_names[i - 1] names label i; empty when unknown.
    shard_dir: where the shards and labels.txt are: `data_dir`, or an image folder's cache.
    """
    name: str
    data_dir: str
    num_classes: int
    label_names: tuple = ()
    known_examples: dict = dataclasses.field(default_factory=dict)
    shard_dir: str = ""

    def __post_init__(self):
        if not self.shard_dir:
            object.__setattr__(self, "shard_dir", self.data_dir)

    @property
    def defaults(self):
        """recipe.TrainingDefaults of this data set (recipe.defaults_for)."""
        return recipe.defaults_for(self.name)

    def shards(self, subset):
        """Sorted shard paths of `subset`; raises DataError when there are none."""
        paths = tfrecord_format.list_shards(self.shard_dir, subset)
        if not paths:
            raise DataError(f"no '{subset}-*-of-*' shards in {self.shard_dir}; build them with "
                            "`bin/bazel run //data:build_image_data` or pass the right --data_dir.")
        return paths

    def num_examples(self, subset, log=None, counted=None):
        """Examples in `subset`: known for the standard sets, else `counted` when the caller
        has counted them already, otherwise counted from the shards (reading them once; `log`
        announces it, since it takes a while on a large set)."""
        if subset in self.known_examples:
            return self.known_examples[subset]
        count = counted
        if count is None:
            shards = self.shards(subset)
            announce_count(shards, f"the '{subset}' records", log, " (pass --dataset=imagenet "
                           "or flowers to skip this for those sets)")
            count = count_records(shards)
        if count == 0:
            raise DataError(f"the '{subset}' shards in {self.shard_dir} hold no records; rebuild "
                            "them or pass another --data_dir.")
        return count


def announce_count(shards, what, log, hint=""):
    """Says with `log` (when given) that `what` is being counted in the files `shards`, when
    they are many enough for that to take a while; `hint`: how to skip it, where there is a
    way."""
    if log is not None and len(shards) > 4:
        log(f"counting {what} in {len(shards)} shards of {os.path.dirname(shards[0])}{hint}...")


def count_records(paths):
    """Number of records in the TFRecord files `paths`; raises DataError on a damaged file."""
    total = 0
    with tf.init_scope():  # eager, even when called while a graph is being built
        for path in paths:
            try:
                total += int(tf.data.TFRecordDataset(path).reduce(
                    tf.constant(0, tf.int64), lambda count, _: count + 1))
            except tf.errors.OpError as error:
                raise DataError(f"cannot read {path}: {error_lines.cause_of(error)}; rebuild "
                                "the shard or remove it.") from None
    return total


def resolve_dataset(name, data_dir, num_labels=None, log=print, validation_fraction=0.0):
    """Finds the data set a run uses.

    Args:
      name: one of DATASET_NAMES, or "" to infer: the demo without `data_dir`, else `custom`.
      data_dir: directory of the shards, or a folder of images (its cached shards are used,
        built first when missing or out of date); "" for the demo's cache.
      num_labels: labels in the data, background excluded (--num_classes); needed only for
        shards that come without a labels.txt and are not a known set.
      log: progress output (the demo's first generation, an image folder's build).
      validation_fraction: for a folder of label folders (no train/ and validation/), the
        fraction of each label's images held out for validation (--validation_fraction); 0.0
        uses the fraction the folder's one cache was built with (what evaluation, export and
        classify of a run trained on the folder rely on).

    Returns:
      A Dataset.
    """
    name = name or ("custom" if data_dir else "demo")
    if name not in DATASET_NAMES:
        raise DataError(f"unknown --dataset={name!r}; use one of {', '.join(DATASET_NAMES)}.")
    if name == "demo":
        data_dir = data_dir or demo_data.ensure_demo_data(log=log)
    elif not data_dir:
        raise DataError(f"--dataset={name} needs --data_dir=<directory of its TFRecord shards>.")
    if not tf.io.gfile.isdir(data_dir):
        raise DataError(f"--data_dir={data_dir} does not exist; pass the directory that holds "
                        "the train-*/validation-* shards.")
    shard_dir = data_dir
    if name != "demo" and folder_cache.looks_like_image_folder(data_dir):
        shard_dir = image_folder_shards(data_dir, validation_fraction, log)
    elif validation_fraction:
        raise DataError(f"--validation_fraction applies to a folder of images, and {data_dir} "
                        "holds TFRecord shards (their validation split is the validation-* "
                        "shards); drop --validation_fraction.")
    if name == "custom" and not any(tfrecord_format.list_shards(shard_dir, subset)
                                    for subset in ("train", "validation")):
        raise DataError(_no_shards_message(data_dir))
    label_names = read_label_names(shard_dir)
    # A known set's sizes are those of its standard build, not of an image folder's split.
    known = KNOWN_DATASETS.get(name) if shard_dir == data_dir else None
    num_labels = num_labels or _label_count(name, shard_dir, label_names, known)
    if label_names and len(label_names) != num_labels:
        raise DataError(f"--num_classes={num_labels} but {shard_dir}/{tfrecord_format.LABELS_FILE}"
                        f" lists {len(label_names)} labels; drop --num_classes or fix the file.")
    return Dataset(name=name, data_dir=data_dir, num_classes=num_labels + 1,
                   label_names=label_names,
                   known_examples=dict(known.examples) if known else {}, shard_dir=shard_dir)


def image_folder_shards(folder, validation_fraction=0.0, log=print):
    """The cached shard directory of the image folder `folder`, built when needed
    (folder_cache.cached_shards); its errors become DataError."""
    try:
        return folder_cache.cached_shards(folder, validation_fraction, log=log)
    except BuildError as error:
        raise DataError(str(error)) from None


def labels_dir(data_dir):
    """The directory whose labels.txt names the labels of a run that trained on `data_dir`: an
    image folder's cache (found without building or checking it), else `data_dir` itself."""
    if folder_cache.looks_like_image_folder(data_dir):
        return folder_cache.find_cache(data_dir) or data_dir
    return data_dir


def _label_count(name, data_dir, label_names, known):
    """Labels of a data set for which --num_classes was not given: labels.txt, else the known
    set's or the demo's count."""
    if label_names:
        return len(label_names)
    if known:
        return known.num_labels
    if name == "demo":
        return len(demo_data.CLASS_NAMES)
    raise DataError(f"{data_dir} has no {tfrecord_format.LABELS_FILE}; pass "
                    "--num_classes=<number of labels> or --dataset=imagenet|flowers.")


def _no_shards_message(data_dir):
    """What to do with a --data_dir that holds no shards: empty, a folder of images, or other."""
    entries = tf.io.gfile.listdir(data_dir)
    command = "`bin/bazel run //data:build_image_data -- --train_directory=<folder>/train " \
              "--validation_directory=<folder>/validation --output_directory=<shards>`"
    folders = [name.rstrip("/") for name in entries
               if tf.io.gfile.isdir(os.path.join(data_dir, name))]
    if not entries:
        return (f"--data_dir={data_dir} is empty: no train-*-of-* or validation-*-of-* shards; "
                f"build them from a folder of images with {command}, then pass that "
                "--output_directory as --data_dir.")
    if folders:
        return (f"--data_dir={data_dir} holds folders ({', '.join(sorted(folders)[:3])}"
                f"{', ...' if len(folders) > 3 else ''}), not TFRecord shards; if they are "
                f"images, build shards from them with {command}, then pass that "
                "--output_directory as --data_dir.")
    return (f"--data_dir={data_dir} holds no train-*-of-* or validation-*-of-* shards; pass the "
            f"directory of your shards, or build them from a folder of images with {command}.")


def read_label_names(directory, log=None):
    """The names in `directory`'s labels.txt (label i is names[i - 1]); () when it has none,
    noting through `log` that the labels will be shown as numbers."""
    path = os.path.join(directory, tfrecord_format.LABELS_FILE)
    if directory and tf.io.gfile.exists(path):
        return tuple(tfrecord_format.read_labels_file(path))
    if log is not None:
        log(f"note: no {path}; labels will be shown as numbers.")
    return ()
