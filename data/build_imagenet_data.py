"""`bazel run //data:build_imagenet_data`: ImageNet (ILSVRC2012) -> TFRecord shards.

Records carry the 1-based label (order of --labels_file), the synset, its human-readable name
and the bounding boxes of --bounding_box_file. Flags follow the original tensorflow/models
build_imagenet_data.py, plus --validation_labels_file for the flat validation folder.
"""

from common import cli
from common import signals

signals.handle_signals()  # Ctrl-C is one line in every phase, this import of TensorFlow too
cli.quiet_tensorflow()

from absl import app  # noqa: E402  pylint: disable=wrong-import-position
from absl import flags  # noqa: E402  pylint: disable=wrong-import-position

from common.field_flags import Flag  # noqa: E402  pylint: disable=wrong-import-position
from data import builder_cli  # noqa: E402  pylint: disable=wrong-import-position
from data import imagenet  # noqa: E402  pylint: disable=wrong-import-position

HELP = builder_cli.define_flags(imagenet.ImageNetBuildOptions, {
    "train_dir": Flag("Training images: <train_directory>/<synset>/*.JPEG.", path=True),
    "validation_dir": Flag(
        "Validation images: flat with --validation_labels_file, else "
        "<validation_directory>/<synset>/*.JPEG.", path=True),
    "validation_labels_file": Flag(
        "One synset per validation image, in sorted file-name order "
        "(imagenet_2012_validation_synset_labels.txt).", path=True),
    "synsets_file": Flag("The synsets, one per line; line i is label i (0 is background).",
                         path=True),
    "metadata_file": Flag("`<synset><TAB><human-readable name>` lines.", path=True),
    "bounding_box_file": Flag(
        "Box CSV `filename,xmin,ymin,xmax,ymax` from //data:process_bounding_boxes; empty: no "
        "boxes.", path=True),
})
flags.adopt_module_key_flags(builder_cli)  # --help lists them as this program's own


def main(argv):
    builder_cli.run_build(argv, imagenet.build_imagenet, imagenet.ImageNetBuildOptions, HELP)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
