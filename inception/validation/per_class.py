"""Per-class results of one evaluation: precision and recall per label, the worst classes and
the most confused pairs, as a CSV file, a log line, a markdown report and a confusion-matrix
image for TensorBoard, all computed in NumPy from one confusion-count matrix.

Label 0 is "background" (never a real class of our data sets, and never predicted:
network.without_background), `label_names[i - 1]` names label i, and a matrix has one row and
column per logit, background included, though only labels with examples or predictions show. Everything here
stays cheap for 1001 classes: one matrix, no per-class TensorBoard scalars.
"""

import csv
import dataclasses
import io
import struct

import numpy as np
import tensorflow as tf
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from common import files

tf1 = tf.compat.v1
CSV_FIELDS = ("label", "name", "examples", "predicted", "correct", "precision", "recall")
_AXIS_NAME_CHARS = 24


@dataclasses.dataclass(frozen=True)
class ClassScores:
    """Counts of one label: its examples, the predictions of it, and the correct ones."""
    label: int
    name: str
    examples: int
    predicted: int
    correct: int

    @property
    def precision(self):
        """Share of the predictions of this label that were right; nan when it was never
        predicted."""
        return self.correct / self.predicted if self.predicted else float("nan")

    @property
    def recall(self):
        """Share of this label's examples predicted right; nan when it has none."""
        return self.correct / self.examples if self.examples else float("nan")


@dataclasses.dataclass(frozen=True)
class ConfusedPair:
    """`count` examples of `true_label` predicted as `predicted_label`."""
    true_label: int
    true_name: str
    predicted_label: int
    predicted_name: str
    count: int


def confusion_counts(labels, predictions, num_classes):
    """int64 [num_classes, num_classes] counts of one batch: row = true label, column =
    predicted label. Sum them over batches. Raises ValueError for a label out of range."""
    labels = np.asarray(labels, dtype=np.int64).ravel()
    predictions = np.asarray(predictions, dtype=np.int64).ravel()
    if labels.shape != predictions.shape:
        raise ValueError(f"{labels.size} labels but {predictions.size} predictions")
    for kind, values in (("label", labels), ("prediction", predictions)):
        if values.size and (values.min() < 0 or values.max() >= num_classes):
            raise ValueError(f"a {kind} is outside [0, {num_classes}): "
                             f"{values.min()}..{values.max()}")
    # One bincount is the confusion matrix on the host, where the counts are summed; no need
    # for tf.math.confusion_matrix's graph round trip.
    cells = np.bincount(labels * num_classes + predictions, minlength=num_classes * num_classes)
    return cells.astype(np.int64).reshape(num_classes, num_classes)


def label_name(label, label_names):
    """"background" for 0, `label_names[label - 1]` where there is one, else the number."""
    if label == 0:
        return "background"
    if 0 < label <= len(label_names):
        return label_names[label - 1]
    return str(label)


def active_labels(confusion):
    """The labels with examples or predictions, in order."""
    confusion = np.asarray(confusion)
    return [int(i) for i in np.flatnonzero(confusion.sum(axis=0) + confusion.sum(axis=1))]


def class_scores(confusion, label_names):
    """One ClassScores per label with examples or predictions (background only then), in
    label order."""
    confusion = np.asarray(confusion)
    examples, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    correct = np.diagonal(confusion)
    return [ClassScores(label, label_name(label, label_names), int(examples[label]),
                        int(predicted[label]), int(correct[label]))
            for label in active_labels(confusion)]


def worst_classes(scores, count=3):
    """The `count` classes with examples of the lowest recall (ties: more examples first,
    then the lower label)."""
    with_examples = [score for score in scores if score.examples]
    return sorted(with_examples, key=lambda s: (s.recall, -s.examples, s.label))[:count]


def _ordered_confusions(confusion):
    """(true labels, predicted labels, counts) of every off-diagonal cell above 0, largest
    count first (ties: lower true label, then lower predicted label)."""
    off_diagonal = np.array(confusion)
    np.fill_diagonal(off_diagonal, 0)
    true, predicted = np.nonzero(off_diagonal)
    counts = off_diagonal[true, predicted]
    order = np.lexsort((predicted, true, -counts))
    return true[order], predicted[order], counts[order]


def confused_pairs(confusion, label_names, count=3):
    """The `count` largest off-diagonal cells as ConfusedPairs (ties: lower true label, then
    lower predicted label)."""
    true, predicted, counts = (column[:count] for column in _ordered_confusions(confusion))
    return [ConfusedPair(int(t), label_name(t, label_names), int(p), label_name(p, label_names),
                         int(n)) for t, p, n in zip(true, predicted, counts)]


def _ratio_text(value, digits=4):
    return "" if np.isnan(value) else f"{value:.{digits}f}"


