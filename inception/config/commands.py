"""What the commands besides training and evaluation take: export, classify, and the training
run's learning-rate range test. Each is a frozen dataclass whose fields are the command's flags
(name, type and default; config/flag_table.py defines the flags from them), with its help
table beside it and its checks in `validate`, so a default, a help text or a rule is written
once. Export's formats and their rule live here too. Free of TensorFlow.
"""

import dataclasses

from common import image_limits
from common.field_flags import Flag
from inception.config import recipe
from inception.config import rules
from inception.config.rules import SettingsError

SAVED_MODEL_FORMAT = "saved_model"  # the version folder itself: every export writes it
EXPORT_FORMATS = (SAVED_MODEL_FORMAT, "tflite", "tflite_int8", "onnx")
DEFAULT_CALIBRATION_IMAGES = 300  # tflite_int8: training images that calibrate it
DEFAULT_TOP_K = 5  # classes each prediction of an export returns
DEFAULT_CLASSIFY_BATCH = 16  # images classified together
_PIXELS_HELP = "pixels (width x height, read from the file's header before decoding)"


def export_formats(text):
    """The tuple of export formats of `--formats` text ("saved_model,tflite"); SettingsError
    for an unknown one or a list without the SavedModel."""
    formats = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in formats if name not in EXPORT_FORMATS]
    if unknown:
        raise SettingsError(f"unknown --formats value {unknown[0]!r}; use a comma-separated list "
                            f"of {', '.join(EXPORT_FORMATS)}.")
    if SAVED_MODEL_FORMAT not in formats:
        raise SettingsError(f"--formats must include {SAVED_MODEL_FORMAT}: the version folder is "
                            "a SavedModel, and the other formats are written beside it.")
    return formats


@dataclasses.dataclass(frozen=True)
class RangeTestSettings:
    """`--find_learning_rate`: instead of training, lr_range_steps steps with the rate rising
    geometrically from lr_range_min to lr_range_max (driver/lr_range.py)."""
    find_learning_rate: bool = False
    lr_range_steps: int = 200
    lr_range_min: float = 1e-5
    lr_range_max: float = 10.0

    def validate(self):
        """Raises SettingsError when the range test is asked for and its range is empty or too
        short; returns self."""
        if not self.find_learning_rate:
            return self
        if self.lr_range_steps < 2 or not 0 < self.lr_range_min < self.lr_range_max:
            raise SettingsError("the range test needs --lr_range_steps >= 2 and 0 < "
                                "--lr_range_min < --lr_range_max.")
        return self


RANGE_TEST_HELP = {
    "find_learning_rate":
        "Instead of training, run the learning-rate range test on this run's data and model: "
        "--lr_range_steps steps with the rate rising from --lr_range_min to --lr_range_max; "
        "writes a plot to <train_dir>/learning_rate_range.png and prints a suggested rate. No "
        "checkpoint is written.",
    "lr_range_steps": "Steps of the learning-rate range test.",
    "lr_range_min": "First learning rate of the range test.",
    "lr_range_max": "Last learning rate of the range test.",
}


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """`//inception:export`: which checkpoint (the newest of checkpoint_dir, or
    checkpoint_path), where its versions go, and what each version holds."""
    checkpoint_dir: str
    checkpoint_path: str = ""
    export_dir: str = ""
    top_k: int = DEFAULT_TOP_K
    formats: str = SAVED_MODEL_FORMAT
    calibration_images: int = DEFAULT_CALIBRATION_IMAGES
    max_image_pixels: int = image_limits.MAX_IMAGE_PIXELS

    def validate(self):
        """Raises SettingsError for the first flag no export can use; returns self."""
        export_formats(self.formats)
        if not self.export_dir:
            raise SettingsError("--export_dir is required: the directory the SavedModel "
                                "versions go to.")
        rules.check_declared(self, EXPORT_HELP)
        rules.must_be_directory("export_dir", self.export_dir)
        return self

    def format_names(self):
        """The formats to write, as a tuple (SavedModel first when named first)."""
        return export_formats(self.formats)


EXPORT_HELP = {
    "checkpoint_dir": Flag("The --train_dir of the training run to export.",
                           path=True, default=recipe.DEFAULT_TRAIN_DIR),
    "checkpoint_path": Flag(
        "Export this checkpoint (a prefix such as <train_dir>/model.ckpt-1000) instead of the "
        "newest one.", path=True),
    "export_dir": Flag("Where the versions of the SavedModel go (required).", path=True),
    "top_k": Flag(
        "How many classes each prediction returns.", minimum=1),
    "formats":
        "Comma-separated formats written into the version folder: saved_model (always), tflite "
        "(a float TFLite model of the preprocessed images), tflite_int8 (the same quantized to "
        "int8 after training), onnx (an ONNX model of them, by tf2onnx); the model files come "
        "with model_inputs.json and labels.txt, and //inception:classify runs them without "
        "TensorFlow.",
    "calibration_images": Flag(
        "tflite_int8: images of the run's training shards (spread over the labels) that "
        "calibrate the quantization.", minimum=1),
    "max_image_pixels": Flag(
        f"The served model refuses images of more {_PIXELS_HELP}: that request fails with a "
        "message naming the image's size. Fixed in the SavedModel.", minimum=1),
}


@dataclasses.dataclass(frozen=True)
class ClassifySettings:
    """`//inception:classify`: the model, where the JSON lines go (empty: nowhere), images per
    batch, and the pixel limit for a model loaded from a training directory."""
    model: str = ""
    output_json: str = ""
    batch_size: int = DEFAULT_CLASSIFY_BATCH
    max_image_pixels: int = image_limits.MAX_IMAGE_PIXELS

    def validate(self):
        """Raises SettingsError for the first flag no classification can use; returns self."""
        if not self.model:
            raise SettingsError("--model is required: an export directory or a training "
                                "directory.")
        rules.check_declared(self, CLASSIFY_HELP)
        return self


CLASSIFY_HELP = {
    "model": Flag(
        "An export directory (of //inception:export), a training directory, or a .tflite / "
        ".onnx file of an export (required).", path=True),
    "output_json": Flag("Also write one JSON line per image to this file.", path=True),
    "batch_size": Flag(
        "Images classified together.", minimum=1),
    "max_image_pixels": Flag(
        f"Refuse images of more {_PIXELS_HELP} when --model is a training directory; an export "
        "keeps the limit it was exported with (//inception:export --max_image_pixels).", minimum=1),
}
