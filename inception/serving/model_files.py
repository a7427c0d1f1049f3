"""The model files an export writes beside its SavedModel, and the two files that describe them.

`model.tflite`, `model_int8.tflite` and `model.onnx` each hold the SavedModel's
`predict_images` path: float32 images [batch, size, size, 3] in [-1, 1] -> logits
[batch, classes] (the TFLite models take a batch of one). `model_inputs.json` says what they
take, how images are prepared for them (serving/numpy_preprocessing.py does it), how many
classes a prediction names and the largest image accepted; `labels.txt` names each logit
(line i: logit i, line 0 the background). Written by export, read by classify, which runs
these models without TensorFlow: this module never imports it.
"""

import dataclasses
import json
import os

from common import cli
from common import image_limits
from inception.config import commands
from inception.config import recipe

MODEL_FILES = {"tflite": "model.tflite", "tflite_int8": "model_int8.tflite",
               "onnx": "model.onnx"}  # export format -> its file in the version folder
MODEL_SUFFIXES = (".tflite", ".onnx")  # classify runs a file with these on its own runtime
INPUTS_FILE = "model_inputs.json"
LABELS_FILE = "labels.txt"


class ConversionError(cli.UserError):
    """A converter could not turn the graph into a model file; one line naming the cause."""


class ModelFileError(cli.UserError):
    """A model file, or the description beside it, cannot be used; one line saying why."""


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """What the model files of one export take and return."""
    image_size: int
    label_texts: tuple  # the name of each logit, "background" first
    top_k: int = commands.DEFAULT_TOP_K
    max_pixels: int = image_limits.MAX_IMAGE_PIXELS


def write(target_dir, inputs):
    """Writes model_inputs.json and labels.txt describing ModelInputs `inputs` into
    `target_dir` (a local directory)."""
    size = inputs.image_size
    description = {
        "input": {"name": "images", "shape": ["batch", size, size, 3], "dtype": "float32",
                  "range": [-1.0, 1.0], "batch": "1 for the TFLite models, any for ONNX"},
        "output": {"name": "logits", "classes": len(inputs.label_texts), "labels": LABELS_FILE,
                   "top_k": inputs.top_k},
        "preprocessing": {
            "decode": "JPEG, PNG, GIF (first frame) or BMP to RGB; JPEG with the accurate "
                      "integer DCT",
            "max_image_pixels": inputs.max_pixels,
            "central_fraction": recipe.EVAL_CENTRAL_FRACTION,
            "resize": "bilinear, half-pixel centres, no antialiasing",
            "scale": "value / 255 * 2 - 1"},
    }
    with open(os.path.join(target_dir, INPUTS_FILE), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(description, indent=2) + "\n")
    with open(os.path.join(target_dir, LABELS_FILE), "w", encoding="utf-8") as handle:
        handle.write("".join(f"{text}\n" for text in inputs.label_texts))


def read(model_path):
    """ModelInputs of the model file `model_path`, from the two files beside it; raises
    ModelFileError when they are missing or unreadable."""
    folder = os.path.dirname(os.path.abspath(model_path))
    try:
        with open(os.path.join(folder, INPUTS_FILE), encoding="utf-8") as handle:
            description = json.load(handle)
        with open(os.path.join(folder, LABELS_FILE), encoding="utf-8") as handle:
            texts = tuple(handle.read().splitlines())
        return ModelInputs(
            image_size=int(description["input"]["shape"][1]), label_texts=texts,
            top_k=int(description["output"].get("top_k", commands.DEFAULT_TOP_K)),
            max_pixels=int(description["preprocessing"].get(
                "max_image_pixels", image_limits.MAX_IMAGE_PIXELS)))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
        raise ModelFileError(
            f"cannot read what {model_path} takes from {INPUTS_FILE} and {LABELS_FILE} beside "
            f"it ({getattr(error, 'strerror', None) or error}); keep the model in the version "
            "folder //inception:export wrote it to.") from None
