"""The trained model as a float TFLite model, written beside the SavedModel in its version folder.

`model.tflite` is the SavedModel's `predict_images` path: float32 images [1, size, size, 3] in
[-1, 1] -> logits [1, num_classes], the same inference graph (batch norm from its moving
statistics) and the same moving-average weights, converted by TensorFlow's TFLiteConverter.
Decoding and resizing stay outside it (TFLite has no image decoders): serving/
numpy_preprocessing.py does them as the SavedModel does. `model_inputs.json` says what the model
takes and `labels.txt` names each logit (line i: logit i, line 0 the background).
"""

import json
import os

import tensorflow as tf

from inception.config import recipe

tf1 = tf.compat.v1

TFLITE_FILE = "model.tflite"
INPUTS_FILE = "model_inputs.json"
LABELS_FILE = "labels.txt"


class ConversionError(ValueError):
    """The converter could not turn the graph into a TFLite model; one line naming the cause."""


def write_tflite(session, images, logits, target_dir):
    """Converts the graph of `session` from `images` to `logits` (float32) into
    `<target_dir>/model.tflite`; raises ConversionError naming the converter's complaint."""
    try:
        converter = tf1.lite.TFLiteConverter.from_session(session, [images], [logits])
        model = converter.convert()
    except Exception as error:  # pylint: disable=broad-except
        # The converter raises its own ConverterError, or errors of the MLIR passes it runs.
        raise ConversionError(f"TFLite could not convert the model: {_first_line(error)}; "
                              "export without --formats=tflite.") from None
    with tf.io.gfile.GFile(os.path.join(target_dir, TFLITE_FILE), "wb") as handle:
        handle.write(model)


def write_inputs(target_dir, image_size, texts):
    """Writes model_inputs.json (what a TFLite or ONNX model beside it takes and returns) and
    labels.txt (`texts`: the name of each logit) into `target_dir`."""
    description = {
        "input": {"shape": [1, image_size, image_size, 3], "dtype": "float32",
                  "range": [-1.0, 1.0]},
        "output": {"name": "logits", "classes": len(texts), "labels": LABELS_FILE},
        "preprocessing": {
            "decode": "JPEG, PNG, GIF (first frame) or BMP to RGB; JPEG with the accurate "
                      "integer DCT",
            "central_fraction": recipe.EVAL_CENTRAL_FRACTION,
            "resize": "bilinear, half-pixel centres, no antialiasing",
            "scale": "value / 255 * 2 - 1"},
    }
    with tf.io.gfile.GFile(os.path.join(target_dir, INPUTS_FILE), "w") as handle:
        handle.write(json.dumps(description, indent=2) + "\n")
    with tf.io.gfile.GFile(os.path.join(target_dir, LABELS_FILE), "w") as handle:
        handle.write("".join(f"{text}\n" for text in texts))


def _first_line(error):
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    found = [line for line in lines if "error" in line.lower() or "not supported" in line]
    return (found or lines or [type(error).__name__])[0]
