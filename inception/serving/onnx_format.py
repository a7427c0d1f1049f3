"""The trained model as an ONNX model, written beside the SavedModel in its version folder.

`model.onnx` is the SavedModel's `predict_images` path (serving/model_files.py says what it
takes; any batch size): the inference graph with its moving-average weights frozen into
constants, converted by tf2onnx at ONNX opset ONNX_OPSET, its input named `images` and its
output `logits`. Decoding and resizing stay outside it, as for TFLite.
"""

import logging
import os

import tensorflow as tf

from common import error_lines
from inception.serving import model_files
from inception.serving.model_files import ConversionError

tf1 = tf.compat.v1

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
