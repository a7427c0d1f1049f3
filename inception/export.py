"""`bazel run //inception:export`: write a trained model as a TensorFlow SavedModel.

Exports the newest checkpoint of a training directory (or --checkpoint_path) into
`<export_dir>/<global step>/`, TensorFlow Serving's layout; an existing version is never
overwritten. The model settings and label names come from the training directory; the pixel
limit on the images it is sent (--max_image_pixels) is fixed in the SavedModel.
"""

import os

from absl import app
from absl import flags

from common import cli
from common import image_limits
from inception.config import commands
from inception.config import flag_table
from inception.driver import startup
from inception.serving import model_files

FLAGS = flags.FLAGS

flag_table.define_flags([commands.ExportSettings], commands.EXPORT_HELP)
flags.DEFINE_alias("model", "checkpoint_dir")
flags.adopt_module_key_flags(flag_table)  # --help lists them as this program's own


def settings_from_flags():
    """ExportSettings from the parsed flags, checked: one line and exit 2 for a bad flag,
    before TensorFlow loads."""
    try:
        return commands.ExportSettings(
            **flag_table.values_of(FLAGS, commands.ExportSettings, commands.EXPORT_HELP)).validate()
    except cli.UserError as error:
        return cli.fail(error, 2)


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --export_dir=DIR.", 2)
    settings = settings_from_flags()
    formats = settings.format_names()
    startup.quiet_tensorflow()
    from inception.serving import saved_model  # pylint: disable=import-outside-toplevel
    try:
        version_dir = saved_model.export_training_run(settings, log=cli.log)
    except cli.UserError as error:
        cli.fail(error)
    cli.log(f"SavedModel written to {version_dir} (signatures: serving_default on encoded "
            "images, refusing those over "
            f"{image_limits.describe_limit(settings.max_image_pixels)}; predict_images on "
            "preprocessed ones)")
    written = [name for wanted, name in model_files.MODEL_FILES.items() if wanted in formats]
    if written:
        cli.log(f"beside it: {', '.join(written)} (preprocessed images, described in "
                f"{model_files.INPUTS_FILE}); classify them with //inception:classify -- "
                f"--model={os.path.join(version_dir, written[0])}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
