"""The training graph of one step: input -> towers -> averaged gradients -> update.

A pure graph builder: `build_train_graph` returns the ops and tensors the loop runs; it owns no
session, writes no files and reads no flags.
"""

import dataclasses

import tensorflow as tf

from inception import towers as towers_lib

tf1 = tf.compat.v1

RMSPROP_DECAY = 0.9
RMSPROP_MOMENTUM = 0.9
RMSPROP_EPSILON = 1.0
MOVING_AVERAGE_DECAY = 0.9999
BATCH_NORM_DECAY = 0.9997
VARIABLE_DEVICE = "/cpu:0"


@dataclasses.dataclass(frozen=True)
class OptimizationSettings:
    """How variables are updated (the original's schedule and optimizer).

    The learning rate is initial_learning_rate * decay_factor ** floor(step / decay_steps),
    with decay_steps = examples_per_epoch / batch_size * num_epochs_per_decay.
    """
    batch_size: int
    examples_per_epoch: int
    initial_learning_rate: float = 0.1
    num_epochs_per_decay: float = 30.0
    learning_rate_decay_factor: float = 0.16
    batch_norm_decay: float = BATCH_NORM_DECAY
    moving_average_decay: float = MOVING_AVERAGE_DECAY

    @property
    def decay_steps(self):
        """Steps between learning-rate decays (at least 1)."""
        return max(1, int(self.examples_per_epoch / self.batch_size * self.num_epochs_per_decay))


@dataclasses.dataclass(frozen=True)
class TrainGraph:
    """What the training loop runs.

    train_op: one synchronous step (gradients, update, EMA, batch-norm statistics).
    tower_losses: float32 [num_towers], each tower's total loss; mean_loss: their mean.
    skipped_variables: trainable variables that no tower's loss reaches (not updated).
    """
    global_step: tf.Variable
    train_op: tf.Operation
    mean_loss: tf.Tensor
    tower_losses: tf.Tensor
    learning_rate: tf.Tensor
    corrupt_records: tf.Tensor
    input_initializer: tf.Operation
    summary_op: tf.Tensor
    skipped_variables: list
    moving_average: tf1.train.ExponentialMovingAverage


def warmed_up_decay(max_decay, global_step):
    """min(max_decay, (1 + step) / (10 + step)): moving averages that are useful in short runs.

    With a fixed 0.9997 the batch-norm statistics stay near their initial values for hundreds of
    steps; this warm-up (the rule ExponentialMovingAverage applies with num_updates) lets them
    follow the data early and reach the full decay later.
    """
    step = tf.cast(global_step, tf.float32)
    return tf.minimum(max_decay, (1.0 + step) / (10.0 + step), name="batch_norm_decay")


def learning_rate_schedule(settings, global_step):
    """The original's staircase exponential decay: a scalar float32 tensor."""
    return tf1.train.exponential_decay(
        settings.initial_learning_rate, global_step, settings.decay_steps,
        settings.learning_rate_decay_factor, staircase=True, name="learning_rate")


