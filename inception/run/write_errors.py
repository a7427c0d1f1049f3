"""Writes into a run directory that fail (a full disk, a read-only directory): the error the user
gets, naming the file or checkpoint, the cause, the space a checkpoint needs and the space free,
and the clean-up that leaves the directory as it was before a failed save.

What is written where is run/directory.py's business; this module owns only the failure.
"""

import os
import shutil

import tensorflow as tf

from common import error_lines
from common import files
from inception.run.checkpoint_io import CheckpointError


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (e.g. a full disk); nothing of it was left behind."""


def write_text_or_explain(path, text):
    """files.write_text_atomically(path, text), or CheckpointError naming `path`, the cause and
    what to do (the old file stays)."""
    try:
        files.write_text_atomically(path, text)
    except OSError as error:
        raise CheckpointError(f"cannot write {path}: {error.strerror or error}; free some space "
                              "or fix the directory, then rerun.") from None
    except tf.errors.OpError as error:
        raise CheckpointError(f"cannot write {path}: {error_lines.root_cause(error.message)}; fix "
                              "the directory, then rerun.") from None


def remove_new_files(directory, before):
    """Removes every file and folder in `directory` whose name is not in `before` (its listing
    before a save that failed halfway)."""
    for name in set(tf.io.gfile.listdir(directory)) - before:
        path = os.path.join(directory, name.rstrip("/"))
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)


def save_error(run_dir, step, error, needed_bytes):
    """The CheckpointWriteError for `error`, which a save of `step` into `run_dir` (a
    RunDirectory, already cleaned up) raised: the directory, the cause, the space a checkpoint
    needs and is free, and the checkpoint still there."""
    latest = run_dir.newest()
    kept = f"the newest checkpoint is still {latest}" if latest else "no checkpoint was kept"
    return CheckpointWriteError(
        f"could not save checkpoint {run_dir.prefix(step)} in {run_dir.path}: "
        f"{_reason(error)}; a checkpoint here needs about {_size(needed_bytes)}"
        f"{_free_space(run_dir.path)}; {kept}. Free some space or fix the directory, then "
        "rerun the same command to resume.")


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


def _reason(error):
    message = getattr(error, "message", None) or getattr(error, "strerror", None)
    return error_lines.root_cause(message or str(error))
