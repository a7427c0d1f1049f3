"""Validation inside training: the eval job's scoring of the validation shards, run in the
training process on each checkpoint it is due for, and what follows from each result: the
summaries in `<train_dir>/eval_validation` (as the eval job writes them), the best checkpoint
kept in `<train_dir>/best` (and exported), and early stopping: after validations without a
better one, or at the first that reaches --target_accuracy (time to accuracy, MLPerf's measure
and tf_cnn_benchmarks' --stop_at_top_1_accuracy).

The evaluation graph is its own graph with its own session, built once beside the training
graph: training's graph, random streams and input order are untouched, so the loss curve at a
given seed is the same with and without validation.
"""

import dataclasses
import os
import time

import tensorflow as tf

from common import cli
from common import error_lines
from inception.inputs import datasets
from inception.loop import cadence
from inception.run import tags
from inception.run import best as best_lib
from inception.run.checkpoint_io import CheckpointError
from inception.serving import saved_model
from inception.validation import job
from inception.validation import reporting
from inception.validation import scoring

tf1 = tf.compat.v1

SUBSET = "validation"
PROGRESS_FROM_EXAMPLES = 2000  # a shorter validation takes seconds: no progress bar


class TrainingValidation:
    """Scores checkpoints of a running training on the validation shards (see the module
    docstring); built by `build`."""

    def __init__(self, validation, eval_graph, session_config, train_dir, expected, label_names,
                 log):
        """validation: settings.ValidationSettings; expected: the validation examples;
        label_names[i - 1] names label i."""
        self.validation, self.eval_graph = validation, eval_graph
        self.session_config = session_config
        self.cadence = cadence.AlignedCadence(validation.eval_every_n_steps)
        self.train_dir, self.expected, self.label_names, self.log = (train_dir, expected,
                                                                     label_names, log)
        self.eval_dir = job.default_eval_dir(self.train_dir, SUBSET)
        self.writer = job.open_summary_writer(self.eval_dir)
        self.best = best_lib.BestCheckpoint(self.train_dir)
        self.record = self._read_record()
        self.last_step = self.last_result = None
        self.reached = False  # a validation reached validation.target_accuracy

    def due(self, step):
        """Whether `step` is one the settings validate at (the end is asked for separately)."""
        return self.cadence.due(step)

    def validate(self, checkpoint_path, wall_secs=None):
        """Scores `checkpoint_path`, publishes the result and keeps a new best; returns whether
        early stopping says training should end here. wall_secs: the run's wall time so far
        (run.health.RunClock), what reaching the target accuracy took."""
        started = time.time()
        result = scoring.evaluate_checkpoint(
            self.eval_graph, checkpoint_path, self.session_config, self.expected,
            show_progress=self.expected >= PROGRESS_FROM_EXAMPLES)
        elapsed = time.time() - started
        self.last_step, self.last_result = result.step, result
        reporting.publish(result, self.writer, self.eval_dir, self.label_names, self.log,
                          heading=f"validation at step {result.step} ({elapsed:.1f} s)")
        self._keep_if_best(checkpoint_path, result)
        return self._reached_target(result, wall_secs) or self._should_stop()

    def close(self):
        """Closes the summary writer; says where the results are (and that a target accuracy
        was not reached, if so)."""
        target = self.validation.target_accuracy
        if target and not self.reached and self.last_result is not None:
            self.log(f"did not reach precision@1 {target:g}: the last validation (step "
                     f"{self.last_step}) had {self.last_result.precision_at_1:.4f}.")
        self.writer.close()
        if self.record is None:  # e.g. interrupted before its first validation
            self.log(f"validation: {self.eval_dir}; no best checkpoint yet (the first "
                     f"validation keeps one in {self.best.directory.path})")
            return
        self.log(f"validation: {self.eval_dir}; best checkpoint: {self.best.directory.path} "
                 f"(step {self.record.step}, {self.record.metric} = {self.record.value:.4f})")

    def _read_record(self):
        record = self.best.read()
        if record is not None and record.metric != self.validation.best_metric:
            self.log(f"note: {self.best.directory.path} holds the best checkpoint by "
                     f"{record.metric}; choosing by {self.validation.best_metric} now, the next "
                     "validation replaces it.")
            return None
        return record

    def _keep_if_best(self, checkpoint_path, result):
        metric = self.validation.best_metric
        value = getattr(result, metric)
        if self.record is not None and not self.record.beaten_by(value):
            self.record = dataclasses.replace(
                self.record, evals_without_improvement=self.record.evals_without_improvement + 1)
            try:
                self.best.write(self.record)
            except (OSError, tf.errors.OpError) as error:
                self.log(f"warning: could not update {best_lib.RECORD_FILE} in "
                         f"{self.best.directory.path} ({error_lines.file_error_cause(error)}); "
                         "training goes on.")
            return
        try:
            self.record, copy = self.best.keep(checkpoint_path, metric, value)
        except best_lib.BestNotKept as error:
            self.log(f"warning: {error} Training goes on.")
            self.record = self._record_on_disk()
            return
        self.log(f"  new best {metric} = {value:.4f}: kept as {copy}")
        if self.validation.export_best_dir:
            self._export(copy)

    def _record_on_disk(self):
        """After a failed replacement: what best/ holds now (the old best or the new one), or
        the record known before when best/ cannot be read either."""
        try:
            return self.best.read() or self.record
        except (OSError, tf.errors.OpError, CheckpointError):
            return self.record

    def _export(self, copy):
        try:
            version = saved_model.export_saved_model(
                copy, self.best.directory.read_settings(), self.label_names,
                self.validation.export_best_dir)
        except saved_model.ExportError as error:
            self.log(f"warning: the new best checkpoint was not exported: {error}")
            return
        self.log(f"  exported as {version}")

    def _reached_target(self, result, wall_secs):
        """Whether `result` reaches the target accuracy: then logged with the time it took and
        written as tags.TIME_TO_ACCURACY (seconds) at its step."""
        target = self.validation.target_accuracy
        if not target or result.precision_at_1 < target:
            return False
        self.reached = True
        took = "" if wall_secs is None else f" after {cli.duration(wall_secs)}"
        self.log(f"reached precision@1 {target:g} at step {result.step}{took} (wall time since "
                 "the start, resumes included); training stops here.")
        if wall_secs is not None:
            self.writer.add_summary(tf1.Summary(value=[tf1.Summary.Value(
                tag=tags.TIME_TO_ACCURACY, simple_value=wall_secs)]), result.step)
            self.writer.flush()
        return True

    def _should_stop(self):
        patience = self.validation.stop_after_evals_without_improvement
        if not patience or self.record.evals_without_improvement < patience:
            return False
        self.log(f"early stopping: {patience} validation(s) without a better "
                 f"{self.record.metric} than {self.record.value:.4f} (step {self.record.step}, "
                 f"kept in {self.best.directory.path}).")
        return True


