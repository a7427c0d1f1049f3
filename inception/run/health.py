"""What each save recorded of its checkpoint, and which checkpoint is healthy.

A finite checkpoint is not always one training can continue from: one step at a huge learning
rate writes huge but finite weights from which the next step is NaN. So the training loop
records, for every checkpoint it writes, what it knew then (`SaveRecord`), and marks it
verified once the first step trained from it was sound; after a divergence
`HealthRecords.last_healthy` picks the checkpoint to name, resume from and roll back to. The
records live in `<train_dir>/checkpoint_health.json`; they are advisory: a missing or damaged
file never stops a run (checkpoints without a record count as verified).

The chief also records the step it last logged (`<train_dir>/progress.json`, record_progress),
so that a run resumed after a crash says how many steps since its checkpoint it trains again,
and the run's wall time so far (RunClock), which a resumed run goes on counting.

A write into the run directory that fails (a full disk, a read-only directory) gets an error
naming the file or checkpoint, the cause, the space a checkpoint needs and the space free, and
the clean-up that leaves the directory as it was before the failed save (`save_error`,
`remove_new_files`, `write_text_or_explain`). What is written where is run/directory.py's.
"""

import dataclasses
import json
import os
import shutil
import time

import tensorflow as tf

from common import error_lines
from common import files
from inception.run.checkpoint_io import step_of
from inception.run.checkpoint_io import CheckpointError

HEALTH_FILE = "checkpoint_health.json"
PROGRESS_FILE = "progress.json"


def record_progress(directory, step, wall_secs=None):
    """Records that the run in `directory` (a RunDirectory) reached `step` after `wall_secs` of
    wall time (RunClock); best effort, as the record is only advice for the next resume."""
    try:
        files.write_text_atomically(directory.file(PROGRESS_FILE), json.dumps(
            {"step": step, "wall_secs": wall_secs}) + "\n")
    except (OSError, tf.errors.OpError):
        pass


def recorded_progress(directory, field="step"):
    """What the run in `directory` last recorded: the step it reached (`field` "step") or its
    wall time then ("wall_secs"); None when nothing readable was recorded."""
    try:
        value = json.loads(files.read_text(directory.file(PROGRESS_FILE)))[field]
        return None if value is None else (int(value) if field == "step" else float(value))
    except (OSError, tf.errors.OpError, ValueError, KeyError, TypeError):
        return None


class RunClock:
    """A run's wall time across its attempts: what the attempts before this one recorded (when
    it resumes), plus this one's since its training loop started. Each attempt counts up to
    its last recorded log line: a crash loses at most one log interval of it."""

    def __init__(self, directory, resumed):
        """directory: the run's RunDirectory; resumed: this attempt continues a checkpoint."""
        self.directory, self.started = directory, time.time()
        self.before = (recorded_progress(directory, "wall_secs") or 0.0) if resumed else 0.0

    def seconds(self):
        """The run's wall time so far, in seconds."""
        return self.before + time.time() - self.started

    def record(self, step):
        """record_progress of `step` with the wall time now."""
        record_progress(self.directory, step, self.seconds())


@dataclasses.dataclass(frozen=True)
class SaveRecord:
    """What the loop knew of a checkpoint: the mean loss and the largest tower gradient norm of
    the step that made its weights, the smoothed loss then, whether that smoothed loss was above
    the divergence threshold (`climbing`), and whether the first step trained from it had a
    finite loss and update with the loss below that threshold (`verified`; False until then).

    A checkpoint is healthy when it was not written while climbing and, if the run diverged
    after it, its first step from it was verified: see HealthRecords.last_healthy.
    """
    step: int
    loss: float
    gradient_norm: float
    smoothed_loss: float
    climbing: bool
    verified: bool = False


class HealthRecords:
    """The records of one run directory (a run.directory.RunDirectory)."""

    def __init__(self, directory):
        self.directory = directory

    def read(self):
        """{checkpoint name: SaveRecord} of the checkpoints here that have one."""
        path = self.directory.file(HEALTH_FILE)
        if not tf.io.gfile.exists(path):
            return {}
        try:
            payload = json.loads(files.read_text(path))
            return {name: SaveRecord(**record) for name, record in payload.items()}
        except (ValueError, TypeError):
            return {}  # advisory only: a damaged record file must not stop a run

    def record_save(self, prefix, record, log=print):
        """Adds `record` for the checkpoint `prefix` (forgetting checkpoints no longer here).
        A record that cannot be written is one warning line: the checkpoint itself is fine."""
        records = self.read()
        records[os.path.basename(prefix)] = record
        self._write(records, prefix, log)

    def mark_verified(self, prefix, log=print):
        """Records that the first step trained from checkpoint `prefix` was sound; returns
        whether `prefix` is now healthy for good (not written while the loss was climbing, or
        without a record, which counts as verified)."""
        records = self.read()
        name = os.path.basename(prefix)
        if name in records and not records[name].verified:
            records[name] = dataclasses.replace(records[name], verified=True)
            self._write(records, prefix, log)
        return name not in records or not records[name].climbing

    def _write(self, records, prefix, log):
        present = {os.path.basename(path) for path in self.directory.candidates()}
        payload = {name: dataclasses.asdict(record) for name, record in records.items()
                   if name in present}
        try:
            files.write_text_atomically(self.directory.file(HEALTH_FILE),
                                        json.dumps(payload, indent=1, sort_keys=True) + "\n")
        except (OSError, tf.errors.OpError) as error:
            log(f"warning: could not record the health of {prefix} in {HEALTH_FILE} "
                f"({error_lines.file_error_cause(error)}).")

    def last_healthy(self, first_bad_step):
        """After a divergence whose first suspect weights are those of step `first_bad_step`:
        the newest checkpoint that was not written while the loss was climbing and that is
        older than `first_bad_step` or was verified by a sound step; None when there is none.
        Checkpoints without a record (older runs) count as verified."""
        records = self.read()
        for path in self.directory.candidates():
            record = records.get(os.path.basename(path))
            if record is None:
                return path
            if not record.climbing and (record.verified or step_of(path) < first_bad_step):
                return path
        return None


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
