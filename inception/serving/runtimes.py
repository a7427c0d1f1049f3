"""Running an export's TFLite or ONNX model file without TensorFlow: TFLite on LiteRT
(`ai_edge_litert`), ONNX on onnxruntime. Images are prepared by serving/numpy_preprocessing.py
as the SavedModel prepares them, with the size, classes and pixel limit written beside the
model (serving/model_files.py), so classify gives the SavedModel's answers on each.
"""

import os

import numpy as np

from common import error_lines
from common import image_limits
from inception.serving import model_files
from inception.serving import numpy_preprocessing
from inception.serving import predictions


def is_model_file(path):
    """Whether `--model=path` names a model file that runs on its own runtime (by suffix)."""
    return path.lower().endswith(model_files.MODEL_SUFFIXES)


def open_model_file(path, log=print):
    """callable(list of encoded images) -> {classes, probabilities, label_texts, logits} for
    the .tflite or .onnx file `path`, raising predictions.ImageError for an image it cannot
    classify; ModelFileError when the file is missing, is no such model, or lacks the
    description beside it."""
    if not os.path.isfile(path):
        raise model_files.ModelFileError(f"--model={path} does not exist; pass a model file "
                                         "that //inception:export wrote.")
    inputs = model_files.read(path)
    if path.lower().endswith(".tflite"):
        log(f"loading the TFLite model {path} (LiteRT)...")
        logits_of = _tflite_logits(path)
    else:
        log(f"loading the ONNX model {path} (onnxruntime)...")
        logits_of = _onnx_logits(path)

    def predict(encoded):
        images = np.stack([numpy_preprocessing.eval_image(
            data, inputs.image_size, inputs.max_pixels, image_limits.EXPORT_LIMIT_FLAG)
            for data in encoded])
        return predictions.top_k_outputs(logits_of(images), inputs.label_texts, inputs.top_k)
    return predict


def _tflite_logits(path):
    """callable(float32 images [N, size, size, 3]) -> logits, one image per call (the
    model's input holds one)."""
    from ai_edge_litert.interpreter import Interpreter  # pylint: disable=import-outside-toplevel
    try:
        interpreter = Interpreter(model_path=path)
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as error:
        raise model_files.ModelFileError(
            f"--model={path} is not a TFLite model LiteRT can run "
            f"({error_lines.cause_of(error)}); "
            "pass a model.tflite that //inception:export wrote.") from None
    image_input = interpreter.get_input_details()[0]["index"]
    logits_output = interpreter.get_output_details()[0]["index"]

    def logits_of(images):
        rows = []
        for image in images:
            interpreter.set_tensor(image_input, image[np.newaxis])
            interpreter.invoke()
            rows.append(interpreter.get_tensor(logits_output)[0])
        return np.stack(rows)
    return logits_of


def _onnx_logits(path):
    """callable(float32 images [N, size, size, 3]) -> logits, the whole batch in one call."""
    import onnxruntime  # pylint: disable=import-outside-toplevel
    try:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as error:  # pylint: disable=broad-except
        # onnxruntime raises its own exception classes, none of them a common base but this.
        raise model_files.ModelFileError(
            f"--model={path} is not an ONNX model onnxruntime can run "
            f"({error_lines.cause_of(error)}); "
            "pass a model.onnx that //inception:export wrote.") from None
    input_name = session.get_inputs()[0].name
    return lambda images: session.run(None, {input_name: images})[0]
