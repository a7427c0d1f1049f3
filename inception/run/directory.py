"""A training run's directory, and how every tool finds what is in it.

```
<train_dir>/model_settings.json        the model section and data directory of the run, and
                                       how its updates are made (workers, batch, micro-batches)
<train_dir>/checkpoint                 TensorFlow's list of checkpoints (names relative to here)
<train_dir>/model.ckpt-<step>.*        checkpoints
<train_dir>/model.ckpt-<step>.unusable.*   set aside: damaged, not finite, or written as the
                                       run diverged (kept, never deleted; rename to retry)
<train_dir>/checkpoint_health.json     what each save recorded: its step's loss, gradient norm,
                                       and whether the loss was climbing
<train_dir>/progress.json              the step the chief last logged and the run's wall time then
                                       (a resumed run says how many steps it trains again, and
                                       goes on counting the time)
<train_dir>/start/model.ckpt-0.*       the weights a fresh run started from, with --on_nan=rollback
                                       and until its first checkpoint proves healthy (a rollback
                                       before then restores them; loop/rollback.py)
```

Training, evaluation, export and classify all read checkpoints through `RunDirectory`, so they
agree on the newest usable one. Every checkpoint is looked up inside the directory they were
given, whatever path TensorFlow's `checkpoint` file holds: a directory gets copied, synced to a
bucket and mounted elsewhere, and the absolute paths older runs wrote there may name another
run's files, or nothing. What a user is told when a write here fails is run/health.py's.
"""

import dataclasses
import json
import os

import tensorflow as tf

from common import files
from inception.config import recipe
from inception.config.settings import ModelSettings
from inception.config.update_shape import UpdateShape
from inception.run import checkpoint_io
from inception.run import health
from inception.run.checkpoint_io import CheckpointError
from inception.run.checkpoint_io import step_or_none
from inception.run.health import remove_new_files
from inception.run.health import save_error
from inception.run.health import write_text_or_explain

CHECKPOINT_BASENAME = "model.ckpt"
SETTINGS_FILE = "model_settings.json"
UNUSABLE_MARK = ".unusable"
START_DIR = "start"


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """What a run's settings file holds: the model section of its settings (what builds the
    network), the data directory it trained on, and the UpdateShape of its last run (None in
    files written before it was stored), and whether it trained on --synthetic_input (None in
    files written before that was stored)."""
    model: ModelSettings
    data_dir: str
    update: UpdateShape = None
    synthetic_input: bool = None


