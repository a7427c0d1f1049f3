"""A real TensorBoard server on 127.0.0.1 reads a short run's training and eval scalars, and
the profile plugin lists the trace --profile_steps wrote (a trace that changes no loss)."""

import gzip
import json
import os
import socket
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.driver import launch
from inception.validation import job
from tests import testing_utils

SERVER_START_TIMEOUT = 120
DATA_TIMEOUT = 90
PROFILED = (2, 3)  # steps traced by --profile_steps


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":  # the profile plugin's answers
            body = gzip.decompress(body)
        return json.loads(body.decode())


class TensorBoardTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        data_dir = testing_utils.tiny_demo_data(train=16, validation=6)
        cls.logdir = testing_utils.temp_dir("tensorboard")
        cls.log_lines = cls.train(data_dir, cls.logdir, profile_steps=PROFILED)
        # Its losses only are read, and validating changes none (in_training_test).
        cls.unprofiled_log_lines = cls.train(data_dir, testing_utils.temp_dir("unprofiled"),
                                             eval_every_n_steps=0)
        cls.results = job.run_evaluation(
            settings_lib.EvalSettings(checkpoint_dir=cls.logdir, run_once=True, batch_size=6),
            log=lambda line: None)
        cls.port = free_port()
        cls.base = f"http://127.0.0.1:{cls.port}"
        cls.server = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", f"--logdir={cls.logdir}",
             "--host=127.0.0.1", f"--port={cls.port}", "--load_fast=false",
             "--reload_interval=1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        try:
            cls.wait_for_server()
        except Exception:
            cls.stop_server()
            raise

    @staticmethod
    def train(data_dir, train_dir, **options):
        """Three steps of a tiny run at a fixed seed, deterministic; its log lines."""
        lines = []
        launch.train(settings_lib.train_settings(
            train_dir=train_dir, data_dir=data_dir, dataset="demo", max_steps=3,
            **testing_utils.tiny_model(aux_head=True), batch_size=4, num_towers=2,
            save_summaries_steps=1, log_every_n_steps=1, seed=1, deterministic=True,
            **options), log=lines.append)
        return lines

    @classmethod
    def wait_for_server(cls):
        deadline = time.time() + SERVER_START_TIMEOUT
        while time.time() < deadline:
            if cls.server.poll() is not None:
                output = cls.server.stderr.read().decode()[-2000:]
                raise RuntimeError(f"TensorBoard exited: {output}")
            try:
                get_json(cls.base + "/data/runs")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        raise TimeoutError(f"TensorBoard did not answer within {SERVER_START_TIMEOUT} s")

    @classmethod
    def stop_server(cls):
        cls.server.terminate()
        try:
            cls.server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            cls.server.kill()
            cls.server.wait(timeout=20)
        cls.server.stderr.close()

    @classmethod
    def tearDownClass(cls):
        cls.stop_server()

    def scalars(self, run, tag):
        """[(step, value), ...] from the scalars plugin, waiting until the data is loaded."""
        query = urllib.parse.urlencode({"run": run, "tag": tag})
        deadline = time.time() + DATA_TIMEOUT
        while True:
            try:
                rows = get_json(f"{self.base}/data/plugin/scalars/scalars?{query}")
                if rows:
                    return [(int(step), value) for _, step, value in rows]
            except urllib.error.HTTPError:
                pass
            if time.time() > deadline:
                self.fail(f"TensorBoard has no {run}/{tag} after {DATA_TIMEOUT} s")
            time.sleep(0.5)

    def test_training_and_eval_runs_side_by_side(self):
        mean_loss = self.scalars(".", "loss/mean_loss")
        self.assertEqual([step for step, _ in mean_loss], [1, 2, 3])
        tower = self.scalars(".", "loss/tower_1/total_loss")
        self.assertEqual(len(tower), 3)
        tower0 = dict(self.scalars(".", "loss/tower_0/total_loss"))
        for step, value in mean_loss:
            # float32 summaries (7 digits) of losses of order 1: 4 places is their rounding.
            self.assertAlmostEqual(value, (tower0[step] + dict(tower)[step]) / 2, places=4)
        precision = self.scalars("eval_validation", "metrics/precision_at_1")
        self.assertEqual(precision[0][0], 3)
        self.assertAlmostEqual(precision[0][1], self.results[0].precision_at_1, places=5)
        runs = get_json(self.base + "/data/runs")
        self.assertIn(".", runs)
        self.assertIn("eval_validation", runs)
        training_precision = self.scalars(".", "metrics/precision_at_1")
        self.assertEqual([step for step, _ in training_precision], [1, 2, 3])
        self.assertTrue(all(0 <= value <= 1 for _, value in training_precision))

    def test_the_graphs_tab_has_the_graph_written_once(self):
        self.scalars(".", "loss/mean_loss")  # waits until the run is loaded
        graphs = get_json(self.base + "/data/plugin/graphs/info")
        self.assertTrue(graphs["."]["run_graph"], graphs)
        kinds = [tf.compat.v1.Event.FromString(record.numpy()).WhichOneof("what")
                 for name in tf.io.gfile.glob(os.path.join(self.logdir, "events.out.*"))
                 for record in tf.data.TFRecordDataset(name)]
        self.assertEqual(kinds.count("graph_def"), 1)
        self.assertNotIn("meta_graph_def", kinds)  # the same graph again, twice the file

    def test_custom_scalars_layout_and_per_class_results(self):
        self.scalars(".", "loss/mean_loss")  # waits until the run is loaded
        layout = get_json(self.base + "/data/plugin/custom_scalars/layout")
        charts = {chart["title"]: chart["multiline"]["tag"]
                  for category in layout["category"] for chart in category["chart"]}
        self.assertEqual(charts["mean_loss and each tower's total_loss"],
                         ["^loss/mean_loss$", r"^loss/tower_\d+/total_loss$"])
        self.assertIn("^metrics/precision_at_1$", charts[
            "precision@1: training batches (run .) vs validation (eval_validation)"])
        self.wait_for_tag("images", "eval_validation", "metrics/confusion_matrix")
        self.wait_for_tag("text", "eval_validation", "metrics/per_class")

    def test_profile_plugin_lists_the_traced_steps(self):
        deadline = time.time() + DATA_TIMEOUT
        while not (runs := get_json(f"{self.base}/data/plugin/profile/runs")):
            if time.time() > deadline:
                self.fail(f"the profile plugin lists no trace after {DATA_TIMEOUT} s")
            time.sleep(0.5)
        self.assertEqual(len(runs), 1, runs)
        query = urllib.parse.urlencode({"run": runs[0]})
        tools = get_json(f"{self.base}/data/plugin/profile/run_tools?{query}")
        self.assertTrue({"overview_page", "input_pipeline_analyzer", "framework_op_stats"}
                        <= set(tools), tools)
        self.assertTrue(any(tool.startswith("trace_viewer") for tool in tools), tools)
        host = get_json(f"{self.base}/data/plugin/profile/hosts?{query}&tag=overview_page")
        query = urllib.parse.urlencode({"run": runs[0], "tag": "input_pipeline_analyzer",
                                        "host": host[0]["hostname"]})
        tables = get_json(f"{self.base}/data/plugin/profile/data?{query}")
        steps = [row["c"][0]["v"] for table in tables for row in table.get("rows", [])
                 if table.get("cols") and table["cols"][0]["id"] == "stepnum"]
        # Each step is named by its Trace and number ("train 2").
        self.assertEqual(sorted(int(step.split()[-1]) for step in steps), list(PROFILED))
        self.assertIn(f"profiling steps {PROFILED[0]} to {PROFILED[1]} into "
                      f"{os.path.join(self.logdir, 'plugins', 'profile')} ...", self.log_lines)

    def test_the_trace_changes_no_loss(self):
        def losses(lines):
            return [line.split(": ", 1)[1].split(" (")[0] for line in lines
                    if ": step " in line and "loss = " in line]
        self.assertEqual(len(losses(self.log_lines)), 3)
        self.assertEqual(losses(self.log_lines), losses(self.unprofiled_log_lines))

    def wait_for_tag(self, plugin, run, tag):
        deadline = time.time() + DATA_TIMEOUT
        while tag not in get_json(f"{self.base}/data/plugin/{plugin}/tags").get(run, {}):
            if time.time() > deadline:
                self.fail(f"TensorBoard's {plugin} plugin has no {run}/{tag}")
            time.sleep(0.5)


if __name__ == "__main__":
    absltest.main()
