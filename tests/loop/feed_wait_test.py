"""The share of a step spent waiting for input (loop/feed_wait.py): its interval arithmetic
against hand-counted step statistics, and in the training loop a slow input (a sleep in the
input pipeline) against a slow step (the same sleep in the towers) on the small model."""

import time
import unittest

import tensorflow as tf
from absl.testing import absltest
from tensorflow.core.framework import step_stats_pb2

from inception.config import settings as settings_lib
from inception.inputs import pipeline
from inception.loop import feed_wait
from inception.loop import session_loop
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
BATCH, NUM_TOWERS, STEPS, LOG_EVERY = 8, 2, 30, 10
# The sleep that makes either the input or the step slow: far above the small model's own step
# (milliseconds), so the expected share is near 1 or near 0 on any CPU.
SLEEP_SECS = 0.2


def step_stats(*spans):
    """StepStats holding one node per (name, start, end) in microseconds."""
    stats = step_stats_pb2.StepStats()
    device = stats.dev_stats.add(device="/cpu:0")
    for name, start, end in spans:
        device.node_stats.add(node_name=name, all_start_micros=start,
                              all_end_rel_micros=end - start)
    return stats


class WaitingShareTest(unittest.TestCase):

    def test_the_read_counts_only_where_nothing_else_runs(self):
        readers = {"read"}
        cases = [  # (spans, share counted by hand)
            ([("read", 0, 50), ("conv", 50, 100)], 0.5),       # the towers wait for the batch
            ([("read", 0, 60), ("conv", 0, 100)], 0.0),        # staged: read while computing
            ([("read", 0, 80), ("conv", 20, 100)], 0.2),       # the read outlasts nothing
            ([("read", 0, 40), ("a", 10, 20), ("b", 15, 30), ("conv", 40, 100)], 0.2),
            ([("conv", 0, 100)], 0.0),                         # no input read at all
        ]
        for spans, expected in cases:
            self.assertAlmostEqual(
                feed_wait.waiting_share(step_stats(*spans), readers), expected, places=9,
                msg=spans)
        self.assertEqual(feed_wait.waiting_share(step_stats_pb2.StepStats(), readers), 0.0)

    def test_at_most_one_step_in_the_gap_is_traced_and_the_last_always(self):
        with tf.Graph().as_default() as graph:
            tf1.data.make_one_shot_iterator(tf.data.Dataset.range(3)).get_next()
        probe = feed_wait.InputWaitProbe(graph)
        gap = feed_wait.TRACE_GAP_STEPS
        traced = [step for step in range(1, 3 * gap + 1)
                  if probe.metadata(step, due=True, last=step == 3 * gap - 1) is not None]
        self.assertEqual(traced, [1, 1 + gap, 1 + 2 * gap, 3 * gap - 1])
        self.assertIsNone(probe.metadata(3 * gap + 5, due=False, last=True))
        self.assertIsNotNone(probe.metadata(5, due=True, last=False))  # after a rollback
        with tf.Graph().as_default() as synthetic:
            tf.constant(1.0)
        self.assertIsNone(feed_wait.InputWaitProbe(synthetic).metadata(1, True, True))


def _sleep(value):
    time.sleep(SLEEP_SECS)
    return value


def slept(tensor):
    """`tensor`, after a SLEEP_SECS pause that TensorFlow cannot optimize away."""
    out = tf.numpy_function(_sleep, [tensor], tensor.dtype, stateful=True)
    out.set_shape(tensor.shape)
    return out


def prefetched_input(slow):
    """The small model's random batches through tf.data with a prefetch, as the real pipeline
    has; `slow`: each batch takes SLEEP_SECS to make."""
    images, labels = testing_utils.random_batch(64)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(
        BATCH, drop_remainder=True)
    if slow:
        dataset = dataset.map(lambda image, label: (slept(image), label))
    iterator = tf1.data.make_initializable_iterator(dataset.prefetch(2))
    image_batch, label_batch = iterator.get_next()
    image_batch.set_shape([BATCH, 8, 8, 3])
    return pipeline.InputBatch(images=image_batch, labels=label_batch,
                               corrupt_records=tf.constant(0, tf.int64),
                               initializer=iterator.initializer)


def model_factory(slow):
    """make_model_fn for the small model; `slow`: each tower's step takes SLEEP_SECS more."""
    base = testing_utils.small_conv_model_fn()

    def make_model_fn(bn_decay):
        del bn_decay

        def model_fn(images, labels):
            return base(slept(images) if slow else images, labels)
        return model_fn
    return make_model_fn


def train_lines(slow_input):
    """The log of STEPS steps, a line every LOG_EVERY, with the input or else the towers
    slowed."""
    def build():
        return step_graph.build_train_graph(
            prefetched_input(slow_input), model_factory(not slow_input),
            testing_utils.optimization(initial_learning_rate=0.01),
            testing_utils.sharing_of([f"/cpu:{i}" for i in range(NUM_TOWERS)]), 64)
    lines = []
    settings = settings_lib.LoopSettings(
        train_dir=testing_utils.temp_dir("feed_wait"), max_steps=STEPS, log_every_n_steps=LOG_EVERY,
        save_summaries_steps=0, save_checkpoint_steps=0, save_interval_secs=0)
    session_loop.run_training(build, testing_utils.cpu_session_config(NUM_TOWERS), settings,
                              log=lines.append)
    return lines


def waits(lines):
    """The input wait of each loss line that reports one, in percent."""
    return [int(line.rsplit("input wait ", 1)[1].rstrip("%)")) for line in lines
            if ": step " in line and "input wait " in line]


class InputBoundNoteTest(unittest.TestCase):

    def test_slow_input_is_named_once_and_a_slow_step_is_not(self):
        slow_input = train_lines(slow_input=True)
        notes = [line for line in slow_input if "input-bound" in line]
        self.assertEqual(len(notes), 1, slow_input)
        self.assertIn("--input_service", notes[0])
        # The first line's step and the last are traced (TRACE_GAP_STEPS apart at least); by
        # then nearly the whole step is the pipeline's sleep: well above the note's threshold.
        self.assertEqual(len(waits(slow_input)), 2, slow_input)
        self.assertTrue(all(share >= 50 for share in waits(slow_input)), slow_input)

        slow_step = train_lines(slow_input=False)
        self.assertFalse([line for line in slow_step if "input-bound" in line], slow_step)
        self.assertEqual(len(waits(slow_step)), 2, slow_step)
        self.assertTrue(all(share < 100 * feed_wait.INPUT_BOUND_SHARE
                            for share in waits(slow_step)), slow_step)


if __name__ == "__main__":
    absltest.main()