def write_csv(path, scores):
    """Writes one row per ClassScores to `path` (a URL too), atomically; precision and recall
    with 4 decimals, empty where undefined. Returns `path`."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for s in scores:
        writer.writerow([s.label, s.name, s.examples, s.predicted, s.correct,
                         _ratio_text(s.precision), _ratio_text(s.recall)])
    files.write_text_atomically(path, text.getvalue())
    return path


def log_line(scores, pairs, count=3):
    """`worst classes: cat 0.40 (12/30), ...; most confused: cat as dog 8, ...` for the log:
    the `count` worst classes of `scores` (recall, correct/examples) and the first `count`
    of `pairs`. Scores already cut by worst_classes give the same line."""
    worst = ", ".join(f"{s.name} {s.recall:.2f} ({s.correct}/{s.examples})"
                      for s in worst_classes(scores, count))
    confused = ", ".join(f"{p.true_name} as {p.predicted_name} {p.count}"
                         for p in list(pairs)[:count])
    return f"worst classes: {worst or 'none'}; most confused: {confused or 'none'}"


def _cell(text):
    # A pipe or a line break in a class name would split the markdown table row.
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _table(headers, alignments, rows):
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(alignments) + "|"]
    lines.extend("| " + " | ".join(_cell(value) for value in row) + " |" for row in rows)
    return "\n".join(lines)


def markdown_report(scores, pairs, worst=10, pairs_count=10):
    """Markdown for TensorBoard's text plugin: the `worst` classes of lowest recall among
    `scores` and the first `pairs_count` of `pairs`, as two tables."""
    chosen = worst_classes(scores, worst)
    class_table = _table(
        ("label", "name", "examples", "precision", "recall"),
        ("---:", "---", "---:", "---:", "---:"),
        [(s.label, s.name, s.examples, _ratio_text(s.precision) or "n/a",
          _ratio_text(s.recall)) for s in chosen])
    shown = list(pairs)[:pairs_count]
    pair_table = _table(
        ("true label", "true name", "predicted label", "predicted name", "count"),
        ("---:", "---", "---:", "---", "---:"),
        [(p.true_label, p.true_name, p.predicted_label, p.predicted_name, p.count)
         for p in shown])
    return "\n\n".join([
        f"### The {len(chosen)} classes of lowest recall",
        class_table if chosen else "No class has examples.",
        f"### The {len(shown)} most confused pairs",
        pair_table if shown else "No example was confused."]) + "\n"


def shown_labels(confusion, max_classes=50):
    """The labels confusion_image draws: those with examples or predictions; past
    `max_classes` of them, the labels of the most confused pairs, as many pairs in order as
    keep them within `max_classes` (the first `max_classes` labels when nothing is
    confused)."""
    labels = active_labels(confusion)
    if len(labels) <= max_classes:
        return labels
    chosen = set()
    for true, predicted, _ in zip(*_ordered_confusions(confusion)):
        grown = chosen | {int(true), int(predicted)}
        if len(grown) > max_classes:
            break
        chosen = grown
    return sorted(chosen) if chosen else labels[:max_classes]


def _image_title(shown, total, confused):
    title = "true (rows) vs predicted (columns)\neach row: shares of its true class's examples"
    if len(shown) == total:
        return title
    if confused:
        return f"{title}\nthe {len(shown)} classes of the most confused pairs of {total}"
    return f"{title}\nthe first {len(shown)} of {total} classes (none confused)"


def confusion_image(confusion, label_names, max_classes=50):
    """(PNG bytes, height, width) of an RGBA heatmap of the row-normalised confusion matrix
    over shown_labels: each cell is the share of its row's true examples (all of them, shown
    or not) predicted as its column."""
    confusion = np.asarray(confusion)
    shown = shown_labels(confusion, max_classes)
    rows = confusion.sum(axis=1)[shown].astype(np.float64)
    shares = confusion[np.ix_(shown, shown)] / np.maximum(rows, 1)[:, None]
    size, font = 3.5 + 0.22 * len(shown), max(6.0, min(10.0, 240.0 / max(len(shown), 1)))
    figure = Figure(figsize=(size + 1.5, size), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
    names = [label_name(label, label_names)[:_AXIS_NAME_CHARS] for label in shown]
    axes.set_xticks(range(len(shown)), names, rotation=90, fontsize=font)
    axes.set_yticks(range(len(shown)), names, fontsize=font)
    axes.set_xlabel("predicted", fontsize=font + 1)
    axes.set_ylabel("true", fontsize=font + 1)
    confused = np.trace(confusion) < confusion.sum()
    axes.set_title(_image_title(shown, len(active_labels(confusion)), confused),
                   fontsize=font + 2)
    figure.colorbar(image, ax=axes, shrink=0.8).ax.tick_params(labelsize=font)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    png = buffer.getvalue()
    # The PNG header's IHDR chunk holds width then height, big-endian, at bytes 16..24.
    width, height = struct.unpack(">II", png[16:24])
    return png, height, width


def summary(confusion, label_names, tag_prefix="eval"):
    """A tf.compat.v1.Summary with the confusion image (`<tag_prefix>/confusion_matrix`) and
    the markdown report as a text-plugin tensor (`<tag_prefix>/per_class`)."""
    scores = class_scores(confusion, label_names)
    report = markdown_report(scores, confused_pairs(confusion, label_names, count=10))
    png, height, width = confusion_image(confusion, label_names)
    image = tf1.Summary.Image(encoded_image_string=png, height=height, width=width,
                              colorspace=4)
    text_metadata = tf1.SummaryMetadata(
        plugin_data=tf1.SummaryMetadata.PluginData(plugin_name="text"))
    return tf1.Summary(value=[
        tf1.Summary.Value(tag=f"{tag_prefix}/confusion_matrix", image=image),
        tf1.Summary.Value(tag=f"{tag_prefix}/per_class", metadata=text_metadata,
                          tensor=tf.make_tensor_proto(report))])
