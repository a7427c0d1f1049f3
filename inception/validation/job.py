"""One evaluation job from one EvalSettings: model settings from the checkpoint directory, the
subset's shards, then one checkpoint (`run_once`) or every new one as it appears."""

import dataclasses
import os
import time

import tensorflow as tf

from common import cli
from common import error_lines
from inception.inputs import damaged
from inception.inputs import datasets
from inception.loop.stop_request import StopRequest
from inception.parallel import devices
from inception.run import checkpoint_io
from inception.run.checkpoint_io import step_of
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from inception.validation import reporting
from inception.validation import scoring

tf1 = tf.compat.v1


def default_eval_dir(checkpoint_dir, subset):
    """`<checkpoint_dir>/eval_<subset>`: TensorBoard on the training directory shows both runs."""
    return os.path.join(checkpoint_dir, f"eval_{subset}")


@dataclasses.dataclass(frozen=True)
class SubsetInputs:
    """What scoring a subset needs from its data set: the sorted shard paths, the example count
    and the label names (label i is label_names[i - 1]; () shows numbers)."""
    shards: list
    num_examples: int
    label_names: tuple


def subset_inputs(dataset, subset, log=print):
    """The SubsetInputs of `subset` of the inputs.datasets Dataset, for the evaluation job and
    validation during training alike; DataError when its shards are missing. The label names
    are the ones the Dataset read; labels.txt is looked for again only to note that it is absent."""
    return SubsetInputs(dataset.shards(subset), dataset.num_examples(subset, log),
                        dataset.label_names or datasets.read_label_names(dataset.shard_dir, log))


def resolve_settings(evaluation, log=print):
    """(ModelSettings, Dataset) from the checkpoint directory, with the overrides of the
    EvalSettings `evaluation`."""
    stored = RunDirectory(evaluation.checkpoint_dir).require_settings()
    settings = stored.model
    overrides = {name: getattr(evaluation, name) for name in ("image_size", "depth_multiplier")
                 if getattr(evaluation, name) is not None}
    if overrides:
        settings = dataclasses.replace(settings, **overrides)
        log(f"note: overriding the stored model settings with {overrides}")
    dataset = datasets.resolve_dataset(settings.dataset, evaluation.data_dir or stored.data_dir,
                                       settings.num_classes - 1, log=log)
    return settings, dataset


def wait_for_settings(evaluation, stop, log=print, sleep=time.sleep):
    """Watching a run that has only just started: waits until its settings file exists (its
    first moments, before it wrote one), `evaluation.timeout_secs` passed (then the error says
    so) or a stop was requested; returns whether the file is there."""
    directory = RunDirectory(evaluation.checkpoint_dir)
    path = directory.file(SETTINGS_FILE)
    started, interval, timeout = time.time(), evaluation.eval_interval_secs, evaluation.timeout_secs
    if tf.io.gfile.exists(path):
        return True
    missing = "" if directory.exists() else "; the directory does not exist yet: check the path"
    log(f"waiting for training to write {path} (every {interval:g} s{missing})...")
    while not stop.requested:
        if tf.io.gfile.exists(path):
            return True
        if timeout and time.time() - started >= timeout:
            raise checkpoint_io.CheckpointError(
                f"{evaluation.checkpoint_dir} has no {SETTINGS_FILE} after {timeout:g} s; is "
                "training running with --train_dir there?")
        wait(interval, stop, sleep)
    return False


class EvalDirError(cli.UserError):
    """The summaries cannot be written where they would go; the message says what to pass."""


def open_summary_writer(eval_dir):
    """A FileWriter on `eval_dir` (created), opened before any evaluation work; EvalDirError
    (one line, suggesting --eval_dir) when the directory cannot be written, e.g. a run on a
    read-only share whose default eval_dir lies inside it."""
    try:
        tf.io.gfile.makedirs(eval_dir)
        with tf.Graph().as_default():  # v1 FileWriter refuses to start in eager mode
            writer = tf1.summary.FileWriter(eval_dir)
        writer.flush()
        return writer
    except (tf.errors.OpError, OSError) as error:
        raise EvalDirError(error_lines.cannot_write(
            f"evaluation summaries to {eval_dir}", error,
            "--eval_dir=<a directory you can write>")) from None


