"""Scoring one checkpoint: precision@1, recall@5 and loss over exactly the subset's examples.

The graph is built once; each checkpoint is restored into it (exponential-moving-average
weights for the trainable variables, the batch-norm moving statistics as they are) and the
subset is read once, in order. Counts are summed in Python, so the last partial batch counts
once and nothing is padded into the score.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from common.progress import ProgressBar
from inception.inputs import pipeline
from inception.model import network
from inception.model import registry
from inception.parallel.devices import HOST_DEVICE
from inception.run import tags
from inception.run import checkpoint_io
from inception.run.checkpoint_io import step_of
from inception.validation import per_class

tf1 = tf.compat.v1
RECALL_K = 5  # recall@5: the true label among the 5 highest outputs


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Scores of one checkpoint over `num_examples` examples (damaged ones are not counted);
    confusion: int64 [num_classes, num_classes] counts of (true label, top-1 prediction)."""
    step: int
    precision_at_1: float
    recall_at_5: float
    loss: float
    num_examples: int
    corrupt_records: int = 0
    confusion: np.ndarray = dataclasses.field(default=None, compare=False, repr=False)

    def line(self):
        """The original's result line, with the example count; recall@5 is said to be 1 by
        construction when the data has 5 classes or fewer (every one is in the top 5)."""
        classes = None if self.confusion is None else self.confusion.shape[0] - 1  # background
        trivial = classes is not None and classes <= RECALL_K
        note = f" (always, with {classes} classes)" if trivial else ""
        return (f"precision @ 1 = {self.precision_at_1:.4f} recall @ 5 = {self.recall_at_5:.4f}"
                f"{note} [{self.num_examples} examples]")


@dataclasses.dataclass(frozen=True)
class EvalGraph:
    """Per-batch tensors of the evaluation graph and how to restore a checkpoint into it."""
    graph: tf.Graph
    input_initializer: tf.Operation
    local_initializer: tf.Operation
    top1_correct: tf.Tensor
    top5_correct: tf.Tensor
    loss_sum: tf.Tensor
    batch_examples: tf.Tensor
    labels: tf.Tensor
    predictions: tf.Tensor
    corrupt_records: tf.Tensor
    restore_map: dict
    saver: tf1.train.Saver
    num_classes: int


def batch_scores(logits, labels):
    """Counts for one batch.

    Args:
      logits: float32 [batch, num_classes]; labels: int32 [batch].

    Returns:
      (top-1 correct, top-5 correct, sum of cross-entropy): scalars; top-k ranks the labels
      without the background (network.without_background), uses k = min(RECALL_K, labels) and
      counts ties as in the top k, as tf.math.in_top_k does; the loss takes every logit.
    """
    ranked = network.without_background(logits)
    k = min(RECALL_K, logits.shape[-1] - 1)
    top1 = tf.reduce_sum(tf.cast(tf.math.in_top_k(labels, ranked, 1), tf.int64))
    top5 = tf.reduce_sum(tf.cast(tf.math.in_top_k(labels, ranked, k), tf.int64))
    loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                        logits=logits))
    return top1, top5, loss


def build_eval_graph(shards, model, batch_size, max_examples=0, strict=False,
                     logits_fn=None):
    """Builds the evaluation graph for `model` (settings.ModelSettings) over `shards`.

    Args:
      max_examples: evaluate only the first this many records (0: all).
      logits_fn: callable(images, model) -> logits [batch, num_classes]; by default the
        network `model` names, in inference mode (tests pass a tiny model).
    """
    logits_fn = logits_fn or registry.inference_logits
    graph = tf.Graph()
    with graph.as_default():
        # The variables are restored, never initialized; a graph seed keeps op determinism
        # (--deterministic, on during training's validations) from refusing their initializers.
        tf1.set_random_seed(0)
        with tf.device(HOST_DEVICE):
            batch = pipeline.build_eval_input(shards, batch_size, model.image_size,
                                              model.num_classes, strict=strict,
                                              max_examples=max_examples)
        logits = logits_fn(batch.images, model)
        top1, top5, loss_sum = batch_scores(logits, batch.labels)
        batch_examples = tf.size(batch.labels, out_type=tf.int64)
        predictions = tf.argmax(network.without_background(logits), axis=-1)
        tf1.train.get_or_create_global_step()
        restore_map = checkpoint_io.restore_map_with_averages(tf1.global_variables())
        saver = tf1.train.Saver(restore_map)
        local_init = tf1.local_variables_initializer()
    graph.finalize()
    return EvalGraph(graph=graph, input_initializer=batch.initializer,
                     local_initializer=local_init, top1_correct=top1, top5_correct=top5,
                     loss_sum=loss_sum, batch_examples=batch_examples, labels=batch.labels,
                     predictions=predictions,
                     corrupt_records=batch.corrupt_records, restore_map=restore_map, saver=saver,
                     num_classes=model.num_classes)


def evaluate_checkpoint(eval_graph, checkpoint_path, session_config=None, expected_examples=0,
                        show_progress=True):
    """Restores `checkpoint_path` and scores the whole subset once; returns EvalResult.
    Raises CheckpointError naming the checkpoint when it does not restore."""
    with tf1.Session(graph=eval_graph.graph, config=session_config) as session:
        checkpoint_io.restore_or_explain(eval_graph.saver, session, checkpoint_path,
                                         eval_graph.restore_map)
        progress = ProgressBar(expected_examples, "images") if show_progress else None
        totals, confusion = _score_batches(session, eval_graph, progress)
        corrupt = int(session.run(eval_graph.corrupt_records))
    if progress:
        progress.close()
    count = int(totals[3])
    if count == 0:
        raise checkpoint_io.CheckpointError("the evaluation subset yielded no examples; check "
                                            "--data_dir and --subset.")
    return EvalResult(step=step_of(checkpoint_path),
                      precision_at_1=totals[0] / count, recall_at_5=totals[1] / count,
                      loss=totals[2] / count, num_examples=count, corrupt_records=corrupt,
                      confusion=confusion)


def _score_batches(session, eval_graph, progress):
    """Runs the subset once; returns (sums of top-1, top-5, loss and examples, confusion)."""
    totals = np.zeros(4, dtype=np.float64)
    confusion = np.zeros([eval_graph.num_classes] * 2, dtype=np.int64)
    session.run([eval_graph.local_initializer, eval_graph.input_initializer])
    fetches = [eval_graph.top1_correct, eval_graph.top5_correct, eval_graph.loss_sum,
               eval_graph.batch_examples, eval_graph.labels, eval_graph.predictions]
    while True:
        try:
            *sums, labels, predictions = session.run(fetches)
        except tf.errors.OutOfRangeError:
            return totals, confusion
        totals += sums
        confusion += per_class.confusion_counts(labels, predictions, eval_graph.num_classes)
        if progress:
            progress.update(int(sums[3]))


def write_summaries(writer, result):
    """Adds the result's scalars to `writer` at the checkpoint's global step."""
    values = [(tags.PRECISION_AT_1, result.precision_at_1),
              (tags.RECALL_AT_5, result.recall_at_5), (tags.EVAL_LOSS, result.loss),
              (tags.EVAL_EXAMPLES, result.num_examples),
              (tags.EVAL_CORRUPT_RECORDS, result.corrupt_records)]
    writer.add_summary(tf1.Summary(value=[tf1.Summary.Value(tag=tag, simple_value=value)
                                          for tag, value in values]), result.step)
    writer.flush()
