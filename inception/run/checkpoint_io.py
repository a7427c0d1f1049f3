"""Checkpoint files: what a checkpoint holds, whether it can be trusted, and restoring it.

Where checkpoints live and which one a tool uses is run/directory.py's business; this module
reads one checkpoint given its prefix (`.../model.ckpt-1200`).
"""

import re

import numpy as np
import tensorflow as tf

from common import cli
from common import error_lines

tf1 = tf.compat.v1

_STEP = re.compile(r"-(\d+)$")


class CheckpointError(cli.UserError):
    """A checkpoint directory cannot be used as asked; the message says what to do."""


def step_of(checkpoint_path):
    """The global step in a checkpoint's name (`model.ckpt-1200` -> 1200)."""
    match = _STEP.search(checkpoint_path)
    if not match:
        raise CheckpointError(f"cannot tell the step of checkpoint {checkpoint_path}.")
    return int(match.group(1))


def step_or_none(checkpoint_path):
    """step_of, or None for a name without a step (e.g. a set-aside `...-12.unusable`)."""
    match = _STEP.search(checkpoint_path)
    return int(match.group(1)) if match else None


def stored_shapes(checkpoint_path):
    """{variable name: shape} of a checkpoint; CheckpointError when it cannot be read."""
    try:
        return _reader(checkpoint_path).get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as error:
        raise CheckpointError(f"cannot read checkpoint {checkpoint_path}: "
                              f"{error_lines.cause_of(error)}") from None


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
                + (hint or "the model settings do not match the checkpoint (drop the flags "
                   "that override them, such as --image_size or --depth_multiplier)") + ".")


def restore_or_explain(saver, session, checkpoint_path, restore_map):
    """Restores `checkpoint_path` into `session` with `saver` (whose variables `restore_map`
    maps by checkpoint name), or raises CheckpointError saying why it cannot: another model,
    a checkpoint deleted while it was read (training keeps only its newest few), or damage."""
    try:
        check_restorable(checkpoint_path, restore_map)
        saver.restore(session, checkpoint_path)
    except (CheckpointError, tf.errors.OpError) as error:
        if not tf.io.gfile.exists(checkpoint_path + ".index"):
            raise CheckpointError(
                f"checkpoint {checkpoint_path} was deleted while it was read (training keeps "
                "only its newest --keep_checkpoints); use a newer one.") from None
        if isinstance(error, CheckpointError):
            raise
        reason = error_lines.root_cause(error.message) or type(error).__name__
        raise CheckpointError(
            f"checkpoint {checkpoint_path} cannot be restored, it is damaged ({reason})"
        ) from None


def restore_map_with_averages(variables):
    """{checkpoint name: variable}: trainable variables from their moving averages, others as is.

    The averages' names do not depend on the decay, so none is needed here."""
    averages = tf1.train.ExponentialMovingAverage(decay=0.0)
    trainable = set(tf1.trainable_variables())
    return {averages.average_name(v) if v in trainable else v.op.name: v for v in variables}


def pretrained_initializer(checkpoint_path, variables, exclude_scopes=(), log=print):
    """Prepares restoring `variables` (except those under `exclude_scopes`) from the checkpoint
    prefix `checkpoint_path` (driver.resolution.pretrained_checkpoint resolves a directory).

    Call while the graph is being built; returns callable(session) that restores. Names must
    match (`InceptionV3/...`, as in tf-slim's published checkpoint and in ours); a missing
    variable or a shape mismatch is a CheckpointError that names it.
    """
    path = checkpoint_path
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
        return f"damaged ({error_lines.root_cause(error) or type(error).__name__})"
    if bad:
        return f"{len(bad)} of {len(names)} tensors hold NaN or Inf (e.g. {bad[0]})"
    return None


def _finite(value):
    array = np.asarray(value)
    return not np.issubdtype(array.dtype, np.floating) or bool(np.all(np.isfinite(array)))
