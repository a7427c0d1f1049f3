"""Bounding boxes for the ImageNet builder: ILSVRC XML annotations -> CSV -> boxes per image.

The CSV has one box per line, `filename,xmin,ymin,xmax,ymax`, coordinates normalised to [0, 1]
by the image's width and height (the format of the original process_bounding_boxes.py). An
image may have several lines; images without boxes have none.
"""

import dataclasses
import math
import os
import xml.etree.ElementTree as ElementTree

from common import cli
from common import files
from data import tfrecord_format
from data.errors import BuildError

IMAGE_EXTENSION = ".JPEG"


class AnnotationError(cli.UserError):
    """An XML annotation file that cannot be used."""


@dataclasses.dataclass(frozen=True)
class ConversionSummary:
    """What `convert_annotations` did; `skipped` lists (path, reason) of unusable XML files."""
    files: int
    images_with_boxes: int
    boxes: int
    skipped: tuple


def clipped_box(xmin, ymin, xmax, ymax):
    """BoundingBox with the coordinates clipped to [0, 1]; None when nothing of it is left."""
    values = [float(value) for value in (xmin, ymin, xmax, ymax)]
    if not all(math.isfinite(value) for value in values):
        return None
    xmin, ymin, xmax, ymax = (min(max(value, 0.0), 1.0) for value in values)
    if xmin >= xmax or ymin >= ymax:
        return None
    return tfrecord_format.BoundingBox(xmin=xmin, ymin=ymin, xmax=xmax, ymax=ymax)


def boxes_from_annotation(xml_path):
    """The normalised, clipped boxes of one ILSVRC annotation file, in file order.

    Reads `annotation/size/{width,height}` and every `annotation/object/bndbox/{xmin,ymin,
    xmax,ymax}` (pixels). Raises AnnotationError for a file that is not such an annotation.
    """
    try:
        root = ElementTree.parse(xml_path).getroot()
        width = float(root.findtext("size/width"))
        height = float(root.findtext("size/height"))
        if width <= 0 or height <= 0:
            raise AnnotationError(f"image size {width:g}x{height:g} is not positive")
        boxes = []
        for bndbox in root.findall("object/bndbox"):
            xmin, ymin, xmax, ymax = (float(bndbox.findtext(key))
                                      for key in ("xmin", "ymin", "xmax", "ymax"))
            box = clipped_box(xmin / width, ymin / height, xmax / width, ymax / height)
            if box is not None:
                boxes.append(box)
        return boxes
    except ElementTree.ParseError as error:
        raise AnnotationError(f"not valid XML ({error})") from None
    except (TypeError, ValueError) as error:  # a missing or non-numeric element
        raise AnnotationError(f"missing or bad size/bndbox values ({error})") from None


def annotation_files(annotations_dir):
    """Sorted paths of every `*.xml` file under `annotations_dir`, sub-folders included."""
    paths = []
    for folder, _, names in os.walk(annotations_dir):
        paths.extend(os.path.join(folder, name) for name in names if name.endswith(".xml"))
    return sorted(paths)


def csv_lines(filename, boxes):
    """The CSV lines (without newline) of `boxes` of the image `filename`."""
    return [f"{filename},{box.xmin:.4f},{box.ymin:.4f},{box.xmax:.4f},{box.ymax:.4f}"
            for box in boxes]


@dataclasses.dataclass(frozen=True)
class BoxCsvOptions:
    """//data:process_bounding_boxes: every `*.xml` under `annotations_dir` (searched
    recursively) into the box CSV `output_file`."""
    annotations_dir: str = ""
    output_file: str = ""


def convert_annotations(annotations_dir, output_file):
    """Writes the box CSV of every XML annotation under `annotations_dir` to `output_file`.

    The image of `<name>.xml` is `<name>.JPEG`. Unusable XML files are skipped and listed in
    the returned ConversionSummary. Raises BuildError when there is no XML file at all.
    """
    if not os.path.isdir(annotations_dir):
        raise BuildError(f"--annotations_directory={annotations_dir} is not a directory; pass "
                         "the folder the ILSVRC bounding-box archive was extracted into.")
    paths = annotation_files(annotations_dir)
    if not paths:
        raise BuildError(f"no .xml annotation files under {annotations_dir}; extract the "
                         "bounding-box archive there first.")
    lines, skipped, images_with_boxes = [], [], 0
    for path in paths:
        try:
            boxes = boxes_from_annotation(path)
        except AnnotationError as error:
            skipped.append((path, str(error)))
            continue
        image = os.path.splitext(os.path.basename(path))[0] + IMAGE_EXTENSION
        lines.extend(csv_lines(image, boxes))
        images_with_boxes += bool(boxes)
    files.write_text_atomically(output_file, "".join(f"{line}\n" for line in lines))
    return ConversionSummary(files=len(paths), images_with_boxes=images_with_boxes,
                             boxes=len(lines), skipped=tuple(skipped))


def read_box_csv(path):
    """{image file name: (BoundingBox, ...)} from a box CSV; boxes clipped to [0, 1].

    Boxes with no area left after clipping are dropped. Raises BuildError on a malformed line.
    """
    if not os.path.isfile(path):
        raise BuildError(f"--bounding_box_file={path} does not exist; make it with "
                         "`bin/bazel run //data:process_bounding_boxes` or leave the flag out.")
    boxes = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            filename, box = _parse_csv_line(line, path, number)
            if box is not None:
                boxes.setdefault(filename, []).append(box)
    return {filename: tuple(image_boxes) for filename, image_boxes in boxes.items()}


def _parse_csv_line(line, path, number):
    fields = [field.strip() for field in line.split(",")]
    try:
        if len(fields) != 5 or not fields[0]:
            raise ValueError("expected 5 fields")
        return fields[0], clipped_box(*(float(value) for value in fields[1:]))
    except ValueError:
        raise BuildError(f"{path} line {number} is not `filename,xmin,ymin,xmax,ymax` with "
                         f"numbers: {line.strip()[:80]!r}; fix or regenerate the file.") from None
