"""The TFRecord format of the original tensorflow/models Inception builders.

One `tf.train.Example` per image with the keys below; labels are 1-based, 0 is background.
Shards are named `<split>-00000-of-01024`. Both our builders and the training input pipeline
use this module, so the two cannot drift apart. TensorFlow is loaded only to make an Example,
so tools that need just the names here (the box CSV converter) never start it.
"""

import dataclasses
import os
import re

from common import files

LABELS_FILE = "labels.txt"  # beside the shards: line i names label i

SHARD_PATTERN = re.compile(r"^(?P<split>[a-z]+)-(?P<index>\d{5})-of-(?P<total>\d{5})$")


@dataclasses.dataclass(frozen=True)
class BoundingBox:
    """A box in normalised coordinates, 0 <= xmin < xmax <= 1 and 0 <= ymin < ymax <= 1."""
    xmin: float
    ymin: float
    xmax: float
    ymax: float


@dataclasses.dataclass(frozen=True)
class ImageRecord:
    """Everything one Example stores about an image (the JPEG bytes are already encoded)."""
    encoded_jpeg: bytes
    label: int
    text: str
    height: int
    width: int
    filename: str
    synset: str = ""
    boxes: tuple = ()


def make_example(record):
    """Returns the `tf.train.Example` for an `ImageRecord`, keyed as the original builders do."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def _bytes(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))

    def _ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def _floats(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))

    boxes = record.boxes
    features = {
        "image/height": _ints([record.height]),
        "image/width": _ints([record.width]),
        "image/colorspace": _bytes([b"RGB"]),
        "image/channels": _ints([3]),
        "image/class/label": _ints([record.label]),
        "image/class/synset": _bytes([record.synset.encode()]),
        "image/class/text": _bytes([record.text.encode()]),
        "image/object/bbox/xmin": _floats(b.xmin for b in boxes),
        "image/object/bbox/ymin": _floats(b.ymin for b in boxes),
        "image/object/bbox/xmax": _floats(b.xmax for b in boxes),
        "image/object/bbox/ymax": _floats(b.ymax for b in boxes),
        "image/object/bbox/label": _ints(record.label for _ in boxes),
        "image/format": _bytes([b"JPEG"]),
        "image/filename": _bytes([os.path.basename(record.filename).encode()]),
        "image/encoded": _bytes([record.encoded_jpeg]),
    }
    return tf.train.Example(features=tf.train.Features(feature=features))


def shard_name(split, index, num_shards):
    """`train-00003-of-00008` style name of shard `index` (0-based) of `num_shards`."""
    return f"{split}-{index:05d}-of-{num_shards:05d}"


def list_shards(data_dir, split):
    """Sorted paths of the complete shards of `split` in `data_dir` (temporary files ignored)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if not tf.io.gfile.isdir(data_dir):
        return []
    names = []
    for name in tf.io.gfile.listdir(data_dir):
        match = SHARD_PATTERN.match(name)
        if match and match.group("split") == split:
            names.append(name)
    return [os.path.join(data_dir, name) for name in sorted(names)]


def write_labels_file(path, labels):
    """Writes one label per line, in label order (line 1 is label 1), atomically."""
    files.write_text_atomically(path, "".join(f"{label}\n" for label in labels))


def read_labels_file(path):
    """Returns the non-empty lines of a labels file; line i (1-based) names label i."""
    return [line.strip() for line in files.read_text(path).splitlines() if line.strip()]
