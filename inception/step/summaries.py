"""The training step's TensorBoard summaries: the losses of every tower and their mean, the
rate, batch-norm decay, loss scale, corrupt records, training precision, gradient norm, a few
input images and, on request, histograms. Built once per stage of the plan; the loop runs them
only when a summary is due."""

import dataclasses

import tensorflow as tf

from inception.parallel.devices import HOST_DEVICE
from inception.run import tags

tf1 = tf.compat.v1

SUMMARY_DEVICE = HOST_DEVICE  # TensorFlow's summary ops have CPU kernels only


def scalar_summary(tag, value):
    """A scalar summary with exactly `tag` (tf.summary.scalar would uniquify it to e.g.
    `mean_loss_1` because an op of that name exists)."""
    return tf.raw_ops.ScalarSummary(tags=tag, values=tf.cast(value, tf.float32))


def _training_precision(towers):
    """[the precision@1 summary of the training batches] when the towers' model returned its
    logits and labels (towers.ModelOutputs), else []; with class weights each example counts
    by its weight, as in the loss. Built with the summaries, after every random op, so the
    training's random streams do not depend on it."""
    shown = [tower.outputs for tower in towers
             if tower.outputs is not None and tower.outputs.logits is not None]
    if not shown:
        return []
    correct = []
    for outputs in shown:
        hits = tf.cast(tf.math.in_top_k(outputs.labels, outputs.logits, 1), tf.float32)
        weights = outputs.example_weights
        correct.append(tf.reduce_mean(hits) if weights is None else
                       tf.reduce_sum(hits * weights) / tf.reduce_sum(weights))
    return [scalar_summary(tags.PRECISION_AT_1, tf.add_n(correct) / len(correct))]


@dataclasses.dataclass(frozen=True)
class StageValues:
    """What one stage's step shows: its index in the plan, the loss terms it trains (empty:
    all), each tower's total loss and their mean, its rate, the gradients it applies (with
    their variables) and the count of updates gradient clipping clipped (None: no clipping)."""
    index: int
    loss_terms: tuple
    tower_totals: list
    mean_loss: tf.Tensor
    learning_rate: tf.Tensor
    grads_and_vars: list
    clipped_updates: tf.Tensor = None


@dataclasses.dataclass(frozen=True)
class StepValues:
    """What every stage's step shows: the towers, the regularization loss, the batch-norm
    decay, the loss scale (loss_scaling.LossScale or None), the input batch
    (pipeline.InputBatch) and whether to write every gradient's and variable's histogram."""
    towers: list
    regularization: tf.Tensor
    bn_decay: tf.Tensor
    loss_scale: object
    input_batch: object
    histograms: bool


def step_summaries(step, stage):
    """TensorBoard summaries of one step of a stage, merged into one op (run only when due).

    step: StepValues, what every stage's step shares; stage: its StageValues.
    """
    towers, input_batch = step.towers, step.input_batch
    with tf.device(SUMMARY_DEVICE), tf.name_scope("summaries"):
        summaries = [scalar_summary(tags.MEAN_LOSS, stage.mean_loss),
                     scalar_summary(tags.REGULARIZATION_LOSS, step.regularization),
                     scalar_summary(tags.LEARNING_RATE, stage.learning_rate),
                     scalar_summary(tags.CURRENT_BATCH_NORM_DECAY, step.bn_decay),
                     scalar_summary(tags.STAGE, stage.index),
                     *([scalar_summary(tags.LOSS_SCALE, step.loss_scale.scale)]
                       if step.loss_scale else []),
                     scalar_summary(tags.CORRUPT_RECORDS, input_batch.corrupt_records)]
        for tower, total in zip(towers, stage.tower_totals):
            summaries.append(scalar_summary(tags.tower_loss(tower.index), total))
            terms = stage.loss_terms or sorted(tower.loss_terms)
            for name in terms:
                summaries.append(scalar_summary(tags.tower_loss(tower.index, name),
                                                tower.loss_terms[name]))
        summaries.extend(_training_precision(towers))
        grads = [grad for grad, _ in stage.grads_and_vars]
        summaries.append(scalar_summary(tags.GRADIENT_NORM, tf.linalg.global_norm(grads)))
        if stage.clipped_updates is not None:
            summaries.append(scalar_summary(tags.CLIPPED_UPDATES, stage.clipped_updates))
        first = towers[0].outputs
        trained = first.images if first is not None and first.images is not None else \
            input_batch.images
        if trained.shape.rank == 4 and trained.shape[-1] in (1, 3):
            shown = tf.image.convert_image_dtype((trained[:3] + 1.0) / 2.0, tf.uint8,
                                                 saturate=True)
            summaries.append(tf.raw_ops.ImageSummary(tag=tags.INPUT_IMAGES, tensor=shown,
                                                     max_images=3))
        if step.histograms:
            for grad, variable in stage.grads_and_vars:
                name = variable.op.name
                summaries.append(tf.raw_ops.HistogramSummary(tag=f"gradients/{name}",
                                                             values=grad))
                summaries.append(tf.raw_ops.HistogramSummary(tag=f"variables/{name}",
                                                             values=variable))
        return tf1.summary.merge(summaries)
