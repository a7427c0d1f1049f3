"""The trained model converted beside the SavedModel in its version folder: TFLite and ONNX.

Each converts the SavedModel's `predict_images` path (serving/model_files.py says what it
takes): the same inference graph (batch norm from its moving statistics) and the same
moving-average weights. Decoding and resizing stay outside them (TFLite has no image
decoders): serving/numpy_preprocessing.py does them as the SavedModel does.

`model.tflite` is converted by TensorFlow's TFLiteConverter; `model_int8.tflite` is the same
model quantized after training: int8 weights and activations, calibrated on images of the run's
own training shards (preprocessed as served), with float input and output, so it takes the
same images. `model.onnx` (any batch size) has the weights frozen into constants, converted by
tf2onnx at opset ONNX_OPSET, its input named `images` and its output `logits`.
"""

import logging
import os
import re

import numpy as np
import tensorflow as tf

from common import error_lines
from data import tfrecord_format
from inception.config import commands
from inception.serving import model_files
from inception.serving import numpy_preprocessing
from inception.serving.model_files import ConversionError

tf1 = tf.compat.v1


def write_tflite(session, images, logits, target_dir, calibration=None):
    """Converts the graph of `session` from `images` to `logits` (float32) into
    `<target_dir>/model.tflite`, or with `calibration` (float32 [n, size, size, 3] images as
    served) into an int8 `model_int8.tflite` (`target_dir` is local); raises ConversionError
    naming the converter's complaint."""
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
        raise ConversionError(f"TFLite could not convert the model: {_converter_cause(error)}; "
                              f"export without {flag} in --formats.") from None
    name = model_files.MODEL_FILES["tflite_int8" if quantized else "tflite"]
    with open(os.path.join(target_dir, name), "wb") as handle:
        handle.write(model)


def _converter_cause(error):
    """The converter's complaint in one line: the ops TFLite has no kernel for, when that is
    it (its message lists them on a line of their own, among many lines of MLIR)."""
    unsupported = re.search(r"^(?:Custom|Flex) ops: (.+)$", str(error), re.MULTILINE)
    if unsupported:
        return f"TFLite has no built-in kernel for the TensorFlow op {unsupported.group(1)}"
    return error_lines.root_cause(str(error))


def calibration_images(shard_dir, image_size, num_labels,
                       count=commands.DEFAULT_CALIBRATION_IMAGES):
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


# Opset 17 (ONNX 1.12, 2022) holds every op Inception needs and is read by the runtimes users
# deploy on (onnxruntime since 1.12, TensorRT 8.6, OpenVINO 2022.3).
ONNX_OPSET = 17


def write_onnx(session, images, logits, target_dir):
    """Converts the graph of `session` from `images` to `logits` into `<target_dir>/model.onnx`
    (`target_dir` is local); raises ConversionError naming the op it could not convert."""
    import onnx  # pylint: disable=import-outside-toplevel
    import tf2onnx  # pylint: disable=import-outside-toplevel
    frozen = tf1.graph_util.convert_variables_to_constants(
        session, session.graph.as_graph_def(), [logits.op.name])
    # tf2onnx logs every op it converts and every one it cannot, and goes on: its log is
    # silenced here, and an op left unconverted is found in the model below.
    logging.getLogger("tf2onnx").setLevel(logging.CRITICAL)
    try:
        model, _ = tf2onnx.convert.from_graph_def(
            frozen, input_names=[images.name], output_names=[logits.name], opset=ONNX_OPSET,
            tensors_to_rename={images.name: "images", logits.name: "logits"})
    except Exception as error:  # pylint: disable=broad-except
        # tf2onnx raises the error of whichever op handler or graph rewrite failed.
        raise ConversionError(f"tf2onnx could not convert the model: "
                              f"{error_lines.root_cause(str(error))}; export without onnx in "
                              "--formats.") from None
    unknown = [node for node in model.graph.node
               if not onnx.defs.has(node.op_type, node.domain or "")]
    if unknown:
        raise ConversionError(f"tf2onnx could not convert the TensorFlow op {unknown[0].op_type} "
                              f"(node {unknown[0].name}) to ONNX opset {ONNX_OPSET}; export "
                              "without onnx in --formats.")
    with open(os.path.join(target_dir, model_files.MODEL_FILES["onnx"]), "wb") as handle:
        handle.write(model.SerializeToString())
