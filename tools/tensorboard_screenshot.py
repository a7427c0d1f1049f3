"""Screenshots of TensorBoard's pages for a training directory, taken in a real headless browser
(Chromium), so what a user sees first can be checked and shown in the README.

    bin/bazel run //tools:tensorboard_screenshot -- --logdir=/tmp/inception_train \\
        --out_dir=/tmp/shots

Starts TensorBoard from this environment on a free local port, waits until it has loaded the
runs, then saves one PNG per page (Time Series, which TensorBoard opens on, Scalars, Custom
Scalars, the confusion matrix on Images, Text, and Profile: a --profile_steps trace) and stops
it. Needs a
Chromium or Chrome binary (`apt install chromium` on Debian).
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_string("logdir", "/tmp/inception_train", "The training directory to show.")
flags.DEFINE_string("out_dir", "", "Where the PNGs go (required).")
flags.DEFINE_integer("width", 1400, "Browser window width in pixels.")
flags.DEFINE_integer("height", 1000, "Browser window height in pixels.")
flags.DEFINE_float("render_secs", 20, "How long the page may load and draw before the shot.")

PAGES = {"time_series": "#timeseries", "scalars": "#scalars", "custom_scalars": "#custom_scalars",
         "confusion_matrix": "#images&tagFilter=confusion_matrix", "text": "#text",
         "profile": "#profile"}
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SERVER_START_SECS = 120


def find_browser():
    """The path of a Chromium-family browser, or None."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port():
    """A TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_tensorboard(logdir, port):
    """A TensorBoard process on 127.0.0.1:`port`, answering; raises RuntimeError otherwise."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", f"--logdir={logdir}", "--host=127.0.0.1",
         f"--port={port}", "--load_fast=false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    deadline = time.time() + SERVER_START_SECS
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"TensorBoard exited: {server.stderr.read().decode()[-1000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=5) as page:
                if page.read().strip() not in (b"", b"[]"):
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    server.kill()
    raise RuntimeError(f"TensorBoard did not load {logdir} within {SERVER_START_SECS} s")


def screenshot(browser, url, path, width, height, render_secs):
    """Saves the page at `url` as the PNG `path`, after `render_secs` of page time."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={profile}", f"--window-size={width},{height}",
             f"--virtual-time-budget={int(render_secs * 1000)}", f"--screenshot={path}", url],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=render_secs + 120)


def main(argv):
    del argv
    if not FLAGS.out_dir:
        sys.exit("error: --out_dir is required: the directory the screenshots go to.")
    browser = find_browser()
    if browser is None:
        sys.exit(f"error: no browser found (tried {', '.join(BROWSERS)}); install one, e.g. "
                 "`apt install chromium`.")
    os.makedirs(FLAGS.out_dir, exist_ok=True)
    port = free_port()
    server = start_tensorboard(FLAGS.logdir, port)
    try:
        for name, fragment in PAGES.items():
            path = os.path.join(FLAGS.out_dir, f"tensorboard_{name}.png")
            screenshot(browser, f"http://127.0.0.1:{port}/{fragment}", path, FLAGS.width,
                       FLAGS.height, FLAGS.render_secs)
            print(f"wrote {path}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    app.run(main)
