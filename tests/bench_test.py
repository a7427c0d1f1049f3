"""The throughput benchmark runs on a tiny configuration and writes every key (not timed)."""

import json
import os
import subprocess
import sys
import unittest

from inception import devices
from tests import testing_utils

KEYS = ("ours_images_per_sec", "ours_1_tower_images_per_sec", "keras_images_per_sec",
        "speedup_vs_keras", "ours_bf16_images_per_sec", "speedup_vs_keras_bf16",
        "keras_bf16_images_per_sec", "speedup_bf16_vs_keras_bf16", "matmul_peak_bf16_gflops",
        "mfu_bf16", "ours_fp16_images_per_sec", "speedup_vs_keras_fp16",
        "keras_fp16_images_per_sec", "speedup_fp16_vs_keras_fp16", "matmul_peak_fp16_gflops",
        "mfu_fp16", "ours_variables_on_gpu_images_per_sec", "ours_xla_images_per_sec",
        "train_gflops_per_image", "matmul_peak_gflops", "mfu", "tower_overhead",
        "pipeline_images_per_sec", "pipeline_images_per_sec_per_core", "pipeline_headroom")
GPU_ONLY_MARKS = ("fp16", "on_gpu")


class ThroughputBenchmarkTest(unittest.TestCase):

    def test_tiny_run_writes_every_key_and_a_plot(self):
        output = os.path.join(testing_utils.temp_dir("bench"), "report.json")
        completed = subprocess.run(
            [sys.executable, "-m", "bench.throughput", f"--output_json={output}",
             "--image_size=75", "--batch_size=2", "--warmup=1", "--steps=1", "--repeats=2",
             "--pipeline_images=8", "--depth_multiplier=0.1"],
            capture_output=True, text=True, timeout=1200, check=False,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        with open(output, encoding="utf-8") as handle:
            report = json.load(handle)
        for key in KEYS:
            if ("bf16" in key and not devices.cpu_supports_bf16()) or \
                    any(mark in key for mark in GPU_ONLY_MARKS):
                self.assertIsNone(report[key], key)  # measured only on GPUs (bf16: CPUs with it)
            else:
                self.assertIsInstance(report[key], float, key)
        self.assertGreater(report["ours_images_per_sec"], 0.0)
        self.assertAlmostEqual(report["speedup_vs_keras"],
                               report["ours_images_per_sec"] / report["keras_images_per_sec"])
        bf16 = ["matmul_peak_bf16", "ours_bf16", "keras_bf16"]
        measured = ["matmul_peak", "ours", "ours_1_tower", "ours_xla", "keras",
                    "pipeline_1_thread", "pipeline"] + (bf16 if devices.cpu_supports_bf16()
                                                        else [])
        self.assertEqual(sorted(report["peak_memory_mb"]), sorted(measured))
        self.assertEqual(len(report["rounds"]["ours"]), 2)
        self.assertIn("cpu", report["machine"])
        self.assertEqual(report["errors"], {})
        self.assertTrue(report["complete"])
        self.assertEqual(report["matmul_peak_device"], "cpu")
        if devices.cpu_supports_bf16():
            self.assertAlmostEqual(report["speedup_bf16_vs_keras_bf16"],
                                   report["ours_bf16_images_per_sec"]
                                   / report["keras_bf16_images_per_sec"])
            self.assertAlmostEqual(report["mfu_bf16"],
                                   report["ours_bf16_images_per_sec"]
                                   * report["train_gflops_per_image"]
                                   / report["matmul_peak_bf16_gflops"])
        self.assertIn("virtual CPU", report["placement"])
        with open(output[:-len(".json")] + ".png", "rb") as handle:
            self.assertEqual(handle.read(8), b"\x89PNG\r\n\x1a\n")

    def test_a_failed_measurement_is_named_and_keep_going_records_it(self):
        output = os.path.join(testing_utils.temp_dir("bench_fail"), "report.json")
        # Inception v3 cannot shrink a 10-pixel image through its stride-2 layers: the graph
        # build fails inside the measurement process, after the matmul peak was measured.
        command = [sys.executable, "-m", "bench.throughput", f"--output_json={output}",
                   "--image_size=10", "--batch_size=2", "--warmup=1", "--steps=1",
                   "--repeats=1", "--skip=matmul_peak_bf16,ours_1_tower,ours_bf16,ours_xla,"
                   "keras,keras_bf16,pipeline_1_thread,pipeline"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        failed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                                check=False, env=env)
        self.assertEqual(failed.returncode, 1)
        last_line = failed.stderr.strip().splitlines()[-1]
        self.assertIn("measurement ours failed", last_line)
        self.assertIn("Error", last_line)
        with open(output, encoding="utf-8") as handle:
            partial = json.load(handle)
        self.assertFalse(partial["complete"])
        self.assertIsInstance(partial["matmul_peak_gflops"], float)
        self.assertIsNone(partial["ours_images_per_sec"])

        kept = subprocess.run(command + ["--keep_going"], capture_output=True, text=True,
                              timeout=600, check=False, env=env)
        self.assertEqual(kept.returncode, 0, kept.stderr[-3000:])
        with open(output, encoding="utf-8") as handle:
            report = json.load(handle)
        self.assertTrue(report["complete"])
        self.assertIsInstance(report["matmul_peak_gflops"], float)
        self.assertIsNone(report["ours_images_per_sec"])
        self.assertEqual(sorted(report["errors"]), ["ours"])
        self.assertIn("Error", report["errors"]["ours"])

    def test_an_unknown_skip_name_is_refused_before_measuring(self):
        output = os.path.join(testing_utils.temp_dir("bench_skip"), "report.json")
        completed = subprocess.run(
            [sys.executable, "-m", "bench.throughput", f"--output_json={output}",
             "--skip=keras,kerass"], capture_output=True, text=True, timeout=300, check=False,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        self.assertEqual(completed.returncode, 1)
        last_line = completed.stderr.strip().splitlines()[-1]
        self.assertTrue(last_line.startswith("error: --skip=kerass: no such measurement"),
                        last_line)
        self.assertIn("keras_bf16", last_line)
        self.assertFalse(os.path.exists(output))


if __name__ == "__main__":
    unittest.main()
