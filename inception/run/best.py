"""The best checkpoint of a run, kept apart from the others: `<train_dir>/best/`.

```
<train_dir>/best/model_settings.json   a copy of the run's: best/ is a training directory
<train_dir>/best/checkpoint            TensorFlow's list, naming the one checkpoint below
<train_dir>/best/model.ckpt-<step>.*   the best checkpoint so far (copied, never deleted by
                                       --keep_checkpoints)
<train_dir>/best/best.json             its step, metric, value and time, and how many
                                       evaluations since found nothing better
```

Every tool that takes a training directory takes `best/` too (eval, export, classify).

best.json is the commit point of a replacement. The new checkpoint's files are copied in first
(each under a temporary name, then renamed; its `.index`, which makes it readable, last), then
best.json is rewritten (one atomic rename) to describe it, then the `checkpoint` list names it,
and only then are the old files removed. A failure before best.json leaves the old best, and
the new files are removed; a crash anywhere leaves either the old best or the new one
complete, and `recover` (run by every read and every replacement) finishes or undoes what the
crash left: the `checkpoint` list is made to name what best.json describes, and the files of
any other checkpoint and temporary files are removed. So best.json, as read here, always
agrees with the checkpoint the list names, and the value a new score must beat is that of the
checkpoint kept.
"""

import dataclasses
import datetime
import json
import math
import os

import tensorflow as tf

from common import error_lines
from common import files
from inception.run.checkpoint_io import CheckpointError
from inception.run.checkpoint_io import step_of
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from inception.run.directory import UNUSABLE_MARK
from inception.run.directory import files_starting_with

BEST_DIR = "best"
RECORD_FILE = "best.json"
LOWER_IS_BETTER = ("loss",)  # every other metric: higher is better


@dataclasses.dataclass(frozen=True)
class BestRecord:
    """What best.json holds: the best evaluation so far, by `metric`, and how many evaluations
    since found nothing better (early stopping counts them)."""
    metric: str
    value: float
    step: int
    when: str
    evals_without_improvement: int = 0

    def beaten_by(self, value):
        """Whether `value` of the same metric is strictly better than the record."""
        if math.isnan(value):
            return False
        return value < self.value if self.metric in LOWER_IS_BETTER else value > self.value


def best_dir(train_dir):
    """Where the best checkpoint of the run in `train_dir` is kept."""
    return os.path.join(train_dir, BEST_DIR)


class BestCheckpoint:
    """The best/ directory of one run (see the module docstring)."""

    def __init__(self, train_dir):
        self.train_dir = train_dir
        self.directory = RunDirectory(best_dir(train_dir))

    def read(self):
        """The BestRecord, or None when nothing was kept yet; repairs what a crash in the middle
        of a replacement left first (`recover`). A damaged best.json is CheckpointError saying
        what to do."""
        self.recover()
        return self._read_record()

    def _read_record(self):
        path = self.directory.file(RECORD_FILE)
        if not tf.io.gfile.exists(path):
            return None
        try:
            return BestRecord(**json.loads(files.read_text(path)))
        except (ValueError, TypeError) as error:
            raise CheckpointError(f"{path} is damaged ({error}); delete {self.directory.path} "
                                  "to choose the best checkpoint afresh.") from None

    def recover(self):
        """Makes best/ consistent after a crash in the middle of a replacement: when best.json
        describes a checkpoint whose files are all here, the `checkpoint` list names it alone,
        and the files of every other checkpoint, and temporary files, are removed."""
        if not self.directory.exists():
            return
        record = self._read_record()
        if record is None:
            return
        kept = self.directory.prefix(record.step)
        if not tf.io.gfile.exists(kept + ".index"):
            return  # best.json was edited by hand: leave the directory as it is
        if self.directory.listed() != [kept]:
            self.directory.rewrite_state([kept])
        for path in files_starting_with(self.directory.prefix()):
            if not path.startswith(kept + "."):
                tf.io.gfile.remove(path)
        for name in tf.io.gfile.listdir(self.directory.path):
            if ".tmp-" in name:
                tf.io.gfile.remove(self.directory.file(name))

    def keep(self, checkpoint_path, metric, value):
        """Copies `checkpoint_path` (a prefix in train_dir) into best/ as the new best and
        records it; returns (the new BestRecord, the prefix of the copy).

        Raises BestNotKept (a CheckpointError) when it fails: before best.json was rewritten
        the previous best is left as it was; after, the new one is kept and what is left to do
        is done by the next `recover`.
        """
        record = BestRecord(metric=metric, value=float(value), step=step_of(checkpoint_path),
                            when=datetime.datetime.now().isoformat(timespec="seconds"))
        copy = self.directory.prefix(record.step)
        committed = False
        try:
            self.recover()
            tf.io.gfile.makedirs(self.directory.path)
            _copy(os.path.join(self.train_dir, SETTINGS_FILE), self.directory.file(SETTINGS_FILE))
            for source in _checkpoint_files(checkpoint_path):
                _copy(source, copy + source[len(checkpoint_path):])
            self.write(record)
            committed = True
            self.recover()
        except (OSError, tf.errors.OpError) as error:
            cause = error_lines.file_error_cause(error)
            if committed:
                raise BestNotKept(f"kept {checkpoint_path} as the best checkpoint in "
                                  f"{self.directory.path} but could not finish ({cause}); the "
                                  "next read of best/ finishes it.") from None
            self._remove_uncommitted(copy)
            raise BestNotKept(f"could not keep {checkpoint_path} as the best checkpoint in "
                              f"{self.directory.path} ({cause}); the previous best is still "
                              "there. Free some space or fix the directory.") from None
        return record, copy

    def _remove_uncommitted(self, copy):
        """Best effort: the files of a copy that best.json does not describe."""
        try:
            record = self._read_record()
            if record is not None and self.directory.prefix(record.step) == copy:
                return  # the same step is the best already: its files are the kept ones
            for path in files_starting_with(copy + "."):
                tf.io.gfile.remove(path)
        except (OSError, tf.errors.OpError, CheckpointError):
            pass

    def write(self, record):
        """Writes best.json atomically."""
        files.write_text_atomically(self.directory.file(RECORD_FILE),
                                    json.dumps(dataclasses.asdict(record), indent=2) + "\n")


class BestNotKept(CheckpointError):
    """A new best could not be kept (see BestCheckpoint.keep); training goes on."""


def _checkpoint_files(prefix):
    """The files of checkpoint `prefix`, its `.index` last: with the index a reader takes the
    checkpoint as whole, so it comes in after the data."""
    paths = [path for path in files_starting_with(prefix + ".")
             if UNUSABLE_MARK not in path[len(prefix):] and ".tmp-" not in path]
    return sorted(paths, key=lambda path: path.endswith(".index"))


def _copy(source, target):
    # Under a temporary name first, so a reader never finds half a file under the real name.
    partial = f"{target}.tmp-{os.getpid()}"
    tf.io.gfile.copy(source, partial, overwrite=True)
    tf.io.gfile.rename(partial, target, overwrite=True)
