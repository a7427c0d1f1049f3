"""SIGINT/SIGTERM: the first asks for a stop at the next safe point, the second stops at once."""

import os
import signal
import subprocess
import sys
import time
import unittest

from absl.testing import absltest

from inception.loop.stop_request import StopRequest

TWICE = """
import os, signal, sys, time
sys.path[:0] = {path!r}
from inception.loop.stop_request import StopRequest
with StopRequest(print, "stopping") as stop:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    print("first seen:", stop.requested, flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(600)
    print("still running")
"""


class StopRequestTest(unittest.TestCase):

    def test_the_handler_only_records_and_the_next_check_logs_once(self):
        # Logging inside the handler could interrupt a print of the main code ("reentrant
        # call inside <stdout>", seen in the eval watch test).
        lines = []
        previous = signal.getsignal(signal.SIGTERM)
        with StopRequest(lines.append, "stopping") as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs in the main thread between bytecodes
            self.assertEqual(stop.signal_number, signal.SIGTERM)
            self.assertEqual(lines, [])
            self.assertTrue(stop.requested)
            self.assertTrue(stop.requested)
        self.assertEqual(lines, ["SIGTERM received: stopping (send it again to stop at once)."])
        self.assertIs(signal.getsignal(signal.SIGTERM), previous)

    def test_a_second_signal_stops_at_once(self):
        # The script sleeps 600 s after the second signal; ending within 120 s (Python's start
        # on a busy 2-core machine takes seconds) means the signal ended it, not the sleep.
        completed = subprocess.run([sys.executable, "-c", TWICE.format(path=sys.path)],
                                   capture_output=True, text=True, timeout=120, check=False)
        self.assertEqual(completed.returncode, 128 + signal.SIGINT)
        self.assertIn("first seen: True", completed.stdout)
        self.assertNotIn("still running", completed.stdout)
        self.assertIn("SIGINT received again: stopping at once", completed.stderr)
        self.assertNotIn("Traceback", completed.stderr)


if __name__ == "__main__":
    absltest.main()
