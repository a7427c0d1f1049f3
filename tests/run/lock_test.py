"""One training run per --train_dir: a second one fails at once, naming the first; a cluster's
restarted chief exits with the restart code; a holder on a machine that is gone is taken over
once its heartbeat lapses."""

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

from absl.testing import absltest

from inception.config import recovery
from inception.run import lock
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

GONE = lock.Holder(pid=4321, host="node-gone", since="2026-01-02 03:04:05",
                   renewed="2026-01-02 03:09:15", machine="boot-id-of-a-machine-that-is-gone")


def env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def hold_as(holder, train_dir, age_secs):
    """The lock of `train_dir` held through another open file description (to flock, another
    process), with `holder`'s record last written `age_secs` ago; close it to let go."""
    path = os.path.join(train_dir, lock.LOCK_FILE)
    handle = open(path, "w", encoding="utf-8")  # pylint: disable=consider-using-with
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    handle.write(holder.line())
    handle.flush()
    past = time.time() - age_secs
    os.utime(path, (past, past))
    return handle


def wait_for(condition, timeout_secs=2.0):
    deadline = time.time() + timeout_secs
    while not condition() and time.time() < deadline:
        time.sleep(0.01)
    return condition()


class RunLockTest(unittest.TestCase):

    def test_a_second_holder_is_refused_with_the_first_one_named(self):
        train_dir = testing_utils.temp_dir("lock")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD.format(path=sys.path, train_dir=train_dir)],
            stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "held")
            since = lock.read_holder(os.path.join(train_dir, lock.LOCK_FILE))[0].since
            for retryable in (False, True):
                with self.assertRaises(RunLockError) as caught:
                    with exclusive_run(train_dir, retryable=retryable):
                        pass
                message = str(caught.exception)
                self.assertIn(f"another training run uses {train_dir} (pid {holder.pid} on "
                              f"{socket.gethostname()}, started {since}); ", message)
                self.assertEqual(caught.exception.retryable, retryable)
                self.assertEqual("restart code" in message, retryable, message)
                self.assertIn("pass another --train_dir", message)
                self.assertNotIn("\n", message)
            holder.kill()  # kill -9: no chance to clean up
            holder.wait(timeout=30)
            with exclusive_run(train_dir):  # no stale lock
                pass
        finally:
            if holder.poll() is None:
                holder.kill()
            holder.stdout.close()

    def test_a_restarted_cluster_chief_that_finds_the_lock_taken_exits_with_the_restart_code(
            self):
        train_dir = testing_utils.temp_dir("lock_chief")
        with exclusive_run(train_dir) as heartbeat:
            chief = subprocess.run(
                [sys.executable, "-m", "inception.train", f"--train_dir={train_dir}",
                 "--job_name=worker", "--task_id=0",
                 "--worker_hosts=localhost:1,localhost:2", *testing_utils.tiny_flags()],
                capture_output=True, text=True, timeout=240, env=env(), check=False)
        self.assertEqual(chief.returncode, recovery.DEFAULT_RESTART_EXIT_CODE,
                         chief.stderr[-2000:])
        errors = [line for line in chief.stderr.splitlines() if line.startswith("error: ")]
        self.assertEqual(len(errors), 1, chief.stderr[-2000:])
        self.assertIn(f"another training run uses {train_dir} ({heartbeat.holder.named()}); "
                      "exiting with the restart code", errors[0])

    def test_a_holder_on_another_machine_whose_heartbeat_lapsed_is_taken_over(self):
        train_dir = testing_utils.temp_dir("lock_lapsed")
        path = os.path.join(train_dir, lock.LOCK_FILE)
        gone = hold_as(GONE, train_dir, age_secs=lock.STALE_SECS + 30)
        logged = []
        try:
            with exclusive_run(train_dir, retryable=True, log=logged.append) as heartbeat:
                self.assertFalse(heartbeat.holds_flock)  # the file server still reports it held
                self.assertEqual(len(logged), 1, logged)
                self.assertRegex(logged[0], rf"^took over {re.escape(train_dir)} from "
                                 rf"{re.escape(GONE.named())}: its heartbeat was last renewed "
                                 r"(9\d|1\d\d) s ago \(more than 60 s\)")
                self.assertEqual(lock.read_holder(path)[0], heartbeat.holder)
                self.assertEqual(heartbeat.holder.pid, os.getpid())
                with self.assertRaises(RunLockError) as caught:  # a third run is refused
                    with exclusive_run(train_dir):
                        pass
                self.assertIn(heartbeat.holder.named(), str(caught.exception))
                gone.close()  # the file server lets the lost client's lock go at last
                self.assertTrue(heartbeat.renew())
                self.assertTrue(heartbeat.holds_flock)
        finally:
            gone.close()
        with exclusive_run(train_dir) as heartbeat:  # the flock was released at the end
            self.assertTrue(heartbeat.holds_flock)

    def test_a_holder_on_another_machine_with_a_fresh_heartbeat_is_refused(self):
        train_dir = testing_utils.temp_dir("lock_fresh")
        with hold_as(GONE, train_dir, age_secs=lock.STALE_SECS - 15):
            for retryable in (False, True):
                with self.assertRaises(RunLockError) as caught:
                    with exclusive_run(train_dir, retryable=retryable, log=self.fail):
                        pass
                self.assertEqual(caught.exception.retryable, retryable)
                self.assertRegex(str(caught.exception),
                                 rf"^another training run uses {re.escape(train_dir)} "
                                 rf"\({re.escape(GONE.named())}, heartbeat renewed 4\d s ago; ")
            self.assertEqual(lock.read_holder(os.path.join(train_dir, lock.LOCK_FILE))[0],
                             GONE)  # left as it was

    def test_a_holder_on_this_machine_is_refused_however_old_its_record(self):
        train_dir = testing_utils.temp_dir("lock_here")
        here = lock.Holder(pid=4321, host="renamed-pod", since=GONE.since,
                           renewed=GONE.renewed, machine=lock.machine_id())
        with hold_as(here, train_dir, age_secs=10 * lock.STALE_SECS):
            with self.assertRaises(RunLockError) as caught:
                with exclusive_run(train_dir, log=self.fail):
                    pass
        self.assertIn(f"({here.named()}); wait for it to end", str(caught.exception))

    def test_a_record_that_is_not_intact_is_not_believed(self):
        line = GONE.line()
        self.assertEqual(lock.Holder.parse(line), GONE)
        self.assertIsNone(lock.Holder.parse(line.replace("03:09:15", "03:09:16")))  # torn
        self.assertIsNone(lock.Holder.parse(line[:len(line) // 2]))
        self.assertIsNone(lock.Holder.parse("pid 12 on node-a, started 2026-01-02 03:04:05"))
        train_dir = testing_utils.temp_dir("lock_torn")
        path = os.path.join(train_dir, lock.LOCK_FILE)
        with hold_as(GONE, train_dir, age_secs=0) as gone:
            gone.seek(0)
            gone.write(line.replace("03:09:15", "03:09:16"))  # a renewal caught half done
            gone.flush()
            past = time.time() - 10 * lock.STALE_SECS
            os.utime(path, (past, past))
            with self.assertRaises(RunLockError) as caught:  # cannot tell whose: refused
                with exclusive_run(train_dir, log=self.fail):
                    pass
        self.assertIn(f"({GONE.named()}, renewed 2026-01-02 03:09:16 [machine",
                      str(caught.exception))

    def test_the_holder_renews_its_record(self):
        train_dir = testing_utils.temp_dir("lock_renew")
        path = os.path.join(train_dir, lock.LOCK_FILE)
        past = time.time() - 1000
        with exclusive_run(train_dir, renew_secs=0.05):
            os.utime(path, (past, past))
            self.assertTrue(wait_for(lambda: os.stat(path).st_mtime > past + 900))
            self.assertLess(abs(lock.file_server_time(train_dir) - os.stat(path).st_mtime), 5)
            record = lock.read_holder(path)[0]
            self.assertEqual((record.pid, record.host, record.machine),
                             (os.getpid(), socket.gethostname(), lock.machine_id()))

    def test_renewal_stops_when_the_run_ends(self):
        train_dir = testing_utils.temp_dir("lock_end")
        path = os.path.join(train_dir, lock.LOCK_FILE)
        with exclusive_run(train_dir, renew_secs=0.05):
            self.assertIn("run-heartbeat", [thread.name for thread in threading.enumerate()])
        self.assertNotIn("run-heartbeat", [thread.name for thread in threading.enumerate()])
        past = time.time() - 1000
        os.utime(path, (past, past))
        time.sleep(0.3)  # six renewals' time
        self.assertEqual(os.stat(path).st_mtime, past)

    def test_a_holder_whose_run_was_taken_over_stops_renewing(self):
        train_dir = testing_utils.temp_dir("lock_lost")
        path = os.path.join(train_dir, lock.LOCK_FILE)
        logged = []
        with exclusive_run(train_dir, renew_secs=0.05, log=logged.append) as heartbeat:
            def taken_over():
                with open(path, "r+", encoding="utf-8") as other:  # another machine took over
                    other.write(GONE.line())
                return heartbeat.lost_to is not None

            # Written again until seen: a renewal may have read its own record just before.
            self.assertTrue(wait_for(taken_over))
            self.assertEqual(heartbeat.lost_to, GONE)
            time.sleep(0.2)
            self.assertEqual(lock.read_holder(path)[0], GONE)
        self.assertEqual(len(logged), 1, logged)
        self.assertIn(f"was taken over by {GONE.named()}", logged[0])

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
            self.assertEqual(second.returncode, 1)  # a run alone: a mistake, not retryable
            errors = [line for line in second.stderr.splitlines() if line.startswith("error: ")]
            self.assertEqual(len(errors), 1, second.stderr[-2000:])
            self.assertIn(f"another training run uses {train_dir} (pid {first.pid} on", errors[0])
            self.assertNotIn("training demo", second.stdout)  # nothing was built
            first.send_signal(signal.SIGTERM)
            first.wait(timeout=120)
            # SIGTERM is a preemption: the restart code.
            self.assertEqual(first.returncode, recovery.DEFAULT_RESTART_EXIT_CODE)
        finally:
            if first.poll() is None:
                first.kill()
            first.stdout.close()
            first.stderr.close()


if __name__ == "__main__":
    absltest.main()
