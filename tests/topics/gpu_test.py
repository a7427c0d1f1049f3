"""The GPU paths on a real GPU: towers placed on GPUs, two towers on one GPU split into virtual
GPUs against one tower, bf16 and fp16 steps, variables on the GPU, XLA, prefetched inputs, the
layout optimizer, and short trainings in each precision.

Every test is reported as skipped on a machine without a GPU. The process uses the first
visible GPU only, split into two virtual GPUs before TensorFlow creates any device (the order
devices.configure_gpus explains). INCEPTION_GPU_TEST_DEVICE=cpu runs the same tests on virtual
CPU devices, with the GPU-only assertions left out: a check of this file on machines without a
GPU, not a substitute for running it on one.
"""

import os
import subprocess
import sys

from inception.driver import startup

# Every GPU the machine shows this process, for the NCCL check's own process (below).
ALL_GPUS = os.environ.get("CUDA_VISIBLE_DEVICES")

# Before TensorFlow looks at its devices: the first visible GPU only, and the flag that lets
# XLA cluster CPU ops (for INCEPTION_GPU_TEST_DEVICE=cpu; GPUs need none).
os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
startup.allow_xla_on_cpu()

import unittest  # noqa: E402  pylint: disable=wrong-import-position

import numpy as np  # noqa: E402  pylint: disable=wrong-import-position
import tensorflow as tf  # noqa: E402  pylint: disable=wrong-import-position
from absl.testing import absltest  # noqa: E402  pylint: disable=wrong-import-position

from common import machine  # noqa: E402  pylint: disable=wrong-import-position
from inception.config import settings as settings_lib  # noqa: E402  pylint: disable=wrong-import-position
from inception.driver import launch  # noqa: E402  pylint: disable=wrong-import-position
from inception.parallel import devices  # noqa: E402  pylint: disable=wrong-import-position
from inception.parallel import hardware  # noqa: E402  pylint: disable=wrong-import-position
from tests import testing_utils  # noqa: E402  pylint: disable=wrong-import-position

tf1 = tf.compat.v1
ON_CPU = os.environ.get("INCEPTION_GPU_TEST_DEVICE") == "cpu"
HAS_GPU = hardware.count_gpus() > 0
KIND = "CPU" if ON_CPU else "GPU"
TOWERS = [f"/{KIND.lower()}:{index}" for index in range(2)]
VIRTUAL_GPU_MB = 6000
SKIP_REASON = "no GPU on this machine"


def setUpModule():
    if HAS_GPU and not ON_CPU:
        devices.configure_gpus(split_placement())


def split_placement():
    """Two towers on the one visible GPU, split into two virtual GPUs."""
    return devices.plan_towers(2, physical_gpus=1, virtual_gpu_memory_mb=VIRTUAL_GPU_MB)


def session_config(xla=False):
    """The session options training uses for two towers (on this process's devices)."""
    config = (testing_utils.cpu_session_config(2) if ON_CPU
              else devices.session_config(split_placement()))
    config.allow_soft_placement = True
    return devices.apply_xla(config) if xla else config


def relative_difference(value, reference):
    return np.linalg.norm(value - reference) / np.linalg.norm(reference)


def ran(result, kind, op_type):
    """Whether an op of `op_type` ran on a `kind` device (oneDNN renames CPU kernels, e.g.
    _MklNativeConv2D)."""
    return any(name == op_type or name.endswith(f"Native{op_type}")
               for name in result.ran_on.get(kind, ()))