def build(settings, dataset, session_config, log=print):
    """The TrainingValidation of a run (settings.TrainSettings, resolved; inputs.datasets
    Dataset), or None when it validates never or is not the chief. Checks the validation
    shards and --export_best_dir before training starts."""
    validation = settings.validation
    if not validation.eval_every_n_steps or not settings.is_chief:
        return None
    try:
        inputs = job.subset_inputs(dataset, SUBSET, log)
    except datasets.DataError as error:
        raise datasets.DataError(f"validation during training (--eval_every_n_steps="
                                 f"{validation.eval_every_n_steps}): {error} Or pass "
                                 "--eval_every_n_steps=0 to train without it.") from None
    if validation.export_best_dir:
        saved_model.check_export_dir(validation.export_best_dir)
    eval_graph = scoring.build_eval_graph(inputs.shards, settings.model,
                                          validation.eval_batch_size,
                                          strict=settings.data.strict_input)
    log(f"validating on {inputs.num_examples} {SUBSET} examples every "
        f"{validation.eval_every_n_steps} steps and at the end (best by "
        f"{validation.best_metric}: {os.path.join(settings.train_dir, best_lib.BEST_DIR)})")
    return TrainingValidation(validation, eval_graph, session_config, settings.train_dir,
                              inputs.num_examples, inputs.label_names, log)
