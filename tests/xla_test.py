"""--xla: the step really runs XLA-compiled clusters and computes what the plain step does.

Its own test process: TensorFlow reads the flag that lets XLA cluster on CPUs once per process,
so, as in the entry points, it is set before TensorFlow does anything.
"""

import os
import subprocess
import sys
import unittest
from unittest import mock

from inception import cli

cli.allow_xla_on_cpu()

import numpy as np  # noqa: E402  pylint: disable=wrong-import-position
import tensorflow as tf  # noqa: E402  pylint: disable=wrong-import-position
from tf_slim.layers import layers as slim_layers  # noqa: E402  pylint: disable=wrong-import-position
from tf_slim.ops import arg_scope  # noqa: E402  pylint: disable=wrong-import-position

from inception import devices  # noqa: E402  pylint: disable=wrong-import-position
from inception import input_pipeline  # noqa: E402  pylint: disable=wrong-import-position
from inception import model  # noqa: E402  pylint: disable=wrong-import-position
from inception import train_graph  # noqa: E402  pylint: disable=wrong-import-position
from tests import testing_utils  # noqa: E402  pylint: disable=wrong-import-position

tf1 = tf.compat.v1
BATCH = 16  # 8 per tower: batch norm over fewer examples amplifies rounding
NUM_TOWERS = 2


@arg_scope.add_arg_scope
def no_dropout(inputs, *args, **kwargs):
    """slim.dropout's signature, passing the input through: compiled, dropout draws its mask
    from XLA's own random generator, so the two runs would drop different units."""
    del args, kwargs
    return tf.identity(inputs)


def inception_step(xla):
    """Op types that ran, the towers' losses and each trainable variable's update in one step
    of a tiny Inception v3 (two towers, batch norm, aux head, moving averages; no dropout) on a
    fixed batch, with or without XLA."""
    settings = model.ModelSettings(num_classes=5, image_size=75, depth_multiplier=0.1,
                                   dataset="synthetic")
    with tf.Graph().as_default():
        tf1.set_random_seed(3)
        optimization = train_graph.OptimizationSettings(batch_size=BATCH, examples_per_epoch=64,
                                                        initial_learning_rate=0.01)
        images, labels = testing_utils.random_batch(BATCH, size=75)
        dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()
        iterator = tf1.data.make_initializable_iterator(dataset)
        image_batch, label_batch = iterator.get_next()
        input_batch = input_pipeline.InputBatch(
            images=image_batch, labels=label_batch, corrupt_records=tf.constant(0, tf.int64),
            initializer=iterator.initializer)
        with mock.patch.object(slim_layers, "dropout", no_dropout):
            built = train_graph.build_train_graph(
                input_batch, lambda decay: model.make_model_fn(settings, decay), optimization,
                [f"/cpu:{i}" for i in range(NUM_TOWERS)])
        stage = built.stages[0]
        config = testing_utils.cpu_session_config(NUM_TOWERS)
        config.allow_soft_placement = True  # XLA's launch ops pick their own device
        if xla:
            devices.apply_xla(config)
        with tf1.Session(config=config) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            variables = tf1.trainable_variables()
            before = session.run(variables)
            metadata = tf1.RunMetadata()
            _, losses = session.run(
                [stage.train_op, stage.tower_losses],
                options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                run_metadata=metadata)
            updates = {v.op.name: after - old
                       for v, old, after in zip(variables, before, session.run(variables))}
    ran = {stats.timeline_label.split("=")[-1].split("(")[0].strip()
           for device in metadata.step_stats.dev_stats for stats in device.node_stats}
    return ran, losses, updates


class XlaTest(unittest.TestCase):

    def test_xla_step_is_compiled_and_matches_the_plain_step(self):
        compiled_ops, compiled_losses, compiled = inception_step(xla=True)
        plain_ops, plain_losses, plain = inception_step(xla=False)
        self.assertIn("_XlaRun", compiled_ops)
        self.assertNotIn("_XlaRun", plain_ops)
        # Same weights, same batch: XLA fuses and reorders float arithmetic, nothing more.
        np.testing.assert_allclose(compiled_losses, plain_losses, rtol=1e-4)
        self.assertEqual(sorted(compiled), sorted(plain))
        for name, update in plain.items():
            relative = np.linalg.norm(compiled[name] - update) / np.linalg.norm(update)
            if "Logits" in name:  # one layer from the loss: only rounding
                self.assertLess(relative, 1e-3, name)
            # Further down, rounding grows through every batch norm over 8 examples (about
            # 5% at the first layer here, measured); a wrong gradient would point elsewhere.
            cosine = np.sum(compiled[name] * update) / (
                np.linalg.norm(compiled[name]) * np.linalg.norm(update))
            self.assertGreater(cosine, 0.99, name)

    def test_the_train_binary_compiles_with_xla(self):
        # The entry point, not the library: TensorFlow fixes its XLA flags when it first lists
        # its devices, which the binary does at start-up; an --xla that missed that moment
        # would train fine, uncompiled.
        train_dir = testing_utils.temp_dir("xla")
        completed = subprocess.run(
            [sys.executable, "-m", "inception.train", "--xla", f"--train_dir={train_dir}",
             f"--data_dir={testing_utils.tiny_demo_data(train=16, validation=4)}",
             "--dataset=demo", "--image_size=107", "--depth_multiplier=0.1", "--batch_size=4",
             "--num_gpus=2", "--max_steps=2"],
            capture_output=True, text=True, timeout=900, check=False,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TF_CPP_MIN_LOG_LEVEL="0"))
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        self.assertIn("; XLA;", completed.stdout.splitlines()[0])
        self.assertIn("Compiled cluster using XLA", completed.stderr)
        self.assertTrue(os.path.exists(os.path.join(train_dir, "model.ckpt-2.index")))


if __name__ == "__main__":
    unittest.main()
