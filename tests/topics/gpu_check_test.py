"""The one GPU check, shrunk to run on this machine: every part runs and the report holds the
test counts, the demo's precision and the benchmark (the GPU tests skip here)."""

import json
import os
import subprocess
import sys
import unittest

from absl.testing import absltest

from tests import testing_utils


class GpuCheckTest(unittest.TestCase):

    def test_a_tiny_check_writes_one_report_and_one_log(self):
        out = testing_utils.temp_dir("gpu_check")
        data_dir = testing_utils.tiny_demo_data(train=8, validation=4)
        completed = subprocess.run(
            [sys.executable, "-m", "tools.gpu_check", f"--out={out}", "--budget_secs=600",
             "--test_module", "tests.topics.gpu_test",
             "--precisions=fp32", "--report_name=gpu-test.json",
             f"--demo_flags=--data_dir={data_dir} --dataset=demo --max_steps=2 "
             "--image_size=75 --depth_multiplier=0.1 --batch_size=2",
             "--bench_flags=--image_size=75 --batch_size=2 --warmup=1 --steps=1 --repeats=1 "
             "--depth_multiplier=0.1 --pipeline_images=8 --keep_going "
             "--skip=matmul_peak_bf16,ours_bf16,keras_bf16,torch_bf16,keras,ours_xla,"
             "ours_1_tower,pipeline_1_thread"],
            capture_output=True, text=True, timeout=620, check=False,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        with open(os.path.join(out, "gpu-test.json"), encoding="utf-8") as handle:
            report = json.load(handle)
        self.assertEqual(report["gpu_tests"]["failed"], 0)
        self.assertEqual(report["gpu_tests"]["passed"], 0)  # no GPU here: every test skipped
        self.assertGreater(report["gpu_tests"]["skipped"], 5)
        precision = report["demo_precision_at_1"]["fp32"]
        self.assertTrue(0.0 <= precision <= 1.0, precision)
        self.assertIsInstance(report["ours_images_per_sec"], float)
        self.assertIsInstance(report["matmul_peak_gflops"], float)
        self.assertTrue(report["complete"], report.get("not_measured"))
        self.assertLess(report["check"]["timings"]["total_secs"], 600)
        self.assertTrue(os.path.exists(os.path.join(out, "gpu-test.png")))
        traces = [name for name in os.listdir(out) if name.startswith("step_trace_")]
        self.assertEqual(len(traces), 1)
        self.assertIn("Conv2D", json.dumps(report["profile"]["top_ops_ms"]))
        with open(os.path.join(out, "gpu_check.log"), encoding="utf-8") as handle:
            log = handle.read()
        for section in ("gpu tests", "demo fp32", "benchmark"):
            self.assertIn(f"===== {section} =====", log)
        self.assertLessEqual(len(os.listdir(out)), 8)  # what some GPU machines hand back


if __name__ == "__main__":
    absltest.main()