def run_evaluation(evaluation, log=print):
    """Evaluates as the EvalSettings `evaluation` say; returns the list of EvalResult (one per
    checkpoint)."""
    evaluation.validate()
    config = devices.evaluation_session_config()  # before anything creates the GPU devices
    if evaluation.run_once:
        return _evaluate(evaluation, config, None, log)
    with StopRequest(log, "stopping after the current evaluation") as stop:
        if not wait_for_settings(evaluation, stop, log):
            return []
        return _evaluate(evaluation, config, stop, log)


def _evaluate(evaluation, config, stop, log):
    settings, dataset = resolve_settings(evaluation, log)
    eval_dir = evaluation.eval_dir or default_eval_dir(evaluation.checkpoint_dir,
                                                       evaluation.subset)
    inputs = subset_inputs(dataset, evaluation.subset, log)
    expected = inputs.num_examples
    if evaluation.num_examples:
        expected = min(expected, evaluation.num_examples)
    latest = (RunDirectory(evaluation.checkpoint_dir).require_checkpoint(log)
              if evaluation.run_once else None)
    writer = open_summary_writer(eval_dir)
    try:
        eval_graph = scoring.build_eval_graph(inputs.shards, settings, evaluation.batch_size,
                                              evaluation.num_examples, evaluation.strict_input)
        evaluate = _evaluator(eval_graph, config, expected,
                              (writer, eval_dir, inputs.label_names),
                              f"{evaluation.subset} examples of {dataset.name}", log)
        if evaluation.run_once:
            results = [evaluate(latest)]
        else:
            results = []
            watch_checkpoints(evaluation.checkpoint_dir,
                              lambda path: results.append(evaluate(path)),
                              evaluation.eval_interval_secs, evaluation.timeout_secs, stop, log)
    finally:
        writer.close()
    log(f"eval summaries: {eval_dir}")
    return results


def _evaluator(eval_graph, config, expected, outputs, examples, log):
    """callable(checkpoint path) -> EvalResult: scores it, writes its summaries and per-class
    results (outputs: the writer, eval_dir and label names), logs it."""
    def evaluate(path):
        log(f"evaluating {path} on {expected} {examples}...")
        try:
            result = scoring.evaluate_checkpoint(eval_graph, path, config, expected)
        except tf.errors.OpError as error:
            input_error = damaged.explain(error)
            if input_error is None:
                raise
            raise input_error from None
        reporting.publish(result, *outputs, log)
        return result
    return evaluate


def watch_checkpoints(checkpoint_dir, evaluate, interval_secs, timeout_secs=0, stop=None,
                      log=print, sleep=time.sleep):
    """Calls `evaluate(path)` once for every new checkpoint in `checkpoint_dir`, oldest first;
    one that raises CheckpointError (e.g. damaged) is named in one line and skipped.

    Only checkpoints listed in the directory's `checkpoint` state file (which TensorFlow
    rewrites after the files are complete) are read. Returns the number evaluated when
    `stop.requested` turns true, or when no new checkpoint appeared for `timeout_secs` (> 0).
    """
    directory = RunDirectory(checkpoint_dir)
    last_step = -1
    evaluated = 0
    idle_since = time.time()
    waiting_logged = False
    while stop is None or not stop.requested:
        pending = [path for path in directory.listed() if step_of(path) > last_step]
        for path in sorted(pending, key=step_of):
            if stop is not None and stop.requested:
                break
            last_step = step_of(path)
            idle_since = time.time()
            if not tf.io.gfile.exists(path + ".index"):
                log(f"{path} was deleted before it could be evaluated (training keeps only the "
                    "newest few); skipping it.")
                continue
            try:
                evaluate(path)
            except checkpoint_io.CheckpointError as error:
                log(f"skipping {path}: {error}")
                continue
            evaluated += 1
        if pending:
            waiting_logged = False
            continue
        if timeout_secs and time.time() - idle_since >= timeout_secs:
            log(f"no new checkpoint in {checkpoint_dir} for {timeout_secs:g} s; stopping.")
            break
        if not waiting_logged:
            log(f"waiting for a new checkpoint in {checkpoint_dir} (every {interval_secs:g} s)...")
            waiting_logged = True
        wait(interval_secs, stop, sleep)
    return evaluated


def wait(seconds, stop, sleep, slice_secs=0.5):
    """Sleeps `seconds` in short slices, returning early once `stop.requested` (a signal arrived:
    Python resumes an interrupted sleep, so one long sleep would delay the stop)."""
    deadline = time.time() + seconds
    while stop is None or not stop.requested:
        remaining = deadline - time.time()
        if remaining <= 0:
            return
        sleep(min(slice_secs, remaining))
