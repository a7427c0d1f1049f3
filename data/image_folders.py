"""A folder tree of labelled images -> TFRecord shards (the original build_image_data.py).

Layout: `<split_directory>/<label>/<image>`. Labels are numbered from 1 in the order of the
labels file (0 is background); without a labels file, in the sorted order of the training
directory's sub-folders. Every label needs a non-empty folder in every split that is built;
only the files directly in a label folder are read (its sub-folders are named in the log).
"""

import dataclasses
import os

from common import image_limits
from data import shard_writer
from data import tfrecord_format
from data.errors import BuildError


@dataclasses.dataclass(frozen=True)
class FolderBuildOptions:
    """What to build. Empty directories are skipped; at least one split is needed.

    labels_file: one label (folder name) per line; "" for the sorted sub-folders of the
      training directory (of the validation directory when there is no training directory).
    max_image_pixels: images declaring more pixels (width x height) are skipped undecoded.
    """
    output_dir: str
    train_dir: str = ""
    validation_dir: str = ""
    labels_file: str = ""
    train_shards: int = 2
    validation_shards: int = 2
    num_threads: int = 2
    max_image_pixels: int = image_limits.MAX_IMAGE_PIXELS


def build_from_folders(options, log=print, progress_stream=None):
    """Builds the shards and labels.txt that `options` describe; returns [SplitResult].

    Raises BuildError (a cli.UserError) on bad input, before anything is written.
    """
    split_dirs = split_directories(options.train_dir, options.validation_dir)
    label_names = read_label_names(options.labels_file, next(iter(split_dirs.values())))
    shard_counts = {"train": options.train_shards, "validation": options.validation_shards}
    plans = []
    for split, directory in split_dirs.items():
        sources = find_images(directory, label_names, split, log=log)
        plans.append(shard_writer.SplitPlan(split, tuple(sources), shard_counts[split]))
        _log_ignored_folders(directory, label_names, log)
    return shard_writer.build_shards(plans, options.output_dir, label_names,
                                     options.num_threads, log=log,
                                     progress_stream=progress_stream,
                                     max_image_pixels=options.max_image_pixels)


def split_directories(train_dir, validation_dir):
    """{split: directory} of the splits to build; raises BuildError for a missing directory."""
    named = {"train": train_dir, "validation": validation_dir}
    chosen = {split: directory for split, directory in named.items() if directory}
    if not chosen:
        raise BuildError("nothing to build; pass --train_directory and/or "
                         "--validation_directory (folders of <label>/<image> files).")
    for split, directory in chosen.items():
        if not os.path.isdir(directory):
            raise BuildError(f"--{split}_directory={directory} is not a directory; pass the "
                             "folder that holds one sub-folder per label.")
    return chosen


def read_label_names(labels_file, label_dir):
    """Label names in label order (the first is label 1).

    From `labels_file` when given, else the sorted sub-folder names of `label_dir`. Raises
    BuildError when there are none or a name repeats.
    """
    if labels_file:
        if not os.path.isfile(labels_file):
            raise BuildError(f"--labels_file={labels_file} does not exist; pass a file with "
                             "one label (folder name) per line, or leave it out to use the "
                             "sub-folder names.")
        names = tfrecord_format.read_labels_file(labels_file)
        origin = labels_file
    else:
        names = sub_folders(label_dir)
        origin = label_dir
    if not names:
        raise BuildError(f"no labels in {origin}; expected one sub-folder per label "
                         "(<directory>/<label>/<image>) or a --labels_file.")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise BuildError(f"{origin} lists {', '.join(repeated)} more than once; each label "
                         "must appear once.")
    return names


def find_images(split_dir, label_names, split, log=print):
    """ImageSource of every file in `<split_dir>/<label>/`, label i + 1 for label_names[i].

    Sub-folders of the label folders are left out, and named in one `log` line. Raises
    BuildError when a label's folder is missing or holds no files.
    """
    sources, dropped = [], []
    for index, name in enumerate(label_names):
        paths, sub_folders_of_label = label_folder_images(split_dir, name, split)
        sources.extend(shard_writer.ImageSource(path=path, label=index + 1, text=name)
                       for path in paths)
        dropped.extend(f"{name}/{folder}" for folder in sub_folders_of_label)
    line = shard_writer.describe_dropped_folders(f"the {split} label folders in {split_dir}",
                                                 dropped)
    if line:
        log(line)
    return sources


def label_folder_images(split_dir, name, split):
    """(sorted image paths, sorted sub-folder names) of `<split_dir>/<name>`; raises BuildError
    if the folder is missing or holds no files."""
    folder = os.path.join(split_dir, name)
    if not os.path.isdir(folder):
        raise BuildError(f"label '{name}' has no folder {folder} in the {split} directory; "
                         "add the folder with its images, or leave the label out of "
                         "--labels_file.")
    paths, folders = shard_writer.list_folder(folder)
    if not paths:
        nested = (f" (only sub-folders, e.g. {folders[0]}: images must sit directly in the "
                  "label folder)" if folders else "")
        raise BuildError(f"the label folder {folder} holds no images{nested}; add images or "
                         f"remove label '{name}' (and its folder).")
    return paths, folders


def sub_folders(directory):
    """Sorted names of the non-hidden sub-folders of `directory`."""
    return sorted(name for name in os.listdir(directory)
                  if not name.startswith(".") and os.path.isdir(os.path.join(directory, name)))


def _log_ignored_folders(split_dir, label_names, log):
    ignored = sorted(set(sub_folders(split_dir)) - set(label_names))
    if ignored:
        log(f"note: ignoring folders of {split_dir} that are not labels: {', '.join(ignored)}")
