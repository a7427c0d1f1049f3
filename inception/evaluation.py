"""One evaluation job from one EvalSettings: model settings from the checkpoint directory, the
subset's shards, then one checkpoint (`run_once`) or every new one as it appears."""

import dataclasses
import os

import tensorflow as tf

from inception import checkpoints
from inception import datasets
from inception import devices
from inception import evaluator
from inception import input_pipeline
from inception.settings import EvalSettings  # noqa: F401  (callers build jobs from it)
from inception.stop_request import StopRequest

tf1 = tf.compat.v1


def default_eval_dir(checkpoint_dir, subset):
    """`<checkpoint_dir>/eval_<subset>`: TensorBoard on the training directory shows both runs."""
    return os.path.join(checkpoint_dir, f"eval_{subset}")


def resolve_settings(job, log=print):
    """(ModelSettings, Dataset) from the checkpoint directory, with the overrides of the
    EvalSettings `job`."""
    stored = checkpoints.read_stored_run(job.checkpoint_dir)
    if stored is None:
        if not tf.io.gfile.isdir(job.checkpoint_dir):
            raise checkpoints.CheckpointError(
                f"--checkpoint_dir={job.checkpoint_dir} does not exist; pass the --train_dir "
                "of a training run.")
        raise checkpoints.CheckpointError(
            f"{job.checkpoint_dir} has no {checkpoints.SETTINGS_FILE}; it is not a training "
            "directory of this trainer (or training has not started yet).")
    settings = stored.model
    overrides = {name: getattr(job, name) for name in ("image_size", "depth_multiplier")
                 if getattr(job, name) is not None}
    if overrides:
        settings = dataclasses.replace(settings, **overrides)
        log(f"note: overriding the stored model settings with {overrides}")
    dataset = datasets.resolve_dataset(settings.dataset, job.data_dir or stored.data.data_dir,
                                       settings.num_classes - 1, log=log)
    return settings, dataset


def run_evaluation(job, log=print, logits_fn=None):
    """Evaluates as `job` says; returns the list of EvalResult (one per checkpoint)."""
    job.validate()
    # Memory growth before anything creates the GPU devices: evaluation shares the GPU with a
    # training run beside it.
    devices.configure_gpus(devices.plan_towers(None, devices.count_gpus()))
    settings, dataset = resolve_settings(job, log)
    shards = dataset.shards(job.subset)
    expected = dataset.num_examples(job.subset, log)
    if job.num_examples:
        expected = min(expected, job.num_examples)
    eval_graph = evaluator.build_eval_graph(shards, settings, job.batch_size,
                                            job.num_examples, job.strict_input,
                                            logits_fn=logits_fn)
    eval_dir = job.eval_dir or default_eval_dir(job.checkpoint_dir, job.subset)
    tf.io.gfile.makedirs(eval_dir)
    with eval_graph.graph.as_default():  # v1 FileWriter refuses to start in eager mode
        writer = tf1.summary.FileWriter(eval_dir)
    results = []
    config = tf1.ConfigProto(allow_soft_placement=True)
    config.gpu_options.allow_growth = True

    def evaluate(path):
        log(f"evaluating {path} on {expected} {job.subset} examples of {dataset.name}...")
        try:
            result = evaluator.evaluate_checkpoint(eval_graph, path, config, expected)
        except tf.errors.OpError as error:
            input_error = input_pipeline.explain(error)
            if input_error is None:
                raise
            raise input_error from None
        evaluator.write_summaries(writer, result)
        log(f"step {result.step}: {result.line()}, loss = {result.loss:.4f}"
            + (f", {result.corrupt_records} damaged images skipped"
               if result.corrupt_records else ""))
        results.append(result)

    try:
        if job.run_once:
            latest = checkpoints.latest_checkpoint(job.checkpoint_dir)
            if latest is None:
                raise checkpoints.CheckpointError(
                    f"no checkpoint in {job.checkpoint_dir} yet; wait for training to save "
                    "one, or drop --run_once to wait for it.")
            evaluate(latest)
        else:
            with StopRequest(log, "stopping after the current evaluation") as stop:
                evaluator.watch_checkpoints(job.checkpoint_dir, evaluate,
                                            job.eval_interval_secs, job.timeout_secs,
                                            stop, log)
    finally:
        writer.close()
    log(f"eval summaries: {eval_dir}")
    return results
