"""The throughput benchmark runs on a tiny configuration and writes every key (not timed)."""

import json
import os
import subprocess
import sys
import unittest

from absl import flags
from absl.testing import absltest

from bench import throughput
from inception.parallel import hardware
from tests import testing_utils

KEYS = ("ours_images_per_sec", "ours_1_tower_images_per_sec", "keras_images_per_sec",
        "speedup_vs_keras", "ours_bf16_images_per_sec", "speedup_vs_keras_bf16",
        "keras_bf16_images_per_sec", "speedup_bf16_vs_keras_bf16", "matmul_peak_bf16_gflops",
        "mfu_bf16", "torch_bf16_images_per_sec", "speedup_bf16_vs_torch_bf16",
        "ours_fp16_images_per_sec", "speedup_vs_keras_fp16",
        "keras_fp16_images_per_sec", "speedup_fp16_vs_keras_fp16", "matmul_peak_fp16_gflops",
        "mfu_fp16", "ours_variables_on_cpu_images_per_sec",
        "ours_variables_on_gpu_images_per_sec", "ours_unstaged_images_per_sec",
        "ours_xla_images_per_sec", "ours_split_gpu_images_per_sec", "split_gpu_overhead",
        "ours_replicated_images_per_sec", "speedup_replicated_vs_split_gpu",
        "train_gflops_per_image", "matmul_peak_gflops", "mfu", "tower_overhead",
        "pipeline_images_per_sec", "pipeline_images_per_sec_per_core", "pipeline_headroom",
        "gpu_tests", "demo_precision_at_1")
# Measured only where there is a GPU (this test hides the machine's GPUs: tests/BUILD).
GPU_ONLY = ("ours_fp16_images_per_sec", "speedup_vs_keras_fp16", "keras_fp16_images_per_sec",
            "speedup_fp16_vs_keras_fp16", "matmul_peak_fp16_gflops", "mfu_fp16",
            "ours_variables_on_cpu_images_per_sec", "ours_variables_on_gpu_images_per_sec",
            "ours_unstaged_images_per_sec", "ours_split_gpu_images_per_sec",
            "split_gpu_overhead", "ours_replicated_images_per_sec",
            "speedup_replicated_vs_split_gpu")
BF16 = ("ours_bf16_images_per_sec", "speedup_vs_keras_bf16", "keras_bf16_images_per_sec",
        "speedup_bf16_vs_keras_bf16", "matmul_peak_bf16_gflops", "mfu_bf16")
# Filled by tools/gpu_check.py, or measured only where torch can be imported (not in this
# project's environment).
ELSEWHERE = ("gpu_tests", "demo_precision_at_1", "torch_bf16_images_per_sec",
             "speedup_bf16_vs_torch_bf16")


