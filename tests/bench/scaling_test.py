"""The several-GPU model of bench/scaling.py against numbers worked out by hand."""

import unittest

from absl.testing import absltest

from bench import scaling

PARAMETERS_MB = 108.58388  # 27,145,970 float32 values


class ScalingModelTest(unittest.TestCase):

    def test_variables_on_gpu_zero_over_nvlink_at_bf16_speed(self):
        step = scaling.gpu_variables(256 / 3000.0, 8, 370e9)
        # 85.33 ms of computing; GPU 0 sends 7 weight copies and takes 7 gradients:
        # 2 x 7 x 108.58 MB / 370 GB/s = 4.109 ms; its update reads and writes 19 x 108.58 MB
        # at 3 TB/s: 0.688 ms.
        self.assertAlmostEqual(step.transfers * 1000, 2 * 7 * PARAMETERS_MB / 370, places=3)
        self.assertAlmostEqual(step.update * 1000, 19 * PARAMETERS_MB / 3000, places=3)
        self.assertAlmostEqual(step.efficiency(optimistic=False),
                               85.3333 / (85.3333 + 4.1086 + 0.6877), places=4)
        self.assertAlmostEqual(step.efficiency(optimistic=True), 85.3333 / (85.3333 + 0.6877),
                               places=4)

    def test_variables_on_the_host_cost_even_one_gpu(self):
        step = scaling.cpu_variables(256 / 3000.0, 1)
        # One GPU, its own link: 2 x 108.58 MB / 50 GB/s = 4.34 ms; the host reads and writes
        # 12 x 108.58 MB at 40 GB/s = 32.58 ms.
        self.assertAlmostEqual(step.transfers * 1000, 2 * PARAMETERS_MB / 50, places=3)
        self.assertAlmostEqual(step.update * 1000, 12 * PARAMETERS_MB / 40, places=3)
        self.assertLess(step.efficiency(optimistic=True), 0.75)

    def test_replicated_with_four_buffers_over_nvlink(self):
        step = scaling.ring_all_reduce(256 / 3000.0, 8, 370e9, buffers=4)
        # Each buffer: 2 x 7/8 x 108.58 MB / 4 / 370 GB/s = 0.1284 ms, plus a launch and 14
        # ring hops, 30 + 14 x 8 us = 0.142 ms. Three buffers overlap backpropagation; the
        # last one and the update of 11 x 108.58 MB at 3 TB/s (0.398 ms) do not.
        one = 2 * 7 / 8 * PARAMETERS_MB / 4 / 370 + 0.142
        self.assertAlmostEqual(step.transfers * 1000, 3 * one, places=3)
        self.assertAlmostEqual(step.update * 1000, one + 11 * PARAMETERS_MB / 3000, places=3)
        self.assertGreater(step.efficiency(optimistic=False), 0.98)

    def test_packing_pays_and_the_ring_moves_less_than_a_hub(self):
        packed = scaling.ring_all_reduce(0.1, 8, 50e9, buffers=4)
        unpacked = scaling.ring_all_reduce(0.1, 8, 50e9, buffers=0)
        hub = scaling.gpu_variables(0.1, 8, 50e9)
        # 196 collectives of 0.142 ms latency each: 27.8 ms, against 0.57 ms for 4.
        self.assertGreater(unpacked.transfers + unpacked.update,
                           packed.transfers + packed.update + 0.025)
        self.assertLess(packed.transfers + packed.update, hub.transfers)


if __name__ == "__main__":
    absltest.main()
