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
from inception.config import flag_table
from inception.config import rules
from inception.driver import startup
from inception.serving import model_files

FLAGS = flags.FLAGS

flags.DEFINE_string("checkpoint_dir", flag_table.DEFAULT_TRAIN_DIR,
                    "The --train_dir of the training run to export.")
flags.DEFINE_string("checkpoint_path", "", "Export this checkpoint (a prefix such as "
                    "<train_dir>/model.ckpt-1000) instead of the newest one.")
flags.DEFINE_string("export_dir", "", "Where the versions of the SavedModel go (required).")
flags.DEFINE_alias("model", "checkpoint_dir")
flags.DEFINE_integer("top_k", model_files.DEFAULT_TOP_K, "How many classes each prediction "
                     "returns.")
flags.DEFINE_string("formats", rules.SAVED_MODEL_FORMAT, "Comma-separated formats written into "
                    "the version folder: saved_model (always), tflite (a float TFLite model of "
                    "the preprocessed images), tflite_int8 (the same quantized to int8 after "
                    "training), onnx (an ONNX model of them, by tf2onnx); the model files come "
                    "with model_inputs.json and labels.txt, and //inception:classify runs them "
                    "without TensorFlow.")
flags.DEFINE_integer("calibration_images", rules.DEFAULT_CALIBRATION_IMAGES,
                     "tflite_int8: images of the run's training shards (spread over the labels) "
                     "that calibrate the quantization.")
flags.DEFINE_integer("max_image_pixels", image_limits.MAX_IMAGE_PIXELS,
                     "The served model refuses images of more pixels (width x height, read "
                     "from the file's header before decoding): that request fails with a "
                     "message naming the image's size. Fixed in the SavedModel.")


def check_flags():
    """(checkpoint_dir, checkpoint_path, export_dir, formats) as the user meant them; one line
    and exit 2 for a bad flag, before TensorFlow loads."""
    try:
        formats = rules.export_formats(FLAGS.formats)
    except cli.UserError as error:
        cli.fail(error, 2)
    if not FLAGS.export_dir:
        cli.fail("--export_dir is required: the directory the SavedModel versions go to.", 2)
    if FLAGS.calibration_images < 1:
        cli.fail(f"--calibration_images={FLAGS.calibration_images} must be at least 1.", 2)
    if FLAGS.top_k < 1:
        cli.fail(f"--top_k={FLAGS.top_k} must be at least 1.", 2)
    if FLAGS.max_image_pixels < 1:
        cli.fail(f"--max_image_pixels={FLAGS.max_image_pixels} must be at least 1 (default "
                 f"{image_limits.MAX_IMAGE_PIXELS}).", 2)
    export_dir = cli.user_path(FLAGS.export_dir)
    if os.path.exists(export_dir) and not os.path.isdir(export_dir):
        cli.fail(f"--export_dir={export_dir} is a file; pass a directory (new or one that "
                 "holds earlier exports).", 2)
    return (cli.user_path(FLAGS.checkpoint_dir), cli.user_path(FLAGS.checkpoint_path),
            export_dir, formats)


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --export_dir=DIR.", 2)
    checkpoint_dir, checkpoint_path, export_dir, formats = check_flags()
    startup.quiet_tensorflow()
    from inception.serving import model_files  # pylint: disable=import-outside-toplevel
    from inception.serving import saved_model  # pylint: disable=import-outside-toplevel
    try:
        version_dir = saved_model.export_training_run(checkpoint_dir, export_dir, checkpoint_path,
                                                      FLAGS.top_k, log=cli.log,
                                                      max_pixels=FLAGS.max_image_pixels,
                                                      formats=formats,
                                                      calibration_count=FLAGS.calibration_images)
    except cli.UserError as error:
        cli.fail(error)
    cli.log(f"SavedModel written to {version_dir} (signatures: serving_default on encoded "
            "images, refusing those over "
            f"{image_limits.describe_limit(FLAGS.max_image_pixels)}; predict_images on "
            "preprocessed ones)")
    written = [name for wanted, name in model_files.MODEL_FILES.items() if wanted in formats]
    if written:
        cli.log(f"beside it: {', '.join(written)} (preprocessed images, described in "
                f"{model_files.INPUTS_FILE}); classify them with //inception:classify -- "
                f"--model={os.path.join(version_dir, written[0])}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
