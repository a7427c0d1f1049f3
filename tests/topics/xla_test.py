"""--xla: the step really runs XLA-compiled clusters and computes what the plain step does.

Its own test process: TensorFlow reads the flag that lets XLA cluster on CPUs once per process,
so, as in the entry points, it is set before TensorFlow does anything.
"""

import os
import subprocess
import sys
import unittest

from absl.testing import absltest

from inception.driver import startup

startup.allow_xla_on_cpu()

import numpy as np  # noqa: E402  pylint: disable=wrong-import-position
import tensorflow as tf  # noqa: E402  pylint: disable=wrong-import-position

from inception.parallel import devices  # noqa: E402  pylint: disable=wrong-import-position
from tests import testing_utils  # noqa: E402  pylint: disable=wrong-import-position

tf1 = tf.compat.v1
BATCH = 8  # batch norm over fewer examples amplifies rounding
NUM_TOWERS = 1  # XLA compiles each tower alike; one keeps the CPU compile short


def inception_step(xla):
    """The op types that ran, the towers' losses and each trainable variable's update in one
    step of a tiny Inception v3 on a fixed batch (testing_utils.tiny_inception_step), with or
    without XLA."""
    config = testing_utils.cpu_session_config(NUM_TOWERS)
    config.allow_soft_placement = True  # XLA's launch ops pick their own device
    if xla:
        devices.apply_xla(config)
    result = testing_utils.tiny_inception_step([f"/cpu:{i}" for i in range(NUM_TOWERS)], config,
                                               batch=BATCH)
    return result.ran, result.losses, result.updates


class XlaTest(unittest.TestCase):

    def test_xla_step_is_compiled_and_matches_the_plain_step(self):
        compiled_ops, compiled_losses, compiled = inception_step(xla=True)
        plain_ops, plain_losses, plain = inception_step(xla=False)
        self.assertIn("_XlaRun", compiled_ops)
        self.assertNotIn("_XlaRun", plain_ops)
        # Same weights, same batch: XLA fuses and reorders float arithmetic, nothing more. In
        # float32 through ~95 layers with batch norm over 8 examples, that reordering alone
        # moved the loss by up to 1.03e-4 (relative) against the plain step, measured on an
        # AVX2 CPU with oneDNN, with oneDNN capped at SSE4.1 (5.6e-5) and with TensorFlow's own
        # kernels (TF_ENABLE_ONEDNN_OPTS=0); an AVX-512 CPU stayed under 1e-4. 1e-3 keeps ten
        # times that margin; a cluster computing something else moves the loss by percents.
        np.testing.assert_allclose(compiled_losses, plain_losses, rtol=1e-3)
        self.assertEqual(sorted(compiled), sorted(plain))
        for name, update in plain.items():
            relative = np.linalg.norm(compiled[name] - update) / np.linalg.norm(update)
            if "Logits" in name:  # one layer from the loss: rounding only, 6.0e-4 measured
                self.assertLess(relative, 3e-3, name)  # on the same three kernel sets
            # Further down, rounding grows through every batch norm over 8 examples (about
            # 5% at the first layer here; cosine >= 0.997 measured); a wrong gradient would
            # point elsewhere.
            cosine = np.sum(compiled[name] * update) / (
                np.linalg.norm(compiled[name]) * np.linalg.norm(update))
            self.assertGreater(cosine, 0.99, name)

    def test_the_train_binary_compiles_with_xla(self):
        # The entry point, not the library: TensorFlow fixes its XLA flags when it first lists
        # its devices, which the binary does at start-up; an --xla that missed that moment
        # would train fine, uncompiled. One step without validation: compiling the step is what
        # is checked, and every further step or evaluation compiled anew would add a minute.
        train_dir = testing_utils.temp_dir("xla")
        completed = subprocess.run(
            [sys.executable, "-m", "inception.train", "--xla", f"--train_dir={train_dir}",
             f"--data_dir={testing_utils.tiny_demo_data(train=16, validation=4)}",
             "--dataset=demo", *testing_utils.tiny_flags(), "--batch_size=2",
             "--num_gpus=1", "--max_steps=1", "--eval_every_n_steps=0"],
            capture_output=True, text=True, timeout=900, check=False,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TF_CPP_MIN_LOG_LEVEL="0"))
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        described = [line for line in completed.stdout.splitlines() if ": training " in line]
        self.assertIn("; XLA;", described[0])
        self.assertIn("Compiled cluster using XLA", completed.stderr)
        self.assertTrue(os.path.exists(os.path.join(train_dir, "model.ckpt-1.index")))


if __name__ == "__main__":
    absltest.main()