class RunDirectory:
    """The directory of one training run (see the module docstring); `path` may be a URL."""

    def __init__(self, path):
        self.path = path

    def file(self, name):
        """The path of `name` inside the directory."""
        return os.path.join(self.path, name)

    def exists(self):
        """Whether the directory exists."""
        return tf.io.gfile.isdir(self.path)

    def prefix(self, step=None):
        """The checkpoint prefix of `step` (`.../model.ckpt-<step>`), or the saver's base."""
        base = self.file(CHECKPOINT_BASENAME)
        return base if step is None else f"{base}-{step}"

    def start_prefix(self):
        """The checkpoint prefix of the weights the run started from (`start/model.ckpt-0`)."""
        return self.file(f"{START_DIR}/{CHECKPOINT_BASENAME}-0")

    # The stored settings.

    def read_settings(self):
        """The StoredRun of the directory, or None when it has no settings file."""
        path = self.file(SETTINGS_FILE)
        if not tf.io.gfile.exists(path):
            return None
        try:
            payload = json.loads(files.read_text(path))
            data_dir = payload.pop("data_dir", "")
            update = payload.pop("update", None)
            synthetic_input = payload.pop("synthetic_input", None)
            payload.setdefault("network", recipe.DEFAULT_NETWORK)  # runs from before --model
            return StoredRun(model=ModelSettings(**payload), data_dir=data_dir,
                             update=UpdateShape(**update) if update else None,
                             synthetic_input=synthetic_input)
        except (ValueError, TypeError) as error:
            raise CheckpointError(f"{path} is damaged ({error}); restore it from a backup or "
                                  "delete it to use the flags' settings.") from None

    def require_settings(self):
        """read_settings(), or CheckpointError saying what to pass when there is none."""
        if not self.exists():
            raise CheckpointError(f"{self.path} does not exist; pass the --train_dir of a "
                                  "training run.")
        stored = self.read_settings()
        if stored is None:
            raise CheckpointError(f"{self.path} has no {SETTINGS_FILE}; it is not a training "
                                  "directory of this trainer (or training has not started "
                                  "yet).")
        return stored

    def write_settings(self, settings):
        """Writes the settings file from the run's resolved TrainSettings (its model section,
        data directory, UpdateShape and whether its input is synthetic), atomically and only
        when it changes. CheckpointError naming the file when it cannot be written (the old
        one stays)."""
        payload = dict(dataclasses.asdict(settings.model), data_dir=settings.data.data_dir,
                       update=dataclasses.asdict(UpdateShape.of(settings)),
                       synthetic_input=settings.input_source.synthetic_input)
        text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
        path = self.file(SETTINGS_FILE)
        if tf.io.gfile.exists(path) and files.read_text(path) == text:
            return
        write_text_or_explain(path, text)

    # Finding checkpoints.

    def listed(self):
        """Checkpoint prefixes TensorFlow's `checkpoint` file lists that exist here, oldest
        first; each listed name is looked up in this directory, whatever path it carries."""
        try:
            state = tf.train.get_checkpoint_state(self.path) if self.exists() else None
        except (tf.errors.OpError, ValueError):
            return []
        if state is None:
            return []
        names = [path.replace("\\", "/").rsplit("/", 1)[-1]
                 for path in state.all_model_checkpoint_paths]
        prefixes = [self.file(name) for name in dict.fromkeys(names)]
        return [prefix for prefix in prefixes
                if step_or_none(prefix) is not None
                and tf.io.gfile.exists(prefix + ".index")]

    def candidates(self):
        """Checkpoint prefixes here, newest step first: those the `checkpoint` file lists and
        any other `model.ckpt-<step>.index` (the file may be damaged or lag behind)."""
        if not self.exists():
            return []
        found = {path[:-len(".index")] for path in tf.io.gfile.glob(
            self.file(f"{CHECKPOINT_BASENAME}-*.index"))}
        steps = {path: step_or_none(path) for path in set(self.listed()) | found}
        return sorted((path for path, step in steps.items() if step is not None),
                      key=lambda path: steps[path], reverse=True)

    def newest(self):
        """The newest checkpoint prefix here (not checked), or None."""
        candidates = self.candidates()
        return candidates[0] if candidates else None

    def newest_usable(self, log=print, set_aside=False):
        """The newest checkpoint that restores and holds finite values, or None when there is
        none at all. Each one skipped gets a line naming it and why. With `set_aside`
        (training, which owns the directory) the skipped ones newer than the one returned are
        renamed `<name>.unusable.*`, or the run's next save of that step would overwrite them;
        other tools only skip them. Raises CheckpointError when checkpoints exist but none can
        be used."""
        candidates = self.candidates()
        skipped = []
        for path in candidates:
            problem = checkpoint_io.checkpoint_problem(path)
            if problem is None:
                if set_aside and skipped:
                    self.set_aside([skipped_path for skipped_path, _ in skipped])
                return path
            if set_aside:
                log(f"note: not resuming from {path}: {problem}; it is kept as "
                    f"{os.path.basename(path)}{UNUSABLE_MARK}.*")
            else:
                log(f"note: not using {path}: {problem}.")
            skipped.append((path, problem))
        if not candidates:
            return None
        newest, problem = skipped[0]
        advice = ("move them away to start afresh, or pass another --train_dir" if set_aside
                  else "restore them from a backup, or train further")
        raise CheckpointError(
            f"none of the {len(candidates)} checkpoint(s) in {self.path} can be used (the "
            f"newest, {os.path.basename(newest)}, is {problem}); {advice}.")

    def require_checkpoint(self, log=print):
        """newest_usable(), or CheckpointError when the directory has no checkpoint yet."""
        newest = self.newest_usable(log)
        if newest is None:
            raise CheckpointError(f"no checkpoint in {self.path} yet; train first (or wait "
                                  "for the first save).")
        return newest

    def resolve(self, checkpoint_path, log=print):
        """`checkpoint_path` checked to exist, or the newest usable checkpoint when empty."""
        if not checkpoint_path:
            return self.require_checkpoint(log)
        if not tf.io.gfile.exists(checkpoint_path + ".index"):
            raise CheckpointError(f"--checkpoint_path={checkpoint_path} does not exist; pass a "
                                  f"prefix such as {self.prefix(1000)} (without .index).")
        return checkpoint_path

    # Setting checkpoints aside.

    def set_aside(self, prefixes):
        """Renames each checkpoint of `prefixes` to `<name>.unusable.*` (or `.unusable-2.*`
        when that name is taken), keeping every file, and rewrites TensorFlow's `checkpoint`
        file without them. Returns the new names' prefixes."""
        renamed = []
        for prefix in prefixes:
            mark = self._free_mark(prefix)
            for path in files_starting_with(prefix + "."):
                if UNUSABLE_MARK not in path[len(prefix):]:
                    tf.io.gfile.rename(path, f"{prefix}{mark}{path[len(prefix):]}",
                                       overwrite=False)
            renamed.append(prefix + mark)
        self.rewrite_state([path for path in self.listed() if path not in prefixes])
        return renamed

    def _free_mark(self, prefix):
        existing = set(files_starting_with(prefix + UNUSABLE_MARK))
        mark, number = UNUSABLE_MARK, 1
        while any(path.startswith(prefix + mark + ".") for path in existing):
            number += 1
            mark = f"{UNUSABLE_MARK}-{number}"
        return mark

    def rewrite_state(self, prefixes):
        """TensorFlow's `checkpoint` file listing `prefixes` (oldest first) by their names
        relative to the directory; removed when the list is empty."""
        state_path = self.file("checkpoint")
        if not prefixes:
            if tf.io.gfile.exists(state_path):
                tf.io.gfile.remove(state_path)
            return
        names = [os.path.basename(prefix) for prefix in prefixes]
        # TensorFlow writes the names as given only for an absolute directory (it rewrites them
        # relative to one given relative: "../model.ckpt-4"); a URL's names stay looked up by
        # their last part (listed).
        directory = self.path if files.is_url(self.path) else os.path.abspath(self.path)
        tf.compat.v1.train.update_checkpoint_state(directory, names[-1],
                                                   all_model_checkpoint_paths=names)

    def remove_interrupted_saves(self, log=print):
        """Removes the `*.tempstate*` files that a save killed halfway leaves (TensorFlow
        writes a checkpoint's files under such names and renames them when complete)."""
        if not self.exists():
            return
        leftovers = [self.file(name) for name in tf.io.gfile.listdir(self.path)
                     if ".tempstate" in name]
        for path in leftovers:
            tf.io.gfile.remove(path)
        if leftovers:
            log(f"note: removed {len(leftovers)} temporary file(s) of an interrupted save in "
                f"{self.path}.")

    def save(self, saver, session, step, needed_bytes):
        """saver.save of `session` as the checkpoint of `step`; returns its prefix.

        On a write failure (a full disk, a read-only directory) removes whatever this save
        wrote, so the `checkpoint` file still names the previous checkpoint, and raises
        health.CheckpointWriteError with the directory, the error and the space a
        checkpoint needs.
        """
        before = set(tf.io.gfile.listdir(self.path))
        try:
            return saver.save(session, self.prefix(), global_step=step, write_meta_graph=False)
        except (tf.errors.OpError, OSError) as error:
            remove_new_files(self.path, before)
            raise save_error(self, step, error, needed_bytes) from None

    @property
    def health(self):
        """What each save recorded here (health.HealthRecords)."""
        return health.HealthRecords(self)


def files_starting_with(prefix):
    """The paths in `prefix`'s directory whose names start with its last part; by name, not by
    glob, since a prefix may hold characters a glob pattern would read as ranges."""
    directory, start = os.path.split(prefix)
    return [os.path.join(directory, name) for name in tf.io.gfile.listdir(directory)
            if name.startswith(start)]