@unittest.skipUnless(HAS_GPU or ON_CPU, SKIP_REASON)
class TowersOnGpusTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.weights = testing_utils.save_initial_weights(TOWERS, session_config())

    def step(self, **kwargs):
        return testing_utils.tiny_inception_step(TOWERS, session_config(kwargs.pop("xla", False)),
                                                 checkpoint=self.weights, **kwargs)

    def test_towers_run_on_the_gpus_with_variables_on_the_cpu(self):
        result = self.step()
        self.assertTrue(np.all(np.isfinite(result.losses)))
        self.assertTrue(ran(result, KIND, "Conv2D"))
        self.assertTrue(ran(result, KIND, "Conv2DBackpropFilter"))
        for name, device in result.variable_devices.items():
            self.assertIn("CPU:0", device.upper(), name)

    def test_two_towers_on_a_split_gpu_equal_one_tower_and_the_cpu(self):
        images, labels = testing_utils.random_batch(8)
        model_fn = testing_utils.small_conv_model_fn()
        tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(False)  # compare fp32 with fp32
        try:
            two_loss, two, _ = testing_utils.run_towers(images, labels, model_fn, TOWERS,
                                                        session_config())
            one_loss, one, _ = testing_utils.run_towers(images, labels, model_fn, TOWERS[:1],
                                                        session_config())
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(tf32)
        cpu_loss, cpu, _ = testing_utils.run_towers(images, labels, model_fn, ["/cpu:0"],
                                                    testing_utils.cpu_session_config(1))
        self.assertEqual(sorted(two), sorted(cpu))
        # TF32 is off above: GPU float32 kernels against the CPU's, rounding only (cuDNN and
        # oneDNN sum in other orders); a wrong split of the towers moves these by 1e-2.
        for loss in (two_loss, one_loss):
            np.testing.assert_allclose(loss, cpu_loss, rtol=0, atol=1e-5)
        for name, value in cpu.items():
            np.testing.assert_allclose(two[name], value, rtol=0, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(one[name], value, rtol=0, atol=1e-5, err_msg=name)

    def test_variables_on_the_gpu_update_as_on_the_cpu(self):
        on_cpu = self.step()
        on_gpu = self.step(variable_device=TOWERS[0])
        for name, device in on_gpu.variable_devices.items():
            self.assertIn(f"{KIND}:0", device.upper(), name)
        self.assertTrue(ran(on_gpu, KIND, "ResourceApplyRMSProp"))
        # The towers run on the GPU in both (TF32 on): only where the update runs differs, and
        # the loss of one step of a tiny network reorders float sums; 1e-3 is TF32's 10-bit
        # mantissa, the coarsest arithmetic in the step.
        np.testing.assert_allclose(on_gpu.losses, on_cpu.losses, rtol=1e-3)
        for name, update in on_cpu.updates.items():
            if "Logits" in name:
                self.assertLess(relative_difference(on_gpu.updates[name], update), 1e-2, name)

    def test_xla_compiles_the_step(self):
        plain = self.step()
        compiled = self.step(xla=True)
        self.assertIn("_XlaRun", compiled.ran)
        self.assertNotIn("_XlaRun", plain.ran)
        # Fused and reordered TF32 arithmetic (10-bit mantissa): see the CPU's xla_test.
        np.testing.assert_allclose(compiled.losses, plain.losses, rtol=1e-3)

    def test_staged_inputs_train_what_unstaged_ones_do(self):
        plain = self.step(steps=3)
        staged = self.step(steps=3, prefetch_inputs=True)
        self.assertTrue(ran(staged, KIND, "Unstage"))
        # The same batches through the same kernels (TF32): staging moves data, no arithmetic.
        np.testing.assert_allclose(staged.losses, plain.losses, rtol=1e-3)

    def test_layout_optimizer_converts_the_fp32_graph_to_nchw(self):
        # Grappler's layout optimizer gave up on the whole graph over tf-slim's dropout before
        # (model/network.py); on a GPU its fp32 convolutions must run in NCHW.
        if ON_CPU:
            self.skipTest("the layout optimizer converts GPU graphs only")
        self.assertIn("NCHW", self.step().conv_formats["GPU"])

    def test_bf16_step_learns_with_float32_variables(self):
        require_bf16()
        first = self.step(compute_dtype=tf.bfloat16)
        last = self.step(compute_dtype=tf.bfloat16, steps=15)
        self.assertEqual(last.op_dtypes["Conv2D"], tf.bfloat16)
        self.assertEqual(last.variable_dtypes, {tf.float32})
        self.assertTrue(ran(last, KIND, "Conv2D"))
        self.assertIsNone(last.loss_scale)
        self.assertTrue(np.all(np.isfinite(last.losses)))
        self.assertLess(np.mean(last.losses), 0.75 * np.mean(first.losses))

    def test_fp16_step_learns_and_an_overflow_halves_the_loss_scale(self):
        first = self.step(compute_dtype=tf.float16, loss_scale=1024.0)
        last = self.step(compute_dtype=tf.float16, loss_scale=1024.0, steps=15)
        self.assertEqual(last.op_dtypes["Conv2D"], tf.float16)
        self.assertEqual(last.variable_dtypes, {tf.float32})
        self.assertTrue(np.all(np.isfinite(last.losses)))
        self.assertLess(np.mean(last.losses), 0.75 * np.mean(first.losses))
        images, _ = testing_utils.random_batch(16, size=testing_utils.TINY_INCEPTION.image_size)
        images[0, 0, 0, 0] = np.inf  # what an fp16 overflow does to the gradients
        poisoned = self.step(compute_dtype=tf.float16, loss_scale=1024.0, images=images)
        self.assertEqual(poisoned.loss_scale, 512.0)
        for name, update in poisoned.updates.items():
            self.assertFalse(np.any(update), name)  # the update was skipped


def require_bf16():
    if ON_CPU:
        if not hardware.cpu_supports_bf16():
            raise unittest.SkipTest("this CPU has no bf16 instructions")
        return
    lacking = [gpu for gpu in hardware.gpu_infos() if not gpu.has_bf16]
    if lacking:
        raise unittest.SkipTest(f"{lacking[0].name} has no bf16 (compute capability < 8.0)")


@unittest.skipUnless(HAS_GPU or ON_CPU, SKIP_REASON)
class TrainingOnASplitGpuTest(unittest.TestCase):
    """The trainer itself, two towers on two virtual GPUs of one GPU, in each precision."""

    @classmethod
    def setUpClass(cls):
        cls.data_dir = testing_utils.tiny_demo_data(train=16, validation=4)

    def train(self, precision):
        lines = []
        result = launch.train(settings_lib.train_settings(
            train_dir=testing_utils.temp_dir(precision), data_dir=self.data_dir, dataset="demo",
            eval_every_n_steps=0,
            max_steps=3, **testing_utils.tiny_model(aux_head=True), batch_size=8, num_towers=2,
            virtual_gpu_memory_mb=0 if ON_CPU else VIRTUAL_GPU_MB, precision=precision,
            log_every_n_steps=1), log=lines.append)
        self.assertEqual(result.step, 3)
        self.assertTrue(np.isfinite(result.last_mean_loss), lines)
        return next(line for line in lines if ": training " in line)  # the run's description

    def test_fp32(self):
        first_line = self.train("fp32")
        if not ON_CPU:
            self.assertIn("2 tower(s) on virtual GPUs", first_line)
            self.assertIn("variables on GPU:0", first_line)
            self.assertIn("inputs prefetched to the GPUs", first_line)

    def test_bf16(self):
        require_bf16()
        self.assertIn("; bf16", self.train("bf16"))

    def test_fp16(self):
        if ON_CPU:
            self.skipTest("fp16 training needs GPU towers")
        self.assertIn("; fp16", self.train("fp16"))



@unittest.skipIf(ON_CPU or len(machine.nvidia_gpus()) < 2,
                 "NCCL needs two GPUs; this machine has "
                 f"{len(machine.nvidia_gpus())} (or the run is on CPU devices)")
class NcclTest(unittest.TestCase):

    def test_nccl_sums_what_the_ring_sums_bit_for_bit(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        if ALL_GPUS is None:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ALL_GPUS
        done = subprocess.run([sys.executable, "-m", "tests.topics.nccl_sum"], env=env,
                              capture_output=True, text=True, check=False, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertIn("nccl equals ring", done.stdout)

if __name__ == "__main__":
    absltest.main()
