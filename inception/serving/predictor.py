"""Classifying image files with a trained model: an exported SavedModel, or a training
directory whose newest checkpoint is loaded into the same inference graph in memory."""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from common import error_lines
from common import image_limits
from inception.inputs import datasets
from inception.inputs import preprocessing
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from inception.serving import saved_model

tf1 = tf.compat.v1

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")


class ModelSourceError(ValueError):
    """--model names nothing that can classify; the message says what to pass."""


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The top-k of one image, or why it could not be classified."""
    path: str
    classes: tuple = ()
    probabilities: tuple = ()
    label_texts: tuple = ()
    error: str = ""

    def block(self):
        """A few lines for a person: the path, then one line per class, most likely first."""
        if self.error:
            return f"{self.path}\n  error: {self.error}"
        rows = [f"  {probability:7.2%}  {text} ({label})" for label, probability, text
                in zip(self.classes, self.probabilities, self.label_texts)]
        return "\n".join([self.path] + rows)

    def as_json(self):
        """A dict for one JSON line."""
        if self.error:
            return {"path": self.path, "error": self.error}
        return {"path": self.path, "top_k": [
            {"class": label, "label": text, "probability": probability}
            for label, probability, text in zip(self.classes, self.probabilities,
                                                self.label_texts)]}


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
    """callable(list of encoded images) -> {output name: NumPy array} for `--model=path`.

    `path` is an export (a version directory or the directory of versions) or a training
    directory; raises ModelSourceError / ExportError / CheckpointError when it is neither.
    Images of more than `max_pixels` pixels fail before decoding; an export keeps the limit
    it was exported with instead."""
    version_dir = saved_model_version(path)
    if version_dir is not None:
        log(f"loading the SavedModel {version_dir}...")
        signature = tf.saved_model.load(version_dir).signatures[saved_model.SERVING_SIGNATURE]
        return lambda encoded: {name: value.numpy() for name, value in signature(
            **{saved_model.BYTES_INPUT: tf.constant(encoded, tf.string)}).items()}
    if tf.io.gfile.exists(os.path.join(path, SETTINGS_FILE)):
        return _checkpoint_model(path, log, max_pixels)
    raise ModelSourceError(f"--model={path} is neither an export (a directory with "
                           f"{saved_model.SAVED_MODEL_FILE} or numbered versions of one) nor a "
                           f"training directory (with {SETTINGS_FILE}).")


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


def image_files(paths):
    """(files, missing): the files named, and the image files (by extension) in the folders
    named, walked in sorted order; `missing` lists the paths that do not exist."""
    files, missing = [], []
    for path in paths:
        if tf.io.gfile.isdir(path):
            for folder, _, names in sorted(tf.io.gfile.walk(path)):
                files.extend(os.path.join(folder, name) for name in sorted(names)
                             if name.lower().endswith(IMAGE_EXTENSIONS))
        elif tf.io.gfile.exists(path):
            files.append(path)
        else:
            missing.append(path)
    return files, missing


def classify_files(predict, paths, batch_size=16, on_batch=None):
    """Yields a Prediction per file of `paths`, in order.

    Files are read and classified `batch_size` at a time; when a batch fails (an unreadable,
    non-image or too large file), its files are retried one by one so only the bad ones report
    an error.
    on_batch(count) is called after each batch (a progress bar)."""
    for start in range(0, len(paths), batch_size):
        chunk = paths[start:start + batch_size]
        yield from _classify_chunk(predict, chunk)
        if on_batch is not None:
            on_batch(len(chunk))


def _classify_chunk(predict, paths):
    contents, predictions = [], {}
    for path in paths:
        try:
            with tf.io.gfile.GFile(path, "rb") as handle:
                contents.append((path, handle.read()))
        except (OSError, tf.errors.OpError) as error:
            predictions[path] = Prediction(path, error=f"cannot read it ({error})")
    readable = [path for path, _ in contents]
    try:
        predictions.update(_predictions(readable, predict([data for _, data in contents])))
    except tf.errors.OpError:
        for path, data in contents:
            try:
                predictions.update(_predictions([path], predict([data])))
            except tf.errors.OpError as error:
                predictions[path] = Prediction(path, error=_image_error(error))
    return [predictions[path] for path in paths]


def _predictions(paths, outputs):
    texts = outputs["label_texts"]
    return {path: Prediction(path, classes=tuple(int(c) for c in outputs["classes"][row]),
                             probabilities=tuple(float(p) for p in
                                                 outputs["probabilities"][row]),
                             label_texts=tuple(_text(t) for t in texts[row]))
            for row, path in enumerate(paths)}


def _text(value):
    return value.decode("utf-8") if isinstance(value, (bytes, np.bytes_)) else str(value)


def _image_error(error):
    cause = error_lines.root_cause(error.message)
    if cause.startswith(preprocessing.TOO_LARGE_START):
        return cause
    if cause == preprocessing.UNKNOWN_FORMAT:
        cause = preprocessing.NOT_AN_IMAGE_REASON
    return f"not a readable JPEG, PNG, GIF or BMP image ({cause})"
