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

from common import image_limits  # noqa: E402  pylint: disable=wrong-import-position
from data import builder_cli  # noqa: E402  pylint: disable=wrong-import-position
from data import imagenet  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS

flags.DEFINE_string("train_directory", "", "Training images: <train_directory>/<synset>/*.JPEG.")
flags.DEFINE_string("validation_directory", "", "Validation images: flat with "
                    "--validation_labels_file, else <validation_directory>/<synset>/*.JPEG.")
flags.DEFINE_string("validation_labels_file", "", "One synset per validation image, in sorted "
                    "file-name order (imagenet_2012_validation_synset_labels.txt).")
flags.DEFINE_string("labels_file", imagenet.DEFAULT_SYNSETS_FILE,
                    "The synsets, one per line; line i is label i (0 is background).")
flags.DEFINE_string("imagenet_metadata_file", imagenet.DEFAULT_METADATA_FILE,
                    "`<synset><TAB><human-readable name>` lines.")
flags.DEFINE_string("bounding_box_file", "", "Box CSV `filename,xmin,ymin,xmax,ymax` from "
                    "//data:process_bounding_boxes; empty: no boxes.")
flags.DEFINE_string("output_directory", "", "Where the shards and labels.txt go (created if "
                    "missing; must not hold shards of the same splits, nor another data set's).")
flags.DEFINE_integer("train_shards", 1024, "Number of training shards.")
flags.DEFINE_integer("validation_shards", 128, "Number of validation shards.")
flags.DEFINE_integer("max_image_pixels", image_limits.MAX_IMAGE_PIXELS,
                     "Images declaring more pixels (width x height) are skipped, checked from "
                     "the file's header before decoding (a small file can declare gigabytes).")
flags.DEFINE_integer("num_threads", 8, "Threads writing shards at once; must divide both shard "
                     "counts.")


def options_from_flags():
    """ImageNetBuildOptions from the parsed flags."""
    return imagenet.ImageNetBuildOptions(
        output_dir=cli.user_path(FLAGS.output_directory),
        train_dir=cli.user_path(FLAGS.train_directory),
        validation_dir=cli.user_path(FLAGS.validation_directory),
        validation_labels_file=cli.user_path(FLAGS.validation_labels_file),
        synsets_file=cli.user_path(FLAGS.labels_file),
        metadata_file=cli.user_path(FLAGS.imagenet_metadata_file),
        bounding_box_file=cli.user_path(FLAGS.bounding_box_file),
        train_shards=FLAGS.train_shards, validation_shards=FLAGS.validation_shards,
        num_threads=FLAGS.num_threads,
        max_image_pixels=FLAGS.max_image_pixels)


def main(argv):
    builder_cli.run_build(argv, imagenet.build_imagenet, options_from_flags)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
