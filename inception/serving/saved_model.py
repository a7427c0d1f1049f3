"""The trained model as a TensorFlow SavedModel, and the same graph in memory for classifying.

The network is built in inference mode (batch norm from its moving statistics, no dropout, no
auxiliary head) and restored like the evaluation job restores it: the trainable weights from
their exponential moving averages. Two signatures share its variables:

- `serving_default`: `image_bytes` (string [N], JPEG/PNG/GIF/BMP) decoded and preprocessed
  exactly as the evaluation job does (preprocessing.eval_image); an image of more pixels
  than the limit baked in at export (the graph's constant `max_image_pixels`) fails the
  request with a message naming its size, before it is decoded;
- `predict_images`: `images` (float32 [N, size, size, 3] in [-1, 1]).

Both return `classes` (int64 [N, k], the 1-based labels; the background, logit 0, is never
among them), `probabilities` (float32 [N, k], the softmax over the labels), `label_texts`
(string [N, k]) and `logits` (float32 [N, num_classes], background included).
The export is written in TensorFlow Serving's layout, `<export_dir>/<global step>/`, under a
temporary name first, so a version directory is always complete. The other --formats add their
model files to the same folder, with `model_inputs.json` and `labels.txt` (model_files.py).
"""

import dataclasses
import json
import os
import shutil
import tempfile

import tensorflow as tf

from common import cli
from common import error_lines
from common import files
from common import image_limits
from inception.config import commands
from inception.inputs import datasets
from inception.inputs import preprocessing
from inception.model import network
from inception.model import registry
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from inception.serving import converted
from inception.serving import model_files

tf1 = tf.compat.v1

SERVING_SIGNATURE = "serving_default"
IMAGES_SIGNATURE = "predict_images"
BYTES_INPUT = "image_bytes"  # the `_bytes` suffix tells REST front ends to expect base64
IMAGES_INPUT = "images"
SAVED_MODEL_FILE = "saved_model.pb"
LIMIT_CONSTANT = "max_image_pixels"
BACKGROUND_TEXT = "background"


