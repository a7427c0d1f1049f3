"""Opening a TensorFlow model to classify images with: an exported SavedModel, or a training
directory whose newest checkpoint is loaded into the same inference graph in memory. (The
TFLite and ONNX files run without TensorFlow: serving/runtimes.py.)"""

import os

import tensorflow as tf

from common import cli
from common import error_lines
from common import image_limits
from inception.inputs import datasets
from inception.inputs import image_headers
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from inception.serving import predictions
from inception.serving import saved_model

tf1 = tf.compat.v1


class ModelSourceError(cli.UserError):
    """--model names nothing that can classify; the message says what to pass."""


def _read_bytes(path):
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            return handle.read()
    except tf.errors.OpError as error:
        raise OSError(error.message) from None


# TensorFlow's file system: image files may also be URLs (gs://...) on this path.
GFILE_FILES = predictions.FileSystem(isdir=tf.io.gfile.isdir, exists=tf.io.gfile.exists,
                                     walk=tf.io.gfile.walk, read=_read_bytes)


def saved_model_version(path):
    """The SavedModel directory `path` names: itself when it holds saved_model.pb, else its
    newest numbered version (TensorFlow Serving's layout); None when neither."""
    if tf.io.gfile.exists(os.path.join(path, saved_model.SAVED_MODEL_FILE)):
        return path
    if not tf.io.gfile.isdir(path):
        return None
    names = [name.rstrip("/") for name in tf.io.gfile.listdir(path)]
    versions = [int(name) for name in names if name.isdigit() and tf.io.gfile.exists(
        os.path.join(path, name, saved_model.SAVED_MODEL_FILE))]
    return os.path.join(path, str(max(versions))) if versions else None


def open_model(path, log=print, max_pixels=image_limits.MAX_IMAGE_PIXELS):
    """callable(list of encoded images) -> {output name: NumPy array} for `--model=path`,
    raising predictions.ImageError for an image it cannot classify.

    `path` is an export (a version directory or the directory of versions) or a training
    directory; raises ModelSourceError / ExportError / CheckpointError when it is neither.
    Images of more than `max_pixels` pixels fail before decoding; an export keeps the limit
    it was exported with instead."""
    version_dir = saved_model_version(path)
    if version_dir is not None:
        log(f"loading the SavedModel {version_dir}...")
        signature = tf.saved_model.load(version_dir).signatures[saved_model.SERVING_SIGNATURE]
        return raising_image_errors(lambda encoded: {name: value.numpy() for name, value in signature(
            **{saved_model.BYTES_INPUT: tf.constant(encoded, tf.string)}).items()})
    if tf.io.gfile.exists(os.path.join(path, SETTINGS_FILE)):
        return raising_image_errors(_checkpoint_model(path, log, max_pixels))
    raise ModelSourceError(f"--model={path} is neither an export (a directory with "
                           f"{saved_model.SAVED_MODEL_FILE} or numbered versions of one, or a "
                           "model.tflite / model.onnx file of one) nor a training directory "
                           f"(with {SETTINGS_FILE}).")


def _checkpoint_model(train_dir, log, max_pixels):
    directory = RunDirectory(train_dir)
    stored = directory.require_settings()
    checkpoint_path = directory.require_checkpoint(log)
    log(f"loading {checkpoint_path}...")
    label_names = datasets.read_label_names(datasets.labels_dir(stored.data_dir), log)
    serving_graph = saved_model.build_serving_graph(stored.model, label_names,
                                                    max_pixels=max_pixels)
    serving_graph.graph.finalize()
    session = tf1.Session(graph=serving_graph.graph)
    saved_model.restore(session, serving_graph, checkpoint_path)
    return lambda encoded: session.run(serving_graph.outputs_from_bytes,
                                       {serving_graph.image_bytes: encoded})


def raising_image_errors(predict):
    """`predict` raising predictions.ImageError, with one line, where the graph failed on an
    image."""
    def checked(encoded):
        try:
            return predict(encoded)
        except tf.errors.OpError as error:
            raise predictions.ImageError(_image_error(error)) from None
    return checked


def _image_error(error):
    cause = error_lines.root_cause(error.message)
    if cause.startswith(image_headers.TOO_LARGE_START):
        return cause
    if cause == image_headers.UNKNOWN_FORMAT:
        return image_limits.unreadable_message()
    return image_limits.unreadable_message(cause)
