"""Classifying image files with any model: finding the files, batching them, retrying a failed
batch one image at a time, and the top classes of each. The model is a callable that takes
encoded images and returns their outputs (serving/tf_models.py opens a SavedModel or training
directory, serving/runtimes.py a TFLite or ONNX file). This module never imports TensorFlow.
"""

import dataclasses
import os

import numpy as np

from common import cli
from inception.config import commands

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")


class ImageError(cli.UserError):
    """One image cannot be classified (not an image, too large); the message is one line."""


def _read_local(path):
    with open(path, "rb") as handle:
        return handle.read()


@dataclasses.dataclass(frozen=True)
class FileSystem:
    """The file operations classifying needs: local files by default; serving/tf_models.py has
    TensorFlow's, which also reach URLs. read(path) -> bytes raises OSError."""
    isdir: object = os.path.isdir
    exists: object = os.path.exists
    walk: object = os.walk
    read: object = _read_local


LOCAL_FILES = FileSystem()


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


def top_k_outputs(logits, texts, top_k):
    """{classes, probabilities, label_texts, logits} of float logits [N, C], as the
    SavedModel's graph computes them (the background's logit left out as
    network.without_background does; the k largest logits, the lower class first among equals,
    and their softmax over the labels); `texts` names each class. Written for the models
    without that graph."""
    ranked = np.array(logits, dtype=np.float32)
    ranked[:, 0] = -np.inf
    shifted = np.exp(ranked - ranked.max(axis=1, keepdims=True))
    probabilities = (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32)
    classes = np.argsort(-ranked, axis=1, kind="stable")[:, :min(top_k, len(texts) - 1)]
    return {"classes": classes.astype(np.int64),
            "probabilities": np.take_along_axis(probabilities, classes, axis=1),
            "label_texts": np.array(texts, dtype=object)[classes], "logits": logits}


def image_files(paths, files=LOCAL_FILES):
    """(image files, missing): the files named, and the image files (by extension) in the
    folders named, walked in sorted order; `missing` lists the paths that do not exist."""
    found, missing = [], []
    for path in paths:
        if files.isdir(path):
            for folder, _, names in sorted(files.walk(path)):
                found.extend(os.path.join(folder, name) for name in sorted(names)
                             if name.lower().endswith(IMAGE_EXTENSIONS))
        elif files.exists(path):
            found.append(path)
        else:
            missing.append(path)
    return found, missing


def classify_files(predict, paths, batch_size=commands.DEFAULT_CLASSIFY_BATCH, on_batch=None,
                   files=LOCAL_FILES):
    """Yields a Prediction per file of `paths`, in order.

    predict: callable(list of encoded images) -> {classes, probabilities, label_texts, ...},
      raising ImageError when an image of them cannot be classified.
    Files are read and classified `batch_size` at a time; when a batch fails, its files are
    retried one by one so only the bad ones report an error.
    on_batch(count) is called after each batch (a progress bar)."""
    for start in range(0, len(paths), batch_size):
        chunk = paths[start:start + batch_size]
        yield from _classify_chunk(predict, chunk, files)
        if on_batch is not None:
            on_batch(len(chunk))


def _classify_chunk(predict, paths, files):
    contents, predictions = [], {}
    for path in paths:
        try:
            contents.append((path, files.read(path)))
        except OSError as error:
            predictions[path] = Prediction(path, error=f"cannot read it ({error})")
    readable = [path for path, _ in contents]
    try:
        if contents:
            predictions.update(_predictions(readable, predict([data for _, data in contents])))
    except ImageError:
        for path, data in contents:
            try:
                predictions.update(_predictions([path], predict([data])))
            except ImageError as error:
                predictions[path] = Prediction(path, error=str(error))
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
