"""Weights of each class's examples in the training loss (--class_weight), for data whose
classes are far from equal in size: `balanced` gives class c the weight n / (k x n_c) (n
training examples, k classes, n_c of class c: Keras's class_weight and scikit-learn's
"balanced"), counted from the training shards; a file gives them by label. The weights are a
tuple over the logits (background first); a label without examples, and the background, keep
1. --balanced_sampling draws each record as often as the balanced weight says instead
(inputs/resampling.py)."""

import os

import numpy as np
import tensorflow as tf

from inception.inputs import resampling
from inception.inputs.datasets import DataError

BALANCED = "balanced"


def needs_counts(class_weight, balanced_sampling):
    """Whether --class_weight `class_weight` or --balanced_sampling needs the training split's
    label counts."""
    return class_weight == BALANCED or balanced_sampling


def label_counts(shards, num_classes):
    """int64 [num_classes]: the records of each label in the TFRecord files `shards` (only the
    labels are parsed), so their sum is the number of records; DataError for a label outside
    0 .. num_classes - 1, which training could not use."""
    records = tf.data.TFRecordDataset(shards).map(resampling.record_label)
    counts = np.zeros(num_classes, np.int64)
    with tf.init_scope():  # eager, even when called while a graph is being built
        for batch in records.batch(4096):
            labels = batch.numpy()
            outside = labels[(labels < 0) | (labels >= num_classes)]
            if outside.size:
                raise DataError(f"a training record has the label {int(outside[0])}, outside "
                                f"0 .. {num_classes - 1} for this data set's {num_classes} "
                                "logits; rebuild the shards or pass the right --num_classes.")
            counts += np.bincount(labels, minlength=num_classes)
    return counts


def balanced_weights(counts):
    """n / (k x n_c) for each class c with examples (k of them, n in all); 1 for the others."""
    counts = np.asarray(counts, np.float64)
    present = counts > 0
    weights = np.ones_like(counts)
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return tuple(float(weight) for weight in weights)


def weights_from_file(path, label_names, num_classes):
    """The weights a file gives: one `<label> <weight>` per line (the label's name from
    labels.txt, or its number; '#' starts a comment), 1 for a label it does not name; DataError
    naming the line for a label the data set does not have or a weight that is not positive."""
    weights = [1.0] * num_classes
    numbers = {name: index + 1 for index, name in enumerate(label_names)}
    try:
        with tf.io.gfile.GFile(path) as handle:
            lines = handle.read().splitlines()
    except tf.errors.OpError as error:
        raise DataError(f"cannot read --class_weight={path} ({error.message}); pass a file of "
                        f"'<label> <weight>' lines or '{BALANCED}'.") from None
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        label, _, value = text.rpartition(" ")
        label = label.strip()
        index = numbers.get(label, int(label) if label.isdigit() else None)
        if index is None or not 1 <= index < num_classes:
            known = (", ".join(label_names[:8]) + (", ..." if len(label_names) > 8 else "")
                     if label_names else f"numbers 1 to {num_classes - 1}")
            raise DataError(f"--class_weight={path} line {number} names the label {label!r}, "
                            f"which the data set does not have (its labels: {known}).")
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not weight > 0:
            raise DataError(f"--class_weight={path} line {number}: {value!r} is not a positive "
                            "weight; write '<label> <weight>', e.g. 'cat 2.5'.")
        weights[index] = weight
    return tuple(weights)


def resolve_weights(class_weight, balanced_sampling, counts, label_names, num_classes,
                    log=print):
    """(the loss's class weights of --class_weight `class_weight`, or None: all 1; the input's
    sampling weights with `balanced_sampling`, or None), each logged in one line. `counts`:
    the training split's label_counts, counted once by the caller when needs_counts says so
    (else None)."""
    present = f"{int((counts > 0).sum())} classes of the training split" \
        if counts is not None else ""
    class_weights = sampling_weights = None
    if class_weight == BALANCED:
        class_weights = balanced_weights(counts)
        log(f"class weights (balanced over {present}): {_spread(class_weights, label_names)}")
    elif class_weight:
        class_weights = weights_from_file(os.path.expanduser(class_weight), label_names,
                                          num_classes)
        log(f"class weights ({class_weight}): {_spread(class_weights, label_names)}")
    if balanced_sampling:
        sampling_weights = balanced_weights(counts)
        log(f"balanced sampling over {present}: each record drawn, on average per epoch, "
            f"{_spread(sampling_weights, label_names)} times")
    return class_weights, sampling_weights


def _spread(weights, label_names):
    """'from <least> to <most> (label <the most's>)', the background left out."""
    heaviest = int(np.argmax(weights[1:])) + 1
    return (f"from {min(weights[1:]):.3g} to {max(weights[1:]):.3g} "
            f"(label {label_names[heaviest - 1] if label_names else heaviest})")
