"""The custom-scalars layout of a run (TensorBoard's own plugin): the charts a user opens
first, each gathering tags that the Scalars page shows apart."""

import re

from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import summary as custom_scalar_summary

from inception.run import tags


def _chart(title, *patterns):
    return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(
        tag=list(patterns)))


def layout_summary():
    """The tf.compat.v1.Summary holding the layout, written once by the chief: the mean loss
    with every tower's total loss in one chart, precision@1 of the training batches and of
    validation in another, then the learning rate and speed."""
    exact = [f"^{re.escape(tag)}$" for tag in (tags.MEAN_LOSS, tags.PRECISION_AT_1,
                                               tags.LEARNING_RATE, tags.EXAMPLES_PER_SEC)]
    layout = layout_pb2.Layout(category=[
        layout_pb2.Category(title="training", chart=[
            _chart("mean_loss and each tower's total_loss", exact[0],
                   f"^{tags.TOWER_LOSS_PATTERN}$"),
            _chart("precision@1: training batches (run .) vs validation (eval_validation)",
                   exact[1]),
            _chart("learning rate", exact[2]),
            _chart("examples/sec", exact[3]),
        ]),
    ])
    return custom_scalar_summary.pb(layout)