class ExportError(cli.UserError):
    """The export cannot be written as asked; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class ServingGraph:
    """The inference graph: its two inputs, their outputs, and the restoring saver."""
    graph: tf.Graph
    image_bytes: tf.Tensor
    images: tf.Tensor
    outputs_from_bytes: dict
    outputs_from_images: dict
    restore_map: dict
    saver: tf1.train.Saver


def label_texts(num_classes, label_names):
    """Text of every logit: "background" for 0, then the data set's label names (or the label
    numbers, when the data set had no labels.txt)."""
    names = list(label_names) or [str(label) for label in range(1, num_classes)]
    return [BACKGROUND_TEXT] + names


def prediction_outputs(logits, texts, top_k):
    """{classes, probabilities, label_texts, logits} of a batch of logits (float32 [N, C]):
    the top classes and their softmax over the labels, the background left out
    (network.without_background); `logits` as the model gives them."""
    ranked = network.without_background(logits)
    # Ranked by logit: probabilities that underflow to 0 would tie with the background's.
    top = tf.math.top_k(ranked, k=min(top_k, len(texts) - 1))
    classes = tf.cast(top.indices, tf.int64)
    probabilities = tf.gather(tf.nn.softmax(ranked), top.indices, batch_dims=1)
    return {"classes": classes, "probabilities": probabilities,
            "label_texts": tf.gather(tf.constant(texts), classes), "logits": logits}


def build_serving_graph(model, label_names=(), top_k=commands.DEFAULT_TOP_K,
                        logits_fn=None, max_pixels=image_limits.MAX_IMAGE_PIXELS,
                        limit_flag=image_limits.LIMIT_FLAG):
    """Builds the inference graph for ModelSettings `model`; returns ServingGraph.

    logits_fn: callable(images, model) -> logits; by default the network `model` names, in
      inference mode.
    max_pixels: images of more pixels fail `image_bytes` before decoding, with a message that
      names their size and `limit_flag`; held by the int64 constant LIMIT_CONSTANT.
    """
    logits_fn = logits_fn or registry.inference_logits
    size = model.image_size
    texts = label_texts(model.num_classes, label_names)
    graph = tf.Graph()
    with graph.as_default():
        image_bytes = tf1.placeholder(tf.string, [None], name=BYTES_INPUT)
        images = tf1.placeholder(tf.float32, [None, size, size, 3], name=IMAGES_INPUT)
        limit = tf.constant(max_pixels, tf.int64, name=LIMIT_CONSTANT)
        decoded = tf.map_fn(
            lambda encoded: preprocessing.eval_image(encoded, size, limit, limit_flag),
            image_bytes, fn_output_signature=tf.float32)
        with tf1.variable_scope(tf1.get_variable_scope(), reuse=tf1.AUTO_REUSE):
            outputs_from_bytes = prediction_outputs(logits_fn(decoded, model), texts, top_k)
            outputs_from_images = prediction_outputs(logits_fn(images, model), texts, top_k)
        restore_map = checkpoint_io.restore_map_with_averages(tf1.global_variables())
        saver = tf1.train.Saver(restore_map)
    return ServingGraph(graph=graph, image_bytes=image_bytes, images=images,
                        outputs_from_bytes=outputs_from_bytes,
                        outputs_from_images=outputs_from_images, restore_map=restore_map,
                        saver=saver)


def restore(session, serving_graph, checkpoint_path):
    """Restores `checkpoint_path` into `session`; CheckpointError naming it when it cannot."""
    with session.graph.as_default():
        checkpoint_io.restore_or_explain(serving_graph.saver, session, checkpoint_path,
                                         serving_graph.restore_map)


def check_export_dir(export_dir):
    """Raises ExportError when `export_dir` is a file or cannot be written (created if
    missing): checked before the long work of an export."""
    if tf.io.gfile.exists(export_dir) and not tf.io.gfile.isdir(export_dir):
        raise ExportError(f"--export_dir={export_dir} is a file; pass a directory (new or one "
                          "that holds earlier exports).")
    try:
        files.ensure_writable_directory(export_dir)
    except (OSError, tf.errors.OpError) as error:
        raise ExportError(error_lines.cannot_write(f"in --export_dir={export_dir}",
                                                   error)) from None


@dataclasses.dataclass(frozen=True)
class VersionContents:
    """What an exported version holds beside the weights.

    top_k: the classes each answer lists; max_pixels: the serving signature refuses images of
    more pixels (baked in); formats: config.commands.EXPORT_FORMATS to write into the version
    folder (the SavedModel always; a model one of them cannot hold is a
    model_files.ConversionError, nothing kept); calibration: float32 images for tflite_int8
    (converted.calibration_images).
    """
    top_k: int = commands.DEFAULT_TOP_K
    max_pixels: int = image_limits.MAX_IMAGE_PIXELS
    formats: tuple = (commands.SAVED_MODEL_FORMAT,)
    calibration: object = None


def export_saved_model(checkpoint_path, stored, label_names, export_dir,
                       contents=VersionContents(), logits_fn=None):
    """Writes the SavedModel of `checkpoint_path` to `<export_dir>/<step>`; returns that path.

    Args:
      stored: run.directory.StoredRun of the training directory (its model settings).
      label_names: label_names[i - 1] names label i; empty when the data set had none.
      contents: VersionContents; logits_fn: stands in for the network (tests).

    Raises ExportError when that version exists already (nothing is overwritten).
    """
    top_k, max_pixels, formats = contents.top_k, contents.max_pixels, contents.formats
    version_dir = new_version_dir(export_dir, checkpoint_path)
    serving_graph = build_serving_graph(stored.model, label_names, top_k, logits_fn,
                                        max_pixels, image_limits.EXPORT_LIMIT_FLAG)
    # Written whole under a temporary name first: beside the versions on a local disk (then one
    # rename), in a local temporary directory for a URL (object stores cannot rename folders).
    staging_parent = tempfile.mkdtemp() if files.is_url(export_dir) else export_dir
    partial_dir = os.path.join(staging_parent, f".partial-{os.path.basename(version_dir)}-"
                                               f"{os.getpid()}")
    try:
        _write_saved_model(serving_graph, checkpoint_path, partial_dir, formats,
                           contents.calibration)
        if set(formats) - {commands.SAVED_MODEL_FORMAT}:
            model_files.write(partial_dir, model_files.ModelInputs(
                stored.model.image_size, tuple(label_texts(stored.model.num_classes,
                                                           label_names)), top_k, max_pixels))
        _write_settings(partial_dir, stored)
        _publish(partial_dir, version_dir)
    except (OSError, tf.errors.PermissionDeniedError, tf.errors.ResourceExhaustedError,
            tf.errors.NotFoundError, tf.errors.FailedPreconditionError) as error:
        raise ExportError(f"could not write the export to {export_dir} "
                          f"({error_lines.file_error_cause(error)}); nothing of it was kept. Free "
                          "some space or fix the directory, then rerun.") from None
    finally:
        if os.path.isdir(partial_dir):
            shutil.rmtree(partial_dir)
        if staging_parent != export_dir:
            shutil.rmtree(staging_parent, ignore_errors=True)
    return version_dir


def new_version_dir(export_dir, checkpoint_path):
    """`<export_dir>/<step of checkpoint_path>`, checked to be writable and new; ExportError
    when that version exists already (nothing is overwritten)."""
    check_export_dir(export_dir)
    version_dir = os.path.join(export_dir, str(checkpoint_io.step_of(checkpoint_path)))
    if tf.io.gfile.exists(version_dir):
        raise ExportError(f"{version_dir} exists already (this checkpoint was exported); train "
                          "further for a new version or pass another --export_dir.")
    return version_dir


def _publish(partial_dir, version_dir):
    """Moves a complete export into place: one rename on a local disk; on another file system a
    copy with saved_model.pb last, since a server takes a version to exist once it has one."""
    if not files.is_url(version_dir):
        os.rename(partial_dir, version_dir)
        return
    copies = []
    for folder, _, names in os.walk(partial_dir):
        for name in names:
            source = os.path.join(folder, name)
            copies.append((source, os.path.join(version_dir,
                                                os.path.relpath(source, partial_dir))))
    for source, target in sorted(copies, key=lambda pair: pair[1].endswith(SAVED_MODEL_FILE)):
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.copy(source, target)


def export_training_run(export, log=print):
    """Exports what `export` (config.commands.ExportSettings) names: the newest usable
    checkpoint of the training directory (or export.checkpoint_path) with the settings and
    label names stored beside it, refusing images of more than max_image_pixels pixels, in its
    formats (tflite_int8 calibrated on calibration_images images of the run's training
    shards); returns the new version directory. Everything is checked before anything is
    written."""
    export_dir, formats = export.export_dir, export.format_names()
    directory = RunDirectory(export.checkpoint_dir)
    stored = directory.require_settings()
    checkpoint_path = directory.resolve(export.checkpoint_path, log)
    new_version_dir(export_dir, checkpoint_path)
    label_names = datasets.read_label_names(datasets.labels_dir(stored.data_dir), log)
    calibration = None
    if "tflite_int8" in formats:
        calibration = converted.calibration_images(datasets.labels_dir(stored.data_dir),
                                              stored.model.image_size,
                                              stored.model.num_classes - 1,
                                              export.calibration_images)
        log(f"calibrating tflite_int8 on {len(calibration)} training images")
    log(f"exporting {checkpoint_path} ({stored.model.image_size} px, "
        f"{stored.model.num_classes - 1} labels)...")
    return export_saved_model(checkpoint_path, stored, label_names, export_dir, VersionContents(
        export.top_k, export.max_image_pixels, formats, calibration))


def _write_saved_model(serving_graph, checkpoint_path, target_dir, formats, calibration=None):
    with serving_graph.graph.as_default():
        signatures = _signatures(serving_graph)
    with tf1.Session(graph=serving_graph.graph) as session:
        restore(session, serving_graph, checkpoint_path)
        builder = tf1.saved_model.Builder(target_dir)
        builder.add_meta_graph_and_variables(session, [tf1.saved_model.SERVING],
                                             signature_def_map=signatures,
                                             strip_default_attrs=True)
        builder.save()
        logits = serving_graph.outputs_from_images["logits"]
        if "tflite" in formats:
            converted.write_tflite(session, serving_graph.images, logits, target_dir)
        if "tflite_int8" in formats:
            converted.write_tflite(session, serving_graph.images, logits, target_dir, calibration)
        if "onnx" in formats:
            converted.write_onnx(session, serving_graph.images, logits, target_dir)


def _signatures(serving_graph):
    return {
        SERVING_SIGNATURE: tf1.saved_model.predict_signature_def(
            {BYTES_INPUT: serving_graph.image_bytes}, serving_graph.outputs_from_bytes),
        IMAGES_SIGNATURE: tf1.saved_model.predict_signature_def(
            {IMAGES_INPUT: serving_graph.images}, serving_graph.outputs_from_images),
    }


def _write_settings(target_dir, stored):
    # assets.extra is where TensorFlow Serving lets a model carry files it does not read.
    extra = os.path.join(target_dir, "assets.extra")
    tf.io.gfile.makedirs(extra)
    with tf.io.gfile.GFile(os.path.join(extra, SETTINGS_FILE), "w") as handle:
        handle.write(json.dumps(dataclasses.asdict(stored.model), indent=2,
                                sort_keys=True) + "\n")