def run_benchmark(output, *args):
    return subprocess.run(
        [sys.executable, "-m", "bench.throughput", f"--output_json={output}", *args],
        capture_output=True, text=True, timeout=400, check=False,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


class ThroughputBenchmarkTest(unittest.TestCase):

    def test_tiny_run_writes_every_key_and_a_plot(self):
        output = os.path.join(testing_utils.temp_dir("bench"), "report.json")
        # Every measurement but three that only change a setting of one kind measured here
        # (ours_xla, keras_bf16, pipeline_1_thread): their keys must still be there, null.
        # Overlapped, as on GPU machines: each measurement still reports its own result.
        completed = run_benchmark(output, "--image_size=75", "--batch_size=2", "--warmup=1",
                                  "--steps=1", "--repeats=2", "--pipeline_images=8",
                                  "--depth_multiplier=0.1", "--overlap=on",
                                  "--skip=ours_xla,keras_bf16,pipeline_1_thread")
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        with open(output, encoding="utf-8") as handle:
            report = json.load(handle)
        bf16 = hardware.cpu_supports_bf16()
        skipped = ("ours_xla_images_per_sec", "keras_bf16_images_per_sec",
                   "speedup_bf16_vs_keras_bf16", "pipeline_images_per_sec_per_core")
        for key in KEYS:
            self.assertIn(key, report)
            if key in GPU_ONLY + ELSEWHERE + skipped or (key in BF16 and not bf16):
                self.assertIsNone(report[key], key)
            else:
                self.assertIsInstance(report[key], float, key)
        self.assertGreater(report["ours_images_per_sec"], 0.0)
        self.assertEqual(report["notes"]["ours_xla"], "--skip")
        measured = ["matmul_peak", "ours", "ours_1_tower", "keras", "pipeline"] + (
            ["matmul_peak_bf16", "ours_bf16"] if bf16 else [])
        self.assertEqual(sorted(report["peak_memory_mb"]), sorted(measured))
        # Each held the machine alone, from before its timed part to its end.
        held = sorted(report["device_held"].values())
        self.assertEqual(len(held), len(measured))
        for (_, end), (next_start, _) in zip(held, held[1:]):
            self.assertLessEqual(end, next_start)
        self.assertEqual(len(report["rounds"]["ours"]), 2)
        self.assertEqual(report["notes"]["ours_split_gpu"], "GPU only")
        self.assertEqual(report["notes"]["ours_fp16"], "fp16 is for GPUs")
        if bf16:  # torch is not in this project's environment: a note, not a number
            self.assertIn("not importable", report["notes"]["torch_bf16"])
        self.assertIn("cpu", report["machine"])
        self.assertEqual(report["errors"], {})
        self.assertEqual(report["not_measured"], [])
        self.assertTrue(report["complete"])
        self.assertEqual(report["matmul_peak_device"], "cpu")
        self.assertEqual(report["settings"]["towers"], 2)
        self.assertEqual(report["variable_device"], "/cpu:0")
        self.assertIn("virtual CPU", report["placement"])
        with open(output[:-len(".json")] + ".png", "rb") as handle:
            self.assertEqual(handle.read(8), b"\x89PNG\r\n\x1a\n")

    def test_a_failed_measurement_is_named_and_keep_going_records_it(self):
        output = os.path.join(testing_utils.temp_dir("bench_fail"), "report.json")
        # Inception v3 cannot shrink a 10-pixel image through its stride-2 layers: the graph
        # build fails inside the measurement process, after the matmul peak was measured.
        args = ["--image_size=10", "--batch_size=2", "--warmup=1", "--steps=1", "--repeats=1",
                "--skip=matmul_peak_bf16,ours_bf16,keras_bf16,torch_bf16,keras,ours_xla,"
                "ours_1_tower,pipeline,pipeline_1_thread"]
        failed = run_benchmark(output, *args)
        self.assertEqual(failed.returncode, 1)
        last_line = failed.stderr.strip().splitlines()[-1]
        self.assertIn("measurement ours failed", last_line)
        self.assertIn("Error", last_line)
        with open(output, encoding="utf-8") as handle:
            partial = json.load(handle)
        self.assertFalse(partial["complete"])
        self.assertIsInstance(partial["matmul_peak_gflops"], float)
        self.assertIsNone(partial["ours_images_per_sec"])

        kept = run_benchmark(output, *args, "--keep_going")
        self.assertEqual(kept.returncode, 0, kept.stderr[-3000:])
        with open(output, encoding="utf-8") as handle:
            report = json.load(handle)
        self.assertTrue(report["complete"])
        self.assertIsInstance(report["matmul_peak_gflops"], float)
        self.assertIsNone(report["ours_images_per_sec"])
        self.assertEqual(sorted(report["errors"]), ["ours"])
        self.assertIn("Error", report["errors"]["ours"])

    def test_a_deadline_leaves_the_rest_named_and_the_report_incomplete(self):
        output = os.path.join(testing_utils.temp_dir("bench_deadline"), "report.json")
        completed = run_benchmark(output, "--deadline_secs=0.001", "--skip=matmul_peak_bf16")
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        with open(output, encoding="utf-8") as handle:
            report = json.load(handle)
        self.assertFalse(report["complete"])
        # The first measurement may start within the first millisecond; none after it does.
        self.assertIn("ours", report["not_measured"])
        self.assertIn("pipeline", report["not_measured"])
        self.assertIsNone(report["ours_images_per_sec"])
        self.assertIn("not measured (--deadline_secs)", completed.stdout)

    def test_an_unknown_skip_name_is_refused_before_measuring(self):
        output = os.path.join(testing_utils.temp_dir("bench_skip"), "report.json")
        completed = run_benchmark(output, "--skip=keras,kerass")
        self.assertEqual(completed.returncode, 1)
        last_line = completed.stderr.strip().splitlines()[-1]
        self.assertTrue(last_line.startswith("error: --skip=kerass: no such measurement"),
                        last_line)
        self.assertIn("keras_bf16", last_line)
        self.assertFalse(os.path.exists(output))


class ReportArithmeticTest(unittest.TestCase):
    """build_report on hand-made measurements, against numbers worked out by hand."""

    def setUp(self):
        flags.FLAGS(["bench_test", "--batch_size=256", "--image_size=299"])

    def test_ratios_overheads_and_utilization(self):
        def rate(value):
            return {"images_per_sec": value, "peak_memory_mb": 1.0}
        results = {
            "ours": {**rate(2000.0), "train_flops_per_image": 34.9e9, "placement": "1 tower"},
            "ours_bf16": rate(3000.0), "keras": rate(1600.0), "keras_bf16": rate(2400.0),
            "torch_bf16": rate(2500.0), "ours_split_gpu": rate(1900.0),
            "matmul_peak": {"gflops": 349000.0, "device": "gpu (tf32)", "peak_memory_mb": 1.0},
            "pipeline": rate(6000.0),
        }
        report = throughput.build_report(results, {"gpus": 1})
        self.assertAlmostEqual(report["speedup_vs_keras"], 1.25)
        self.assertAlmostEqual(report["speedup_bf16_vs_keras_bf16"], 1.25)
        self.assertAlmostEqual(report["speedup_bf16_vs_torch_bf16"], 1.2)
        self.assertAlmostEqual(report["split_gpu_overhead"], 0.05)
        self.assertAlmostEqual(report["mfu"], 0.2)  # 2000 x 34.9 GFLOP / 349 TFLOP/s
        self.assertAlmostEqual(report["pipeline_headroom"], 2.0)  # against bf16's 3000
        self.assertEqual(report["settings"]["per_gpu_batch"], 256)
        self.assertIsNone(report["tower_overhead"])


if __name__ == "__main__":
    absltest.main()
