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

    def test_ring_all_reduce_moves_less_than_a_hub(self):
        ring = scaling.ring_all_reduce(0.1, 8, 50e9)
        hub = scaling.gpu_variables(0.1, 8, 50e9)
        self.assertAlmostEqual(ring.transfers / hub.transfers, (2 * 7 / 8) / (2 * 7))


if __name__ == "__main__":
    absltest.main()
