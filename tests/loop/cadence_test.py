"""Cadence: "every N steps or every T seconds", as the loop's saves and summaries use it;
AlignedCadence: "at multiples of N", as validation during training uses it."""

import unittest

from absl.testing import absltest

from inception.loop.cadence import AlignedCadence
from inception.loop.cadence import Cadence


class CadenceTest(unittest.TestCase):

    def test_steps_and_seconds(self):
        cadence = Cadence(every_steps=10, every_secs=60, start_step=0, start_time=0.0)
        self.assertFalse(cadence.due(9, 59.0))
        self.assertTrue(cadence.due(10, 0.0))
        self.assertTrue(cadence.due(1, 60.0))
        cadence.mark(10, 30.0)
        self.assertFalse(cadence.due(19, 89.0))
        self.assertTrue(cadence.check_and_mark(20, 31.0))
        self.assertFalse(cadence.due(21, 32.0))

    def test_zero_means_never(self):
        cadence = Cadence(every_steps=0, every_secs=0)
        self.assertFalse(cadence.due(10**9, 10.0**9))
        self.assertFalse(AlignedCadence(0).due(10**9))

    def test_aligned_falls_on_multiples_wherever_a_run_resumed(self):
        cadence = AlignedCadence(350)
        # A run resumed at step 500 still validates at 700, not at 850 (500 + 350).
        due = [step for step in range(500, 1501) if cadence.due(step)]
        self.assertEqual(due, [700, 1050, 1400])
        self.assertFalse(cadence.due(0))


if __name__ == "__main__":
    absltest.main()
