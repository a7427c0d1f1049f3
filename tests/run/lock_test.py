"""One training run per --train_dir: a second one fails at once, naming the first."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import unittest

from absl.testing import absltest

from inception.config import cluster as cluster_lib
from inception.run.lock import exclusive_run
from inception.run.lock import RunLockError
from tests import testing_utils

HOLD = """
import sys, time
sys.path[:0] = {path!r}
from inception.run.lock import exclusive_run
with exclusive_run({train_dir!r}):
    print("held", flush=True)
    time.sleep(120)
"""


def env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


class RunLockTest(unittest.TestCase):

    def test_a_second_holder_is_refused_with_the_first_one_named(self):
        train_dir = testing_utils.temp_dir("lock")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD.format(path=sys.path, train_dir=train_dir)],
            stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "held")
            with self.assertRaises(RunLockError) as caught:
                with exclusive_run(train_dir):
                    pass
            message = str(caught.exception)
            self.assertIn(f"another training run uses {train_dir} (pid {holder.pid} on "
                          f"{socket.gethostname()}, started ", message)
            self.assertIn("wait for it to end, or pass another --train_dir", message)
            holder.kill()  # kill -9: no chance to clean up
            holder.wait(timeout=30)
            with exclusive_run(train_dir):  # no stale lock
                pass
        finally:
            if holder.poll() is None:
                holder.kill()
            holder.stdout.close()

    def test_a_second_training_run_fails_before_building_anything(self):
        train_dir = testing_utils.temp_dir("lock_train")
        data_dir = testing_utils.tiny_demo_data(train=16, validation=4)
        common = [sys.executable, "-m", "inception.train", f"--train_dir={train_dir}",
                  f"--data_dir={data_dir}", *testing_utils.tiny_flags(),
                  "--batch_size=2", "--num_gpus=1", "--log_every_n_steps=1"]
        first = subprocess.Popen(common + ["--max_steps=100000", "--save_checkpoint_steps=0"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env())
        try:
            deadline = time.time() + 240
            line = ""
            while not re.search(r": step \d+, loss", line) and time.time() < deadline:
                line = first.stdout.readline()
            self.assertRegex(line, r": step \d+, loss")
            second = subprocess.run(common + ["--max_steps=3"], capture_output=True, text=True,
                                    timeout=120, env=env(), check=False)
            self.assertEqual(second.returncode, 1)
            errors = [line for line in second.stderr.splitlines() if line.startswith("error: ")]
            self.assertEqual(len(errors), 1, second.stderr[-2000:])
            self.assertIn(f"another training run uses {train_dir} (pid {first.pid} on", errors[0])
            self.assertNotIn("training demo", second.stdout)  # nothing was built
            first.send_signal(signal.SIGTERM)
            first.wait(timeout=120)
            # SIGTERM is a preemption: the restart code.
            self.assertEqual(first.returncode, cluster_lib.DEFAULT_RESTART_EXIT_CODE)
        finally:
            if first.poll() is None:
                first.kill()
            first.stdout.close()
            first.stderr.close()


if __name__ == "__main__":
    absltest.main()
