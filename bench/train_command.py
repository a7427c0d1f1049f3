"""The training command as a user types it, for the benchmarks that time or score whole runs
(profile_cost.py, validation_cost.py, recipe_options.py): `bin/bazel run //inception:train`
from the repository root, built once first so that no measured run pays for the build."""

import subprocess
import sys
import time

COMMAND = ("bin/bazel", "run", "//inception:train", "--")


def build():
    """Builds the training command (quietly; a failed build raises CalledProcessError)."""
    subprocess.run(["bin/bazel", "build", "//inception:train"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(flags):
    """(its output, stdout and stderr together; its wall seconds) of one run of the command
    with `flags`; a failed run ends the benchmark with the output's tail."""
    started = time.monotonic()
    done = subprocess.run([*COMMAND, *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        fail(flags, done.stdout)
    return done.stdout, seconds


def fail(flags, output):
    """Ends the benchmark: the run with `flags` failed; the tail of its `output` says why."""
    sys.exit(f"error: the run with {' '.join(flags)} failed:\n{output[-3000:]}")
