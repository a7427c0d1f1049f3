"""The best checkpoint of a run, kept apart from the others: `<train_dir>/best/`.

```
<train_dir>/best/model_settings.json   a copy of the run's: best/ is a training directory
<train_dir>/best/checkpoint            TensorFlow's list, naming the one checkpoint below
<train_dir>/best/model.ckpt-<step>.*   the best checkpoint so far (copied, never deleted by
                                       --keep_checkpoints)
<train_dir>/best/best.json             its step, metric, value and time, and how many
                                       evaluations since found nothing better
```

Every tool that takes a training directory takes `best/` too (eval, export, classify). A new
best replaces the old one in an order that leaves a usable directory at every moment: the new
checkpoint's files are copied in under temporary names and renamed, then the `checkpoint` list
names it (one atomic rewrite), then best.json, and only then are the old files removed.
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
        """The BestRecord, or None when nothing was kept yet. A damaged best.json is
        CheckpointError saying what to do."""
        path = self.directory.file(RECORD_FILE)
        if not tf.io.gfile.exists(path):
            return None
        try:
            return BestRecord(**json.loads(files.read_text(path)))
        except (ValueError, TypeError) as error:
            raise CheckpointError(f"{path} is damaged ({error}); delete {self.directory.path} "
                                  "to choose the best checkpoint afresh.") from None

    def keep(self, checkpoint_path, metric, value):
        """Copies `checkpoint_path` (a prefix in train_dir) into best/ as the new best and
        records it; returns (the new BestRecord, the prefix of the copy)."""
        record = BestRecord(metric=metric, value=float(value), step=step_of(checkpoint_path),
                            when=datetime.datetime.now().isoformat(timespec="seconds"))
        old = self.directory.listed()
        try:
            tf.io.gfile.makedirs(self.directory.path)
            _copy(os.path.join(self.train_dir, SETTINGS_FILE), self.directory.file(SETTINGS_FILE))
            copy = self.directory.prefix(record.step)
            for source in _checkpoint_files(checkpoint_path):
                _copy(source, copy + source[len(checkpoint_path):])
            self.directory.rewrite_state([copy])
            self.write(record)
            for prefix in old:
                if prefix != copy:
                    for path in _checkpoint_files(prefix):
                        tf.io.gfile.remove(path)
        except (OSError, tf.errors.OpError) as error:
            raise CheckpointError(
                f"could not keep {checkpoint_path} as the best checkpoint in "
                f"{self.directory.path} ({error_lines.file_error_cause(error)}); the previous "
                "best is still there. Free some space or fix the directory, then rerun.") from None
        return record, copy

    def write(self, record):
        """Writes best.json atomically."""
        files.write_text_atomically(self.directory.file(RECORD_FILE),
                                    json.dumps(dataclasses.asdict(record), indent=2) + "\n")


def _checkpoint_files(prefix):
    return [path for path in files_starting_with(prefix + ".")
            if UNUSABLE_MARK not in path[len(prefix):] and ".tmp-" not in path]


def _copy(source, target):
    # Under a temporary name first, so a reader never finds half a file under the real name.
    partial = f"{target}.tmp-{os.getpid()}"
    tf.io.gfile.copy(source, partial, overwrite=True)
    tf.io.gfile.rename(partial, target, overwrite=True)
