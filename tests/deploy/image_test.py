"""The machine image's contents (the Dockerfile's COPY lines) and its entry point, bin/inception:
from a fresh directory holding only those files, with the image's kind of environment (its own
Python environment named by INCEPTION_VENV, the demo's cache under a temporary directory, a
`bazel` that fails if anything calls it), the trainer trains, logs its start-up line and points
the user at the launcher's own commands."""

import os
import re
import shutil
import subprocess
import sys
import unittest

from absl.testing import absltest

from tests import testing_utils

# The checkout this file lies in, through Bazel's runfiles links: the image is built from the
# repository, not from the test's declared inputs.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
DATA = testing_utils.DemoData(train=24, validation=10)
RUN_TIMEOUT_SECS = 600  # a bound on one tiny training start, not a speed target
NO_BAZEL = "#!/bin/sh\necho \"bazel was called: $*\" >&2\nexit 97\n"


def image_sources():
    """The repository paths the Dockerfile copies into the image."""
    with open(os.path.join(REPO, "Dockerfile"), encoding="utf-8") as handle:
        return [match.group(1) for match in re.finditer(r"^COPY (\S+) /opt/inception/\S*$",
                                                        handle.read(), re.MULTILINE)]


def fresh_image_directory():
    """A new directory holding only what the image holds of this repository."""
    root = testing_utils.temp_dir("image")
    for source in image_sources():
        path, target = os.path.join(REPO, source), os.path.join(root, source)
        if os.path.isdir(path):
            shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__", "BUILD"))
        else:
            shutil.copy(path, target)
    return root


def image_environment(work):
    """The environment a container of the image gives its programs, with `bazel` poisoned."""
    poisoned = os.path.join(work, "poisoned_bin")
    os.makedirs(poisoned)
    with open(os.path.join(poisoned, "bazel"), "w", encoding="utf-8") as handle:
        handle.write(NO_BAZEL)
    os.chmod(os.path.join(poisoned, "bazel"), 0o755)
    return {"PATH": f"{poisoned}:/usr/local/bin:/usr/bin:/bin", "HOME": work,
            "INCEPTION_VENV": sys.prefix, "INCEPTION_CACHE_DIR": os.path.join(work, "cache"),
            "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}


class ImageTest(unittest.TestCase):

    def test_the_image_copies_the_programs_and_their_requirements(self):
        self.assertEqual(sorted(image_sources()),
                         ["bin", "common", "data", "inception", "requirements.txt"])

    def test_the_launcher_trains_from_a_fresh_directory_without_bazel(self):
        root, work = fresh_image_directory(), testing_utils.temp_dir("image_work")
        env = image_environment(work)
        train_dir = os.path.join(work, "run")
        done = subprocess.run(
            [os.path.join(root, "bin", "inception"), "train", "--dataset=demo",
             f"--data_dir={DATA.path}", f"--train_dir={train_dir}",
             *testing_utils.tiny_flags(), "--batch_size=4", "--max_steps=2",
             "--eval_every_n_steps=0", "--log_every_n_steps=1"],
            cwd=root, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECS,
            check=False)
        output = done.stdout + done.stderr
        self.assertEqual(done.returncode, 0, output[-3000:])
        self.assertNotIn("bazel was called", output)
        self.assertRegex(output, r"(?m)^start-up: [\d.]+ s to the end of the first step \("
                                 r"interpreter and flags")
        self.assertIn(f"bin/inception eval --checkpoint_dir={train_dir} --run_once", output)
        self.assertTrue(os.path.exists(os.path.join(train_dir, "model.ckpt-2.index")))

    def test_an_unknown_program_is_one_line_listing_the_programs(self):
        done = subprocess.run([os.path.join(REPO, "bin", "inception"), "trian"],
                              env=image_environment(testing_utils.temp_dir("image_work")),
                              capture_output=True, text=True, timeout=60, check=False)
        self.assertEqual(done.returncode, 2)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        self.assertIn("one of train eval export classify input_service (got 'trian')",
                      done.stderr)


if __name__ == "__main__":
    absltest.main()
