"""The TensorFlow-free helpers of common/: atomic writes, machine facts, the command line and
the progress bar; and the application's start-up built on them (inception/driver/startup.py)."""

import io
import json
import os
import signal
import stat
import subprocess
import sys
import time
import unittest
from unittest import mock

from absl.testing import absltest

from common import cli
from common import files
from common import machine
from common.progress import ProgressBar
from tests import testing_utils


def run_python(script, **env):
    """Runs `script` in a fresh Python with this process's import path; returns the result."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env))


class WriteTextAtomicallyTest(unittest.TestCase):

    def test_an_existing_file_is_replaced_whole(self):
        path = os.path.join(testing_utils.temp_dir("atomic"), "settings.json")
        files.write_text_atomically(path, "a much longer first version\n")
        first = os.stat(path).st_ino
        files.write_text_atomically(path, "short\n")
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "short\n")
        self.assertNotEqual(os.stat(path).st_ino, first)  # renamed into place, not rewritten
        self.assertEqual(os.listdir(os.path.dirname(path)), ["settings.json"])

    def test_a_missing_directory_raises_and_leaves_nothing(self):
        directory = testing_utils.temp_dir("atomic")
        with self.assertRaises(OSError):
            files.write_text_atomically(os.path.join(directory, "missing", "f.txt"), "x")
        self.assertEqual(os.listdir(directory), [])

    def test_a_failed_rename_removes_the_written_temporary_file(self):
        directory = testing_utils.temp_dir("atomic")
        target = os.path.join(directory, "taken")
        os.mkdir(target)  # a directory where the file should go: os.replace fails
        with self.assertRaises(OSError):
            files.write_text_atomically(target, "x")
        self.assertEqual(os.listdir(directory), ["taken"])

    def test_a_full_disk_raises_and_leaves_no_temporary_file(self):
        directory = testing_utils.temp_dir("atomic")
        # A file size limit stands in for a full disk (and holds for root too).
        script = ("import resource, signal\n"
                  "from common import files\n"
                  "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                  "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
                  "try:\n"
                  f"    files.write_text_atomically({directory!r} + '/f.json', 'x' * 5000)\n"
                  "except OSError as error:\n"
                  "    print('OSError', error.errno)\n")
        completed = run_python(script)
        self.assertIn("OSError", completed.stdout, completed.stderr[-2000:])
        self.assertEqual(os.listdir(directory), [])


def fake_command(directory, name, output, code=0):
    """An executable `directory/name` that prints `output` and exits with `code` (it needs
    `cat` from os.defpath on PATH)."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"#!/bin/sh\ncat <<'END'\n{output}\nEND\nexit {code}\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class MachineTest(unittest.TestCase):

    def test_cpu_flags_and_model_come_from_the_first_cpu(self):
        path = os.path.join(testing_utils.temp_dir("cpuinfo"), "cpuinfo")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("processor\t: 0\nmodel name\t: Fake CPU @ 2.00GHz\n"
                         "flags\t\t: fpu avx2 avx512_bf16\nvmx flags\t: ept\n\n"
                         "processor\t: 1\nflags\t\t: fpu\n")
        self.assertEqual(machine.cpu_flags(path), {"fpu", "avx2", "avx512_bf16"})
        self.assertEqual(machine.cpu_model(path), "Fake CPU @ 2.00GHz")

    def test_unreadable_cpuinfo_means_no_flags_and_no_model(self):
        missing = os.path.join(testing_utils.temp_dir("cpuinfo"), "missing")
        self.assertEqual(machine.cpu_flags(missing), set())
        self.assertIsNone(machine.cpu_model(missing))

    def test_no_nvidia_smi_means_no_gpus(self):
        with mock.patch.dict(os.environ, {"PATH": testing_utils.temp_dir("empty_path")}):
            self.assertEqual(machine.nvidia_gpus(), [])

    def test_gpus_are_read_from_nvidia_smi(self):
        directory = testing_utils.temp_dir("fake_smi")
        fake_command(directory, "nvidia-smi", "NVIDIA H200, 143771 MiB\nNVIDIA A100, 40960 MiB")
        with mock.patch.dict(os.environ, {"PATH": os.pathsep.join([directory, os.defpath])}):
            self.assertEqual(machine.nvidia_gpus(), [("NVIDIA H200", "143771 MiB"),
                                                     ("NVIDIA A100", "40960 MiB")])

    def test_a_failing_nvidia_smi_means_no_gpus(self):
        directory = testing_utils.temp_dir("fake_smi")
        # What nvidia-smi prints, on stdout, where the driver is missing.
        fake_command(directory, "nvidia-smi", "NVIDIA-SMI has failed because it couldn't "
                     "communicate with the NVIDIA driver.", code=9)
        with mock.patch.dict(os.environ, {"PATH": os.pathsep.join([directory, os.defpath])}):
            self.assertEqual(machine.nvidia_gpus(), [])


