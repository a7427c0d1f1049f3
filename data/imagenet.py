"""ImageNet (ILSVRC2012) -> TFRecord shards (the original build_imagenet_data.py).

Training images: `<train>/<synset>/*.JPEG`. Validation images: either flat in one folder with a
labels file naming each image's synset, one per line in sorted file-name order (the original
`imagenet_2012_validation_synset_labels.txt`), or in `<validation>/<synset>/` folders. Labels
are 1-based in the order of the synsets file (label 1 = n01440764 for the standard 1000).
Records also carry the synset, its human-readable WordNet name and, from a bounding-box CSV
(see bounding_boxes.py), the image's boxes.
"""

import dataclasses
import os
import re

from common import image_limits
from data import bounding_boxes
from data import image_folders
from data import shard_writer
from data import tfrecord_format
from data.errors import BuildError

_DATA_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SYNSETS_FILE = os.path.join(_DATA_DIR, "imagenet_lsvrc_2015_synsets.txt")
DEFAULT_METADATA_FILE = os.path.join(_DATA_DIR, "imagenet_metadata.txt")


@dataclasses.dataclass(frozen=True)
class ImageNetBuildOptions:
    """What to build; defaults are the original's (1024 / 128 shards, 8 threads).

    validation_labels_file: "" when the validation images sit in `<synset>/` folders.
    synsets_file: one synset per line, line i is label i.
    metadata_file: `<synset><TAB><human-readable name>` lines (extra synsets are ignored).
    bounding_box_file: the box CSV, "" for no boxes.
    max_image_pixels: images declaring more pixels (width x height) are skipped undecoded.
    """
    output_dir: str
    train_dir: str = ""
    validation_dir: str = ""
    validation_labels_file: str = ""
    synsets_file: str = DEFAULT_SYNSETS_FILE
    metadata_file: str = DEFAULT_METADATA_FILE
    bounding_box_file: str = ""
    train_shards: int = 1024
    validation_shards: int = 128
    num_threads: int = 8
    max_image_pixels: int = image_limits.MAX_IMAGE_PIXELS


def build_imagenet(options, log=print, progress_stream=None):
    """Builds the ImageNet shards and labels.txt (the synsets) that `options` describe.

    Returns [SplitResult]. Raises BuildError (a cli.UserError) on bad input, before anything is
    written.
    """
    split_dirs = image_folders.split_directories(options.train_dir, options.validation_dir)
    synsets = read_synsets(options.synsets_file)
    human_names = read_human_names(options.metadata_file, synsets)
    boxes = (bounding_boxes.read_box_csv(options.bounding_box_file)
             if options.bounding_box_file else {})
    shard_counts = {"train": options.train_shards, "validation": options.validation_shards}
    plans = []
    for split, directory in split_dirs.items():
        if split == "validation" and options.validation_labels_file:
            sources = flat_validation_images(directory, options.validation_labels_file, synsets,
                                             log=log)
        else:
            sources = image_folders.find_images(directory, synsets, split, log=log)
        sources = [with_imagenet_details(source, human_names, boxes) for source in sources]
        with_boxes = sum(1 for source in sources if source.boxes)
        log(f"{split}: {with_boxes} of {len(sources)} images have bounding boxes")
        plans.append(shard_writer.SplitPlan(split, tuple(sources), shard_counts[split]))
    return shard_writer.build_shards(plans, options.output_dir, synsets, options.num_threads,
                                     log=log, progress_stream=progress_stream,
                                     max_image_pixels=options.max_image_pixels)


def read_synsets(path):
    """The synsets of `path`, one per line, in label order; raises BuildError if unusable."""
    if not os.path.isfile(path):
        raise BuildError(f"--labels_file={path} does not exist; pass the list of synsets, one "
                         "per line (data/imagenet_lsvrc_2015_synsets.txt has the standard 1000).")
    synsets = tfrecord_format.read_labels_file(path)
    if not synsets:
        raise BuildError(f"--labels_file={path} is empty; it should list one synset per line.")
    repeated = sorted({synset for synset in synsets if synsets.count(synset) > 1})
    if repeated:
        raise BuildError(f"{path} lists {', '.join(repeated[:5])} more than once; each synset "
                         "must appear once.")
    return synsets


def read_human_names(path, synsets):
    """{synset: human-readable name} for `synsets` from a `<synset><TAB><name>` file.

    Raises BuildError when the file is missing or lacks one of `synsets`.
    """
    if not os.path.isfile(path):
        raise BuildError(f"--imagenet_metadata_file={path} does not exist; pass a file of "
                         "`<synset><TAB><name>` lines (data/imagenet_metadata.txt).")
    names = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            parts = re.split(r"\t|\s+", line.strip(), maxsplit=1)
            if len(parts) == 2:
                names[parts[0]] = parts[1].strip()
    missing = [synset for synset in synsets if synset not in names]
    if missing:
        raise BuildError(f"{path} has no name for {len(missing)} synset(s) (e.g. {missing[0]}); "
                         "add `<synset><TAB><name>` lines or fix --labels_file.")
    return {synset: names[synset] for synset in synsets}


def flat_validation_images(validation_dir, labels_path, synsets, log=print):
    """ImageSource per image of a flat validation folder, labelled by `labels_path`.

    Line i of `labels_path` is the synset of the i-th image in sorted file-name order; the
    folder's sub-folders are left out, and named in one `log` line. Raises BuildError when the
    counts differ or a line is not one of `synsets`.
    """
    if not os.path.isfile(labels_path):
        raise BuildError(f"--validation_labels_file={labels_path} does not exist; pass the "
                         "file with one synset per validation image, or leave the flag out "
                         "when the images are in <synset>/ folders.")
    paths, folders = shard_writer.list_folder(validation_dir)
    line = shard_writer.describe_dropped_folders(f"the flat validation folder {validation_dir}",
                                                 folders)
    if line:
        log(line)
    labels = tfrecord_format.read_labels_file(labels_path)
    if len(paths) != len(labels):
        raise BuildError(f"{validation_dir} holds {len(paths)} files but {labels_path} lists "
                         f"{len(labels)} synsets; they must match one to one (sorted file "
                         "names), so check that the folder holds only the validation images.")
    label_of = {synset: index + 1 for index, synset in enumerate(synsets)}
    sources = []
    for number, (path, synset) in enumerate(zip(paths, labels), start=1):
        if synset not in label_of:
            raise BuildError(f"{labels_path} line {number} names {synset!r}, which is not in "
                             "--labels_file; fix the line or the synsets list.")
        sources.append(shard_writer.ImageSource(path=path, label=label_of[synset], text=synset))
    return sources


def with_imagenet_details(source, human_names, boxes):
    """`source` (whose text is its synset) with the human-readable text, synset and boxes."""
    synset = source.text
    return dataclasses.replace(source, synset=synset, text=human_names[synset],
                               boxes=boxes.get(os.path.basename(source.path), ()))
