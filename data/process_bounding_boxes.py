"""`bazel run //data:process_bounding_boxes`: ILSVRC XML box annotations -> box CSV.

Reads every `*.xml` under --annotations_directory (e.g. the extracted
ILSVRC2012_bbox_train_v2.tar.gz) and writes `filename,xmin,ymin,xmax,ymax` lines, normalised
to [0, 1], for //data:build_imagenet_data --bounding_box_file.
"""

from absl import app
from absl import flags

from common import cli
from data import bounding_boxes

FLAGS = flags.FLAGS

flags.DEFINE_string("annotations_directory", "", "Folder of ILSVRC XML annotations (searched "
                    "recursively).")
flags.DEFINE_string("output_file", "", "The CSV to write, e.g. imagenet_2012_bounding_boxes.csv.")

_SKIPPED_SHOWN = 10


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --output_file=FILE.")
    if not FLAGS.annotations_directory or not FLAGS.output_file:
        cli.fail("--annotations_directory and --output_file are both required.")
    output_file = cli.user_path(FLAGS.output_file)
    try:
        summary = bounding_boxes.convert_annotations(
            cli.user_path(FLAGS.annotations_directory), output_file)
    except (cli.UserError, OSError) as error:
        cli.fail(error)
    cli.log(f"{summary.boxes} boxes of {summary.images_with_boxes} images from "
            f"{summary.files} annotation files -> {output_file}")
    if summary.skipped:
        cli.log(f"skipped {len(summary.skipped)} unusable annotation file(s):")
        for path, reason in summary.skipped[:_SKIPPED_SHOWN]:
            cli.log(f"  {path}: {reason}")
        if len(summary.skipped) > _SKIPPED_SHOWN:
            cli.log(f"  ... and {len(summary.skipped) - _SKIPPED_SHOWN} more")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
