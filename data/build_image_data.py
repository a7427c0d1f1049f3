"""`bazel run //data:build_image_data`: a folder tree of labelled images -> TFRecord shards.

<train_directory>/<label>/<image> (and the same under --validation_directory) becomes
train-00000-of-0000N / validation-... shards in the original Inception format, plus labels.txt.
Flags follow the original tensorflow/models build_image_data.py.
"""

from common import cli
from common import signals

signals.handle_signals()  # Ctrl-C is one line in every phase, this import of TensorFlow too
cli.quiet_tensorflow()

from absl import app  # noqa: E402  pylint: disable=wrong-import-position
from absl import flags  # noqa: E402  pylint: disable=wrong-import-position

from common import image_limits  # noqa: E402  pylint: disable=wrong-import-position
from data import builder_cli  # noqa: E402  pylint: disable=wrong-import-position
from data import image_folders  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS

flags.DEFINE_string("train_directory", "", "Training images: <train_directory>/<label>/<image>.")
flags.DEFINE_string("validation_directory", "",
                    "Validation images: <validation_directory>/<label>/<image>.")
flags.DEFINE_string("labels_file", "", "One label (= folder name) per line; line i is label i "
                    "(0 is background). Default: the sorted sub-folders of --train_directory.")
flags.DEFINE_string("output_directory", "", "Where the shards and labels.txt go (created if "
                    "missing; must not hold shards of the same splits, nor another data set's).")
flags.DEFINE_integer("train_shards", 2, "Number of training shards.")
flags.DEFINE_integer("validation_shards", 2, "Number of validation shards.")
flags.DEFINE_integer("max_image_pixels", image_limits.MAX_IMAGE_PIXELS,
                     "Images declaring more pixels (width x height) are skipped, checked from "
                     "the file's header before decoding (a small file can declare gigabytes).")
flags.DEFINE_integer("num_threads", 2, "Threads writing shards at once; must divide both shard "
                     "counts.")


def options_from_flags():
    """FolderBuildOptions from the parsed flags."""
    return image_folders.FolderBuildOptions(
        output_dir=cli.user_path(FLAGS.output_directory),
        train_dir=cli.user_path(FLAGS.train_directory),
        validation_dir=cli.user_path(FLAGS.validation_directory),
        labels_file=cli.user_path(FLAGS.labels_file), train_shards=FLAGS.train_shards,
        validation_shards=FLAGS.validation_shards, num_threads=FLAGS.num_threads,
        max_image_pixels=FLAGS.max_image_pixels)


def main(argv):
    builder_cli.run_build(argv, image_folders.build_from_folders, options_from_flags)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
