"""Checkpoint directories: the model settings stored beside checkpoints, and finding them.

`model_settings.json` records what builds the network (image size, depth multiplier, number
of classes, data set) and the data directory, so the evaluation job needs no repeated flags and
a resumed run cannot silently change the model.
"""

import dataclasses
import json
import os
import re
import shutil

import numpy as np
import tensorflow as tf

from common import files
from inception import errors
from inception.settings import DataSettings
from inception.settings import ModelSettings
from inception.settings import TrainSettings

SETTINGS_FILE = "model_settings.json"


class CheckpointError(ValueError):
    """A checkpoint directory cannot be used as asked; the message says what to do."""


def write_stored_run(train_dir, settings):
    """Writes `model_settings.json` into `train_dir` from the run's resolved TrainSettings (its
    model section and data directory), atomically and only when it changes.

    Raises CheckpointError naming the file when it cannot be written (the old one stays)."""
    payload = dict(dataclasses.asdict(settings.model), data_dir=settings.data.data_dir)
    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    path = os.path.join(train_dir, SETTINGS_FILE)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as handle:
            if handle.read() == text:
                return
    try:
        files.write_text_atomically(path, text)
    except OSError as error:
        raise CheckpointError(f"cannot write {path}: {error.strerror or error}; free some space "
                              "or fix the directory, then rerun.") from None
    except tf.errors.OpError as error:
        raise CheckpointError(f"cannot write {path}: {errors.root_cause(error.message)}; fix "
                              "the directory, then rerun.") from None


def read_stored_run(train_dir):
    """The stored part of the TrainSettings of `train_dir` (its model section and data
    directory), or None when it has no settings file."""
    path = os.path.join(train_dir, SETTINGS_FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as handle:
            payload = json.loads(handle.read())
        data_dir = payload.pop("data_dir", "")
        return TrainSettings(model=ModelSettings(**payload), data=DataSettings(data_dir=data_dir))
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
    return tf.train.latest_checkpoint(checkpoint_dir) if tf.io.gfile.isdir(checkpoint_dir) else None


def all_checkpoints(checkpoint_dir):
    """Path prefixes of the complete checkpoints still listed in the directory, oldest first."""
    if not tf.io.gfile.isdir(checkpoint_dir):
        return []
    state = tf.train.get_checkpoint_state(checkpoint_dir)
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


def stored_shapes(checkpoint_path):
    """{variable name: shape} of a checkpoint; CheckpointError when it cannot be read."""
    try:
        return _reader(checkpoint_path).get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as error:
        raise CheckpointError(f"cannot read checkpoint {checkpoint_path}: "
                              f"{str(error).splitlines()[0]}") from None


def _reader(checkpoint_path):
    # The reader itself, not tf.train.load_checkpoint: that one takes a path for which the file
    # system answers "is a directory" for the directory's newest checkpoint, and file systems
    # that treat every prefix as a directory (ram://, some object stores) answer yes.
    return tf.compat.v1.train.NewCheckpointReader(checkpoint_path)


def check_restorable(checkpoint_path, restore_map, hint=None):
    """Raises CheckpointError naming the first variable missing from, or shaped differently in,
    the checkpoint (e.g. a model of another size or number of classes).

    Args:
      restore_map: {name in the checkpoint: variable}.
      hint: what the user should do, appended to the message (a default fits evaluation).
    """
    stored = stored_shapes(checkpoint_path)
    for name, variable in sorted(restore_map.items()):
        shape = variable.shape.as_list()
        if name not in stored:
            raise CheckpointError(
                f"checkpoint {checkpoint_path} has no variable {name}; "
                + (hint or "it holds another model: check --checkpoint_dir and the model "
                   "flags (image size, depth multiplier)") + ".")
        if list(stored[name]) != shape:
            raise CheckpointError(
                f"variable {name} has shape {list(stored[name])} in {checkpoint_path} but "
                f"{shape} in this model; "
                + (hint or "the model settings do not match the checkpoint (drop overriding "
                   "flags such as --depth_multiplier or --num_classes)") + ".")


FINE_TUNE_EXCLUDED_SCOPES = ("InceptionV3/Logits", "InceptionV3/AuxLogits")


def resolve_checkpoint_path(path):
    """A checkpoint prefix from a prefix or a directory (its newest checkpoint)."""
    if tf.io.gfile.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"no checkpoint in directory {path}; pass a checkpoint file "
                                  "such as .../inception_v3.ckpt or .../model.ckpt-1000.")
        return latest
    if not (tf.io.gfile.exists(path + ".index") or tf.io.gfile.exists(path)):
        raise CheckpointError(f"--pretrained_model_checkpoint_path={path} does not exist.")
    return path


