"""Checkpoint directories: the model settings stored beside checkpoints, and finding them.

`model_settings.json` records what builds the network (image size, depth multiplier, number
of classes, data set) and the data directory, so the evaluation job needs no repeated flags and
a resumed run cannot silently change the model.
"""

import dataclasses
import json
import os
import re

import tensorflow as tf

from data import tfrecord_format
from inception.model import ModelSettings

SETTINGS_FILE = "model_settings.json"


class CheckpointError(ValueError):
    """A checkpoint directory cannot be used as asked; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """What a training directory says about its run."""
    settings: ModelSettings
    data_dir: str


def write_stored_run(train_dir, run):
    """Writes `model_settings.json` into `train_dir` (atomically)."""
    payload = dict(dataclasses.asdict(run.settings), data_dir=run.data_dir)
    tfrecord_format.write_text_atomically(os.path.join(train_dir, SETTINGS_FILE),
                                          json.dumps(payload, indent=2, sort_keys=True) + "\n")


def read_stored_run(train_dir):
    """The StoredRun of `train_dir`, or None when it has no settings file."""
    path = os.path.join(train_dir, SETTINGS_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            payload = json.load(handle)
        data_dir = payload.pop("data_dir", "")
        return StoredRun(ModelSettings(**payload), data_dir)
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{path} is damaged ({error}); restore it from a backup or "
                              "delete it to use the flags' settings.") from None


def merge_settings(stored, requested, explicit):
    """Settings for a run in a directory that already has some.

    Args:
      stored: ModelSettings from the directory, or None.
      requested: ModelSettings from flags and data-set defaults.
      explicit: names of the fields the user set explicitly.

    Returns the stored settings; raises CheckpointError when an explicit flag contradicts them.
    """
    if stored is None:
        return requested
    for field in dataclasses.fields(ModelSettings):
        name = field.name
        if name in explicit and getattr(stored, name) != getattr(requested, name):
            raise CheckpointError(
                f"the checkpoints here were trained with {name}={getattr(stored, name)!r}, "
                f"not {getattr(requested, name)!r}; drop that flag or use a new --train_dir.")
    return stored


def latest_checkpoint(checkpoint_dir):
    """Path prefix of the newest complete checkpoint in `checkpoint_dir`, or None."""
    return tf.train.latest_checkpoint(checkpoint_dir) if os.path.isdir(checkpoint_dir) else None


def all_checkpoints(checkpoint_dir):
    """Path prefixes of the complete checkpoints still listed in the directory, oldest first."""
    state = tf.train.get_checkpoint_state(checkpoint_dir) if os.path.isdir(checkpoint_dir) else None
    if state is None:
        return []
    return [path for path in state.all_model_checkpoint_paths
            if tf.io.gfile.exists(path + ".index")]


def step_of(checkpoint_path):
    """The global step in a checkpoint's name (`model.ckpt-1200` -> 1200)."""
    match = re.search(r"-(\d+)$", checkpoint_path)
    if not match:
        raise CheckpointError(f"cannot tell the step of checkpoint {checkpoint_path}.")
    return int(match.group(1))


def check_restorable(checkpoint_path, restore_map):
    """Raises CheckpointError naming the first variable missing from, or shaped differently in,
    the checkpoint (e.g. a model of another size or number of classes)."""
    try:
        stored = dict(tf.train.list_variables(checkpoint_path))
    except (tf.errors.OpError, ValueError) as error:
        raise CheckpointError(f"cannot read checkpoint {checkpoint_path}: "
                              f"{str(error).splitlines()[0]}") from None
    for name, variable in sorted(restore_map.items()):
        shape = variable.shape.as_list()
        if name not in stored:
            raise CheckpointError(
                f"checkpoint {checkpoint_path} has no variable {name}: it holds another model; "
                "check --checkpoint_dir, or the model flags (image size, depth multiplier).")
        if list(stored[name]) != shape:
            raise CheckpointError(
                f"variable {name} has shape {list(stored[name])} in {checkpoint_path} but "
                f"{shape} in this model; the model settings do not match the checkpoint "
                "(drop overriding flags such as --depth_multiplier or --num_classes).")
