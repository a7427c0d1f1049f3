"""bench/startup.py reads the start-up line the loop writes (loop/first_step.py) back into
its parts, and a tree without the line into none (not timed: the benchmark is run by hand)."""

import time
import types
import unittest

from absl.testing import absltest

from bench import startup
from inception.loop import first_step


def task_printing(lines):
    """A startup.Task whose process printed `lines` (no process is started)."""
    task = startup.Task.__new__(startup.Task)
    task.process, task.lines = types.SimpleNamespace(stdout=iter(lines)), []
    task.started = time.monotonic()
    return task


class StartupLineTest(unittest.TestCase):

    def test_the_loop_s_line_reads_back_into_its_parts(self):
        clock = first_step.StartupClock([("TensorFlow import", 4.25), ("graph", 12.5),
                                            ("first step", 1.0)])
        task = task_printing(["2026-12-07 10:00:00: step 1, loss = 2.9 (1.0 examples/sec)\n",
                              clock.line() + "\n"])
        self.assertGreaterEqual(task.wait_for(startup.FIRST_STEP), 0.0)
        self.assertEqual(task.startup_parts(),
                         {"TensorFlow import": 4.2, "graph": 12.5, "first step": 1.0})

    def test_a_tree_without_the_line_gives_no_parts(self):
        task = task_printing(["x: step 1, loss = 2.9 (1.0 examples/sec)\n",
                              "x: step 2, loss = 2.8 (1.0 examples/sec)\n"])
        task.wait_for(startup.FIRST_STEP)
        self.assertEqual(task.startup_parts(), {})


if __name__ == "__main__":
    absltest.main()
