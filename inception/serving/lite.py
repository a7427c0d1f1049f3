"""The trained model as TFLite models, written beside the SavedModel in its version folder.

`model.tflite` is the SavedModel's `predict_images` path: float32 images [1, size, size, 3] in
[-1, 1] -> logits [1, num_classes], the same inference graph (batch norm from its moving
statistics) and the same moving-average weights, converted by TensorFlow's TFLiteConverter.
Decoding and resizing stay outside it (TFLite has no image decoders): serving/
numpy_preprocessing.py does them as the SavedModel does. `model_int8.tflite` is the same model
quantized after training: int8 weights and activations, calibrated on images of the run's own
training shards (preprocessed as served), with float input and output, so it takes the same
images. `model_inputs.json` says what the models take and `labels.txt` names each logit (line
i: logit i, line 0 the background).
"""

import json
import os

import numpy as np
import tensorflow as tf

from common import error_lines
from data import tfrecord_format
from inception.config import recipe
from inception.config import rules
from inception.serving import numpy_preprocessing

tf1 = tf.compat.v1

TFLITE_FILE = "model.tflite"
TFLITE_INT8_FILE = "model_int8.tflite"
INPUTS_FILE = "model_inputs.json"
LABELS_FILE = "labels.txt"


class ConversionError(ValueError):
    """The converter could not turn the graph into a TFLite model; one line naming the cause."""


def write_tflite(session, images, logits, target_dir, calibration=None):
    """Converts the graph of `session` from `images` to `logits` (float32) into
    `<target_dir>/model.tflite`, or with `calibration` (float32 [n, size, size, 3] images as
    served) into an int8 `model_int8.tflite`; raises ConversionError naming the converter's
    complaint."""
    quantized = calibration is not None
    try:
        converter = tf1.lite.TFLiteConverter.from_session(session, [images], [logits])
        if quantized:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.representative_dataset = lambda: ([image[np.newaxis]]
                                                        for image in calibration)
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        model = converter.convert()
    except Exception as error:  # pylint: disable=broad-except
        # The converter raises its own ConverterError, or errors of the MLIR passes it runs.
        flag = "tflite_int8" if quantized else "tflite"
        raise ConversionError("TFLite could not convert the model: "
                              f"{error_lines.root_cause(str(error))}; "
                              f"export without {flag} in --formats.") from None
    name = TFLITE_INT8_FILE if quantized else TFLITE_FILE
    with tf.io.gfile.GFile(os.path.join(target_dir, name), "wb") as handle:
        handle.write(model)


def calibration_images(shard_dir, image_size, num_labels,
                       count=rules.DEFAULT_CALIBRATION_IMAGES):
    """float32 [n, size, size, 3]: up to `count` images of the training shards in `shard_dir`,
    preprocessed as served, spread over the `num_labels` labels (an equal share of each, in
    shard order; reading stops once the shares are full); ConversionError when there are
    none."""
    shards = tfrecord_format.list_shards(shard_dir, "train")
    if not shards:
        raise ConversionError(f"tflite_int8 calibrates on the run's training shards, and "
                              f"{shard_dir} holds none (train-*); export from where the run's "
                              "data is, or without tflite_int8 in --formats.")
    records = tf.data.TFRecordDataset(shards).map(lambda record: tf.io.parse_single_example(
        record, {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                 "image/class/label": tf.io.FixedLenFeature([], tf.int64)}))
    share = -(-count // max(num_labels, 1))
    per_label, chosen = {}, []
    for example in records:
        label = int(example["image/class/label"])
        if per_label.get(label, 0) < share:
            per_label[label] = per_label.get(label, 0) + 1
            chosen.append(numpy_preprocessing.eval_image(example["image/encoded"].numpy(),
                                                         image_size))
            if len(chosen) == count:
                break
    return np.stack(chosen)


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

