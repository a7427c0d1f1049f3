"""`bazel run //data:process_bounding_boxes`: ILSVRC XML box annotations -> box CSV.

Reads every `*.xml` under --annotations_directory (e.g. the extracted
ILSVRC2012_bbox_train_v2.tar.gz) and writes `filename,xmin,ymin,xmax,ymax` lines, normalised
to [0, 1], for //data:build_imagenet_data --bounding_box_file.
"""

from absl import app
from absl import flags

from common import cli
from common import field_flags
from common.field_flags import Flag
from data import bounding_boxes

FLAGS = flags.FLAGS
TABLE = field_flags.FlagTable(names={"annotations_dir": "annotations_directory"})
HELP = {
    "annotations_dir": Flag("Folder of ILSVRC XML annotations (searched recursively).", path=True),
    "output_file": Flag("The CSV to write, e.g. imagenet_2012_bounding_boxes.csv.", path=True),
}
TABLE.define_flags(bounding_boxes.BoxCsvOptions, HELP)

_SKIPPED_SHOWN = 10


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --output_file=FILE.")
    options = bounding_boxes.BoxCsvOptions(
        **TABLE.values_of(FLAGS, bounding_boxes.BoxCsvOptions, HELP))
    if not options.annotations_dir or not options.output_file:
        cli.fail("--annotations_directory and --output_file are both required.")
    output_file = options.output_file
    try:
        summary = bounding_boxes.convert_annotations(options.annotations_dir, output_file)
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