class CliTest(unittest.TestCase):

    def test_relative_paths_are_taken_from_where_the_command_was_typed(self):
        with mock.patch.dict(os.environ, {"BUILD_WORKING_DIRECTORY": "/home/me/work"}):
            self.assertEqual(cli.user_path("shards/../out"), "/home/me/work/out")
            self.assertEqual(cli.user_path("/abs/path"), "/abs/path")
            self.assertEqual(cli.user_path(""), "")

    def test_fail_prints_one_line_and_exits_with_the_code(self):
        stderr = io.StringIO()
        with mock.patch.object(sys, "stderr", stderr), self.assertRaises(SystemExit) as exit_:
            cli.fail("two\n  lines", code=3)
        self.assertEqual(exit_.exception.code, 3)
        self.assertEqual(stderr.getvalue(), "error: two lines\n")

    def test_common_loads_neither_tensorflow_nor_the_application(self):
        completed = run_python(
            "import json, sys\n"
            "from common import cli, files, machine, progress\n"
            "print(json.dumps([name for name in ('tensorflow', 'tf_slim', 'inception') "
            "if name in sys.modules]))\n")
        self.assertEqual(completed.returncode, 0, completed.stderr[-2000:])
        self.assertEqual(json.loads(completed.stdout), [])

    def test_inception_start_up_allows_xla_on_cpus_and_loads_tf_slim_quietly(self):
        completed = run_python(
            "import json, os, sys\n"
            "from inception.driver import startup\n"
            "startup.quiet_tensorflow()\n"
            "print(json.dumps([os.environ['TF_XLA_FLAGS'], 'tf_slim' in sys.modules]))\n",
            TF_XLA_FLAGS="--tf_xla_auto_jit=0")
        self.assertEqual(completed.returncode, 0, completed.stderr[-2000:])
        self.assertEqual(json.loads(completed.stdout),
                         ["--tf_xla_auto_jit=0 --tf_xla_cpu_global_jit", True])
        self.assertEqual(completed.stderr, "")


class ProgramCommandTest(unittest.TestCase):

    def test_the_next_command_is_started_the_way_this_one_was(self):
        with mock.patch.dict(os.environ, {"INCEPTION_LAUNCHER": "bin/inception"}):
            self.assertEqual(cli.program_command("eval"), "bin/inception eval")
        with mock.patch.dict(os.environ):
            os.environ.pop("INCEPTION_LAUNCHER", None)
            self.assertEqual(cli.program_command("eval"), "bin/bazel run //inception:eval --")


class StopDeadlineTest(unittest.TestCase):
    """A SIGTERM to a process whose main thread never gets back to look at it (as in a step
    that waits for a lost peer: here a sleep the recording handler does not end)."""

    SCRIPT = ("import signal, sys, time\n"
              "from common import signals\n"
              "signals.handle_signals()\n"
              "signals.set_exit_status(signal.SIGTERM, 138)\n"
              "{deadline}"
              "signal.signal(signal.SIGTERM, lambda *unused: None)  # a phase that records it\n"
              "print('waiting', flush=True)\n"
              "time.sleep(10)\n"
              "print('the wait ended', flush=True)\n")

    def run_and_terminate(self, deadline):
        """(exit status, stdout, stderr, seconds from the SIGTERM to the exit)."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        script = self.SCRIPT.format(deadline=deadline)
        with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) as process:
            self.assertEqual(process.stdout.readline(), "waiting\n")
            sent = time.monotonic()
            process.send_signal(signal.SIGTERM)
            stdout, stderr = process.communicate(timeout=60)
            return process.returncode, stdout, stderr, time.monotonic() - sent

    def test_the_process_ends_with_the_signals_status_at_its_deadline(self):
        code, stdout, stderr, seconds = self.run_and_terminate(
            "signals.set_stop_deadline(signal.SIGTERM, 1.5)\n")
        self.assertEqual(code, 138, stderr)
        self.assertEqual(stdout, "")
        self.assertIn("SIGTERM received 1.5 s ago and this process has not stopped", stderr)
        # Not before its deadline; before the 10 s wait would end (a busy machine's margin).
        self.assertGreaterEqual(seconds, 1.5)
        self.assertLess(seconds, 8)

    def test_without_a_deadline_the_wait_goes_on(self):
        code, stdout, _, seconds = self.run_and_terminate("")
        self.assertEqual((code, stdout), (0, "the wait ended\n"))
        self.assertGreater(seconds, 8)


class DurationTest(unittest.TestCase):

    def test_seconds_minutes_and_hours(self):
        self.assertEqual(cli.duration(12.34), "12.3 s")
        self.assertEqual(cli.duration(245), "4 min 05 s")
        self.assertEqual(cli.duration(7384), "2 h 03 min 04 s")
        self.assertEqual(cli.duration(59.96), "60.0 s")  # under a minute stays in seconds


class ProgressBarTest(unittest.TestCase):

    def bar_lines(self, seconds_per_image):
        """What a log gets from 20 images' bar, each image taking `seconds_per_image`."""
        stream, now = io.StringIO(), [0.0]
        bar = ProgressBar(20, label="images", stream=stream, clock=lambda: now[0])
        for _ in range(20):
            now[0] += seconds_per_image
            bar.update(1)
        bar.close()
        return stream.getvalue().splitlines()

    def test_a_log_gets_a_line_every_tenth_of_slow_work(self):
        lines = self.bar_lines(ProgressBar.LOG_INTERVAL_SECS / 2)  # a tenth takes the interval
        self.assertEqual(len(lines), 10)
        self.assertTrue(lines[-1].startswith("[" + "#" * ProgressBar.WIDTH + "] 20/20 images"),
                        lines[-1])

    def test_a_log_gets_one_line_for_quick_work(self):
        lines = self.bar_lines(0.01)
        self.assertEqual(len(lines), 1)
        self.assertIn("20/20 images (100.0 images/sec)", lines[0])


if __name__ == "__main__":
    absltest.main()