def pretrained_initializer(checkpoint_path, variables, exclude_scopes=(), log=print):
    """Prepares restoring `variables` (except those under `exclude_scopes`) from a checkpoint.

    Call while the graph is being built; returns callable(session) that restores. Names must
    match (`InceptionV3/...`, as in tf-slim's published checkpoint and in ours); a missing
    variable or a shape mismatch is a CheckpointError that names it.
    """
    path = resolve_checkpoint_path(checkpoint_path)
    prefixes = tuple(scope.strip("/") + "/" for scope in exclude_scopes)
    chosen = {v.op.name: v for v in variables if not v.op.name.startswith(prefixes)}
    if not chosen:
        raise CheckpointError("every model variable is excluded from the pretrained restore; "
                              "narrow --checkpoint_exclude_scopes.")
    check_restorable(path, chosen, hint=(
        "use --fine_tune to start the logits layers afresh (a different number of classes), or "
        "--checkpoint_exclude_scopes=<scopes> to leave other layers out"))
    saver = tf.compat.v1.train.Saver(chosen)
    excluded = sorted(v.op.name for v in variables if v.op.name not in chosen)

    def restore(session):
        saver.restore(session, path)
        log(f"initialized {len(chosen)} variables from {path}"
            + (f"; {len(excluded)} left freshly initialized under "
               f"{', '.join(exclude_scopes)}" if excluded else ""))
    return restore


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (e.g. a full disk); nothing of it was left behind."""


def checkpoint_problem(checkpoint_path):
    """Why `checkpoint_path` cannot be trusted, in a few words, or None when it restores.

    Reads every tensor (a truncated data file fails only when its bytes are read) and checks
    the float ones for NaN/Inf.
    """
    try:
        reader = _reader(checkpoint_path)
        names = sorted(reader.get_variable_to_shape_map())
        bad = [name for name in names if not _finite(reader.get_tensor(name))]
    except (tf.errors.OpError, ValueError, IndexError, RuntimeError) as error:
        # The reader's C++ statuses come back as these (OUT_OF_RANGE as IndexError).
        return f"damaged ({errors.root_cause(error) or type(error).__name__})"
    if bad:
        return f"{len(bad)} of {len(names)} tensors hold NaN or Inf (e.g. {bad[0]})"
    return None


def _finite(value):
    array = np.asarray(value)
    return not np.issubdtype(array.dtype, np.floating) or bool(np.all(np.isfinite(array)))


def candidate_checkpoints(checkpoint_dir):
    """Checkpoint prefixes in `checkpoint_dir`, newest step first: those the `checkpoint` file
    lists and any other `model.ckpt-N.index` (the file may be damaged or lag behind)."""
    if not tf.io.gfile.isdir(checkpoint_dir):
        return []
    listed = set(all_checkpoints(checkpoint_dir)) if _state_readable(checkpoint_dir) else set()
    found = {path[:-len(".index")] for path in tf.io.gfile.glob(
        os.path.join(checkpoint_dir, "model.ckpt-*.index"))}
    steps = {path: _step_or_none(path) for path in listed | found}
    return sorted((path for path, step in steps.items() if step is not None),
                  key=lambda path: steps[path], reverse=True)


def _state_readable(checkpoint_dir):
    try:
        tf.train.get_checkpoint_state(checkpoint_dir)
        return True
    except (tf.errors.OpError, ValueError):
        return False


def _step_or_none(path):
    match = re.search(r"-(\d+)$", path)
    return int(match.group(1)) if match else None


def newest_usable_checkpoint(checkpoint_dir, log=print):
    """The newest checkpoint of `checkpoint_dir` that restores and holds finite values, or None
    when there is none at all. Each one skipped gets a line naming it and why; the skipped are
    never deleted (those newer than the one returned are renamed `<name>.unusable...`, or the
    run's next save of that step would overwrite them). Raises CheckpointError when checkpoints
    exist but none can be used."""
    candidates = candidate_checkpoints(checkpoint_dir)
    skipped = []
    for path in candidates:
        problem = checkpoint_problem(path)
        if problem is None:
            for unusable in skipped:
                _set_aside(unusable)
            return path
        log(f"note: not resuming from {path}: {problem}; it is kept as "
            f"{os.path.basename(path)}.unusable.*")
        skipped.append(path)
    if candidates:
        raise CheckpointError(
            f"none of the {len(candidates)} checkpoint(s) in {checkpoint_dir} can be restored "
            "(see the lines above); move them away to start afresh, or pass another "
            "--train_dir.")
    return None


def _set_aside(prefix):
    for path in _files_starting_with(prefix + "."):
        if ".unusable" not in path:
            suffix = path[len(prefix):]
            tf.io.gfile.rename(path, f"{prefix}.unusable{suffix}", overwrite=True)


def _files_starting_with(prefix):
    # By name, not by glob: a prefix may hold characters a glob pattern would read as ranges.
    directory, start = os.path.split(prefix)
    return [os.path.join(directory, name) for name in tf.io.gfile.listdir(directory)
            if name.startswith(start)]


def remove_interrupted_saves(train_dir, log=print):
    """Removes the `*.tempstate*` files that a save killed halfway leaves (TensorFlow writes a
    checkpoint's files under such names and renames them when complete); nothing else."""
    if not tf.io.gfile.isdir(train_dir):
        return
    leftovers = [os.path.join(train_dir, name) for name in tf.io.gfile.listdir(train_dir)
                 if ".tempstate" in name]
    for path in leftovers:
        tf.io.gfile.remove(path)
    if leftovers:
        log(f"note: removed {len(leftovers)} temporary file(s) of an interrupted save in "
            f"{train_dir}.")


def save_checkpoint(saver, session, prefix, step, needed_bytes):
    """saver.save of `session` at `prefix`-`step`; returns the checkpoint's path.

    On a write failure (a full disk, a read-only directory) removes whatever this save wrote,
    so the `checkpoint` file still names the previous checkpoint, and raises
    CheckpointWriteError with the directory, the error and the space a checkpoint needs.
    """
    directory = os.path.dirname(prefix)
    before = set(tf.io.gfile.listdir(directory))
    try:
        return saver.save(session, prefix, global_step=step, write_meta_graph=False)
    except (tf.errors.OpError, OSError) as error:
        for name in set(tf.io.gfile.listdir(directory)) - before:
            path = os.path.join(directory, name.rstrip("/"))
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
        reason = errors.root_cause(getattr(error, "message", None) or str(error))
        latest = latest_checkpoint(directory)
        kept = f"the newest checkpoint is still {latest}" if latest else "no checkpoint was kept"
        raise CheckpointWriteError(
            f"could not save checkpoint {prefix}-{step} in {directory}: {reason}; a checkpoint "
            f"here needs about {_size(needed_bytes)}{_free_space(directory)}; {kept}. "
            "Free some space or fix the directory, then rerun the same command to resume."
        ) from None


def _free_space(directory):
    # Only a local directory can say how much space is free.
    if files.is_url(directory):
        return ""
    return f" ({_size(shutil.disk_usage(directory).free)} free)"


def _size(count):
    for unit, scale in (("GB", 2 ** 30), ("MB", 2 ** 20)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count / 1024:,.0f} KB"
