"""`bazel run //inception:classify -- --model=DIR IMAGE_OR_FOLDER...`: what is in these images?

--model is an export of //inception:export (its directory of versions or one version), a
training directory (its newest checkpoint is loaded in memory), or a model file of an export
(model.tflite, model_int8.tflite, model.onnx), which runs on LiteRT or onnxruntime without
importing TensorFlow (its images read from local files). Prints the top classes of each
image; with --output_json also writes them as JSON lines. An image that cannot be read, or has
more pixels than the limit (read from its header, before decoding), is reported and the rest
are still classified; the exit status is then 1.
"""

import json
import os
import sys

from absl import app
from absl import flags

from common import cli
from common import error_lines
from common.progress import ProgressBar
from inception.config import commands
from inception.config import flag_table
from inception.driver import startup
from inception.serving import predictions
from inception.serving import runtimes

FLAGS = flags.FLAGS

flag_table.define_flags([commands.ClassifySettings], commands.CLASSIFY_HELP)
flags.adopt_module_key_flags(flag_table)  # --help lists them as this program's own

PROGRESS_AFTER = 36  # more images than this get a progress bar


def check_flags(argv):
    """(ClassifySettings, image paths) as the user meant them; one line and exit 2 when
    something is missing, before TensorFlow loads."""
    try:
        values = flag_table.values_of(FLAGS, commands.ClassifySettings, commands.CLASSIFY_HELP)
        settings = commands.ClassifySettings(**values).validate()
    except cli.UserError as error:
        return cli.fail(error, 2)
    if len(argv) < 2:
        cli.fail("name the images to classify: files or folders after the flags.", 2)
    return settings, [cli.user_path(path) for path in argv[1:]]


def open_output(output_json):
    """The --output_json file opened for writing (the null device without one); one line and
    exit 1 when it cannot be written."""
    try:
        # Closed by main's `with`; opened here so a bad path fails before the model loads.
        return open(output_json or os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    except OSError as error:
        return cli.fail(error_lines.cannot_write(f"--output_json={output_json}", error,
                                                 "a file in a directory you can write"))


def list_images(paths, file_system):
    """(image files, missing paths) named by `paths`; each missing one is an error line, and
    none found at all ends the command."""
    files, missing = predictions.image_files(paths, file_system)
    for path in missing:
        print(f"error: {path} does not exist", file=sys.stderr, flush=True)
    if not files:
        cli.fail("no image files found in " + ", ".join(paths))
    return files, missing


def model_backend(model_path, max_pixels):
    """(the file system images are read from, callable() -> (exported, predict)) for
    --model=model_path, decided once: a model file runs on its own runtime and the images are
    local files (TensorFlow is never imported); anything else goes through TensorFlow and its
    file systems (URLs too)."""
    if runtimes.is_model_file(model_path):
        return predictions.LOCAL_FILES, lambda: (
            True, runtimes.open_model_file(model_path, log=cli.log))
    startup.quiet_tensorflow()
    from inception.serving import tf_models  # pylint: disable=import-outside-toplevel

    def open_with_tensorflow():
        return (tf_models.saved_model_version(model_path) is not None,
                tf_models.open_model(model_path, log=cli.log,
                                     max_pixels=max_pixels))
    return tf_models.GFILE_FILES, open_with_tensorflow


def open_model(opener):
    """predict(encoded images) from model_backend's `opener`; one line and exit 1 when the
    model cannot be opened."""
    try:
        exported, predict = opener()
    except cli.UserError as error:
        cli.fail(error)
    if FLAGS["max_image_pixels"].present and exported:
        cli.log("note: --max_image_pixels is for a training directory; this export refuses "
                "images over the limit it was exported with.")
    return predict


def main(argv):
    settings, paths = check_flags(argv)
    file_system, opener = model_backend(settings.model, settings.max_image_pixels)
    files, missing = list_images(paths, file_system)
    json_file = open_output(settings.output_json)
    predict = open_model(opener)
    progress = ProgressBar(len(files), "images") if len(files) > PROGRESS_AFTER else None
    failed = len(missing)
    with json_file:
        for prediction in predictions.classify_files(
                predict, files, settings.batch_size, progress.update if progress else None,
                file_system):
            if progress:
                progress.clear()
            print(prediction.block(), flush=True)
            json_file.write(json.dumps(prediction.as_json()) + "\n")
            failed += bool(prediction.error)
    if progress:
        progress.close()
    if failed:
        cli.fail(f"{failed} of {len(files) + len(missing)} images could not be classified "
                 "(see the errors above).")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
