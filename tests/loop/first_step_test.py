"""The start-up line's clock: parts that add up to the total, and the process's age."""

import time
import unittest
from unittest import mock

from absl.testing import absltest

from inception.loop import first_step


class StartupClockTest(unittest.TestCase):

    def test_parts_follow_each_other_and_add_up_to_the_total(self):
        now = [100.0]
        with mock.patch.object(time, "monotonic", lambda: now[0]):
            clock = first_step.StartupClock([("TensorFlow import", 4.0)])
            now[0] += 2.5
            clock.mark("graph")
            now[0] += 0.25
            clock.mark("first step")
        self.assertEqual(clock.line(), "start-up: 6.8 s to the end of the first step "
                                       "(TensorFlow import 4.0 s, graph 2.5 s, first step 0.2 s)")

    def test_the_process_age_is_the_time_since_this_interpreter_started(self):
        age = first_step.process_age_secs()
        if age is None:
            self.skipTest("no /proc on this machine")
        # This test process has run at least its imports, and not for an hour.
        self.assertGreater(age, 0.0)
        self.assertLess(age, 3600.0)
        clock = first_step.StartupClock.from_process_start("interpreter")
        self.assertEqual(clock.parts[0][0], "interpreter")
        self.assertGreaterEqual(clock.parts[0][1], age)


if __name__ == "__main__":
    absltest.main()