def build_train_graph(input_batch, make_model_fn, optimization, tower_devices,
                      histograms=False):
    """Builds the whole training step in the default graph.

    Args:
      input_batch: input_pipeline.InputBatch of the global batch.
      make_model_fn: callable(batch_norm_decay) -> model_fn(images, labels) -> {term: loss};
        e.g. functools.partial(model.make_model_fn, model_settings).
      optimization: OptimizationSettings.
      tower_devices: one device name per tower, e.g. ['/cpu:0', '/cpu:1'].
      histograms: add gradient and variable histograms to the summaries (costly).

    Returns:
      TrainGraph.
    """
    global_step = tf1.train.get_or_create_global_step()
    with tf.device(VARIABLE_DEVICE):
        learning_rate = learning_rate_schedule(optimization, global_step)
        bn_decay = warmed_up_decay(optimization.batch_norm_decay, global_step)
        optimizer = tf1.train.RMSPropOptimizer(learning_rate, decay=RMSPROP_DECAY,
                                               momentum=RMSPROP_MOMENTUM,
                                               epsilon=RMSPROP_EPSILON)
    tower_inputs = towers_lib.split_batch((input_batch.images, input_batch.labels),
                                          len(tower_devices))
    towers = towers_lib.build_towers(make_model_fn(bn_decay),
                                     tower_inputs, tower_devices, VARIABLE_DEVICE)
    regularization = towers_lib.regularization_loss(VARIABLE_DEVICE)
    tower_totals = towers_lib.tower_total_losses(towers, regularization)
    with tf.device(VARIABLE_DEVICE):
        tower_losses = tf.stack(tower_totals, name="tower_losses")
        mean_loss = towers_lib.mean_over_towers(tower_totals)
    gradients = towers_lib.build_gradients(towers, tf1.trainable_variables(), regularization,
                                           device=VARIABLE_DEVICE)
    with tf.device(VARIABLE_DEVICE):
        apply_op = optimizer.apply_gradients(gradients.grads_and_vars, global_step=global_step)
        moving_average = tf1.train.ExponentialMovingAverage(
            optimization.moving_average_decay, num_updates=global_step)
        with tf.control_dependencies([apply_op]):
            average_op = moving_average.apply(tf1.trainable_variables())
        train_op = tf.group(apply_op, average_op, *towers_lib.batch_norm_updates(towers),
                            name="train_op")
    summary_op = _summaries(towers, tower_totals, mean_loss, regularization, learning_rate,
                            bn_decay, input_batch, gradients.grads_and_vars, histograms)
    return TrainGraph(global_step=global_step, train_op=train_op, mean_loss=mean_loss,
                      tower_losses=tower_losses, learning_rate=learning_rate,
                      corrupt_records=input_batch.corrupt_records,
                      input_initializer=input_batch.initializer, summary_op=summary_op,
                      skipped_variables=gradients.skipped, moving_average=moving_average)


def scalar_summary(tag, value):
    """A scalar summary with exactly `tag` (tf.summary.scalar would uniquify it to e.g.
    `mean_loss_1` because an op of that name exists)."""
    return tf.raw_ops.ScalarSummary(tags=tag, values=tf.cast(value, tf.float32))


def _summaries(towers, tower_totals, mean_loss, regularization, learning_rate, bn_decay,
               input_batch, grads_and_vars, histograms):
    """TensorBoard summaries of one step, merged into one op (run only when due)."""
    with tf.device(VARIABLE_DEVICE), tf.name_scope("summaries"):
        summaries = [scalar_summary("mean_loss", mean_loss),
                     scalar_summary("regularization_loss", regularization),
                     scalar_summary("learning_rate", learning_rate),
                     scalar_summary("batch_norm_decay", bn_decay),
                     scalar_summary("input/corrupt_records", input_batch.corrupt_records)]
        for tower, total in zip(towers, tower_totals):
            summaries.append(scalar_summary(f"tower_{tower.index}/total_loss", total))
            for name, term in sorted(tower.loss_terms.items()):
                summaries.append(scalar_summary(f"tower_{tower.index}/{name}", term))
        grads = [grad for grad, _ in grads_and_vars]
        summaries.append(scalar_summary("gradient_norm", tf.linalg.global_norm(grads)))
        shown = tf.image.convert_image_dtype((input_batch.images[:3] + 1.0) / 2.0, tf.uint8,
                                             saturate=True)
        summaries.append(tf.raw_ops.ImageSummary(tag="input_images", tensor=shown,
                                                 max_images=3))
        if histograms:
            for grad, variable in grads_and_vars:
                name = variable.op.name
                summaries.append(tf.raw_ops.HistogramSummary(tag=f"gradients/{name}",
                                                             values=grad))
                summaries.append(tf.raw_ops.HistogramSummary(tag=f"variables/{name}",
                                                             values=variable))
        return tf1.summary.merge(summaries)
