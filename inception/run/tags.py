"""TensorBoard's tag names, in one place. Their first parts are the groups of the Scalars page,
which sorts them by name: `loss/` (the mean over towers and each tower's losses) comes first,
then `metrics/` (precision@1 of the training batches in the training run, the evaluations'
scores in `eval_<subset>`: one chart shows both runs), then `train/` (rates, speed, counters).

`layout_summary` is the run's custom-scalars layout (TensorBoard's own plugin): the charts a
user opens first, each gathering tags that the Scalars page shows apart.
"""

import re

from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import summary as custom_scalar_summary

MEAN_LOSS = "loss/mean_loss"
SMOOTHED_LOSS = "loss/smoothed_loss"
REGULARIZATION_LOSS = "loss/regularization_loss"
TOWER_LOSS_PATTERN = r"loss/tower_\d+/total_loss"

PRECISION_AT_1 = "metrics/precision_at_1"
RECALL_AT_5 = "metrics/recall_at_5"
EVAL_LOSS = "metrics/loss"
EVAL_EXAMPLES = "metrics/num_examples"
EVAL_CORRUPT_RECORDS = "metrics/corrupt_records"
METRICS_GROUP = "metrics"  # also the confusion-matrix image and the per-class text

LEARNING_RATE = "train/learning_rate"
CURRENT_BATCH_NORM_DECAY = "train/batch_norm_decay"  # the warmed-up decay of the step
STAGE = "train/stage"
LOSS_SCALE = "train/loss_scale"
GRADIENT_NORM = "train/gradient_norm"
EXAMPLES_PER_SEC = "train/examples_per_sec"
INPUT_WAIT = "train/input_wait"  # the share of a traced step spent waiting for input (0 to 1)
NAN_ROLLBACKS = "train/nan_rollbacks"
CORRUPT_RECORDS = "train/corrupt_records"
CLIPPED_UPDATES = "train/clipped_updates"
TIME_TO_ACCURACY = "train/time_to_accuracy"  # seconds, at the step --target_accuracy was reached
INPUT_IMAGES = "train/input_images"



def tower_loss(index, term="total_loss"):
    """The tag of tower `index`'s loss `term` (total_loss, cross_entropy, aux_loss)."""
    return f"loss/tower_{index}/{term}"


def _chart(title, *patterns):
    return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(
        tag=list(patterns)))


def layout_summary():
    """The tf.compat.v1.Summary holding the layout, written once by the chief: the mean loss
    with every tower's total loss in one chart, precision@1 of the training batches and of
    validation in another, then the learning rate and speed."""
    exact = [f"^{re.escape(tag)}$" for tag in (MEAN_LOSS, PRECISION_AT_1,
                                               LEARNING_RATE, EXAMPLES_PER_SEC)]
    layout = layout_pb2.Layout(category=[
        layout_pb2.Category(title="training", chart=[
            _chart("mean_loss and each tower's total_loss", exact[0],
                   f"^{TOWER_LOSS_PATTERN}$"),
            _chart("precision@1: training batches (run .) vs validation (eval_validation)",
                   exact[1]),
            _chart("learning rate", exact[2]),
            _chart("examples/sec", exact[3]),
        ]),
    ])
    return custom_scalar_summary.pb(layout)
