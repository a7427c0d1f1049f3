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

from common.field_flags import Flag  # noqa: E402  pylint: disable=wrong-import-position
from data import builder_cli  # noqa: E402  pylint: disable=wrong-import-position
from data import image_folders  # noqa: E402  pylint: disable=wrong-import-position

HELP = builder_cli.define_flags(image_folders.FolderBuildOptions, {
    "train_dir": Flag("Training images: <train_directory>/<label>/<image>.", path=True),
    "validation_dir": Flag("Validation images: <validation_directory>/<label>/<image>.", path=True),
    "labels_file": Flag(
        "One label (= folder name) per line; line i is label i (0 is background). Default: the "
        "sorted sub-folders of --train_directory.", path=True),
})
flags.adopt_module_key_flags(builder_cli)  # --help lists them as this program's own


def main(argv):
    builder_cli.run_build(argv, image_folders.build_from_folders,
                          image_folders.FolderBuildOptions, HELP)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
