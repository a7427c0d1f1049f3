"""Mixed precision: the bf16 rewrite on CPUs that have it (step/loss_scaling_test covers
dynamic loss scaling for fp16, model/mixed_precision_test towers built in bf16 / fp16, the GPU
path)."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.driver import launch
from inception.parallel import devices
from inception.parallel import precision as precision_lib
from inception.parallel import hardware
from tests import testing_utils

tf1 = tf.compat.v1


class Bf16RewriteTest(unittest.TestCase):

    def test_bf16_rewrite_runs_convolutions_in_bf16_and_trains(self):
        data_dir = testing_utils.tiny_demo_data(train=16, validation=4)

        def first_loss(precision):
            return launch.train(settings_lib.train_settings(
                train_dir=testing_utils.temp_dir(precision), data_dir=data_dir, dataset="demo",
                eval_every_n_steps=0,
                max_steps=1, **testing_utils.tiny_model(aux_head=True), batch_size=4, num_towers=2,
                seed=5, precision=precision), log=lambda line: None).last_mean_loss

        if not hardware.cpu_supports_bf16():
            self.skipTest("this CPU has no bf16 instructions (devices_test checks the error)")
        losses = {precision: first_loss(precision) for precision in ("fp32", "bf16")}
        self.assertTrue(np.isfinite(losses["bf16"]))
        # Same seed, same batch, same initial weights: bf16 arithmetic (8-bit mantissa, batch
        # norm over 2 examples per tower here) moves the first loss by about 10%, no more.
        self.assertAlmostEqual(losses["bf16"], losses["fp32"], delta=0.15 * losses["fp32"])

        with tf.Graph().as_default():
            images, _ = testing_utils.random_batch(2, size=16)
            kernel = tf1.get_variable("k", [3, 3, 3, 4])
            output = tf.reduce_sum(tf.nn.conv2d(tf.constant(images), kernel, 1, "SAME"))
            config = precision_lib.apply_precision(tf1.ConfigProto(), "bf16",
                                             devices.plan_towers(1, physical_gpus=0))
            metadata = tf1.RunMetadata()
            with tf1.Session(config=config) as session:
                session.run(tf1.global_variables_initializer())
                session.run(output, options=tf1.RunOptions(output_partition_graphs=True),
                            run_metadata=metadata)
        conv_types = {node.attr["T"].type for graph in metadata.partition_graphs
                      for node in graph.node if "Conv2D" in node.op}
        self.assertEqual(conv_types, {tf.bfloat16.as_datatype_enum})


if __name__ == "__main__":
    absltest.main()
