"""Placement of towers and variables, precision choices, and the process's GPU options."""

import dataclasses
import os
import subprocess
import sys
import unittest
from unittest import mock

import tensorflow as tf
from absl.testing import absltest

from inception.config import cluster
from inception.config import settings as settings_lib
from inception.parallel import all_reduce
from inception.parallel import devices
from inception.parallel import precision as precision_lib
from inception.parallel import hardware
from inception.parallel import variable_update
from tests import testing_utils

tf1 = tf.compat.v1
V100 = hardware.GpuInfo(0, "Tesla V100-SXM2-16GB", (7, 0))
H200 = hardware.GpuInfo(0, "NVIDIA H200", (9, 0))


class PlacementTest(unittest.TestCase):

    def test_cpu_tests_see_no_gpu(self):
        # Every test but gpu_test hides the machine's GPUs (tests/BUILD), so that it runs the
        # same on machines with and without them.
        self.assertEqual(os.environ.get("CUDA_VISIBLE_DEVICES"), "")
        self.assertEqual(hardware.count_gpus(), 0)

    def test_more_towers_than_gpus(self):
        with self.assertRaisesRegex(devices.PlacementError, "--virtual_gpu_memory_mb"):
            devices.plan_towers(4, physical_gpus=2)
        placement = devices.plan_towers(4, physical_gpus=2, virtual_gpu_memory_mb=1000)
        self.assertEqual(placement.tower_devices, ["/gpu:0", "/gpu:1", "/gpu:2", "/gpu:3"])
        config = devices.session_config(placement)
        self.assertEqual([list(gpu.memory_limit_mb)
                          for gpu in config.gpu_options.experimental.virtual_devices],
                         [[1000.0, 1000.0], [1000.0, 1000.0]])
        self.assertEqual(devices.plan_towers(None, physical_gpus=0).tower_devices,
                         ["/cpu:0", "/cpu:1"])
        self.assertEqual(devices.plan_towers(None, physical_gpus=3).num_towers, 3)
        self.assertTrue(devices.session_config(
            devices.plan_towers(None, physical_gpus=3)).gpu_options.allow_growth)

    def test_variables_device_auto_is_the_gpu_only_on_one_gpu_machines(self):
        cpu = devices.plan_towers(2, physical_gpus=0)
        one_gpu = devices.plan_towers(1, physical_gpus=1)
        split_gpu = devices.plan_towers(2, physical_gpus=1, virtual_gpu_memory_mb=1000)
        two_gpus = devices.plan_towers(2, physical_gpus=2)
        self.assertEqual(devices.check_variable_device("auto", cpu), "/cpu:0")
        self.assertEqual(devices.check_variable_device("auto", one_gpu), "/gpu:0")
        self.assertEqual(devices.check_variable_device("auto", split_gpu), "/gpu:0")
        self.assertEqual(devices.check_variable_device("auto", two_gpus), "/cpu:0")
        self.assertEqual(devices.check_variable_device("auto", one_gpu, distributed=True),
                         "/cpu:0")
        self.assertEqual(devices.check_variable_device("cpu", one_gpu), "/cpu:0")
        self.assertEqual(devices.check_variable_device("gpu", two_gpus), "/gpu:0")
        with self.assertRaisesRegex(devices.PlacementError, "no GPU; leave it at auto or cpu"):
            devices.check_variable_device("gpu", cpu)
        with self.assertRaisesRegex(devices.PlacementError, "parameter servers"):
            devices.check_variable_device("gpu", one_gpu, distributed=True)
        # A choice that is none of auto, cpu, gpu is refused once, where every setting's
        # choices are checked (config/settings.py; tests/config/settings_test.py).


class VariableUpdateTest(unittest.TestCase):
    """--variable_update: what auto picks, and how replicated variables reduce."""

    def test_auto_replicates_on_several_gpus_and_follows_the_cluster(self):
        cpu = devices.plan_towers(2, physical_gpus=0)
        one_gpu = devices.plan_towers(1, physical_gpus=1)
        split_gpu = devices.plan_towers(2, physical_gpus=1, virtual_gpu_memory_mb=1000)
        two_gpus = devices.plan_towers(2, physical_gpus=2)
        collective = cluster.cluster_settings("worker", 0, [], ["w:1", "w:2"])
        with_ps = cluster.cluster_settings("worker", 0, ["ps:1"], ["w:1", "w:2"])
        choose = variable_update.choose
        self.assertEqual(choose("auto", two_gpus), "replicated")
        self.assertEqual(choose("auto", cpu), variable_update.AUTO_UPDATE_CPU_TOWERS)
        self.assertEqual(choose("auto", one_gpu), variable_update.AUTO_UPDATE_ONE_GPU)
        self.assertEqual(choose("auto", split_gpu), variable_update.AUTO_UPDATE_ONE_GPU)
        self.assertEqual(choose("auto", two_gpus, variable_device="cpu"), "parameter_server")
        self.assertEqual(choose("auto", cpu, collective), "replicated")
        self.assertEqual(choose("auto", two_gpus, with_ps), "parameter_server")
        self.assertEqual(choose("replicated", cpu), "replicated")
        self.assertEqual(choose("parameter_server", two_gpus), "parameter_server")

    def test_nccl_only_between_gpus_of_their_own(self):
        spec = variable_update.all_reduce_spec
        self.assertEqual(spec(devices.plan_towers(2, physical_gpus=2), 4).communication, "nccl")
        for towers, workers in ((devices.plan_towers(2, physical_gpus=0), 1),
                                (devices.plan_towers(2, physical_gpus=1,
                                                     virtual_gpu_memory_mb=1000), 1),
                                (devices.plan_towers(2, physical_gpus=2), 2)):
            self.assertEqual(spec(towers, 4, workers).communication, "ring", (towers, workers))
        self.assertEqual(spec(devices.plan_towers(2, physical_gpus=0), 3, 2),
                         all_reduce.AllReduceSpec("ring", 3, 2))

    def test_the_placement_says_how_the_variables_are_shared(self):
        towers = devices.plan_towers(2, physical_gpus=0)
        for update, expected in (
                ("replicated", "fp32; variables replicated on every tower, all-reduce over the "
                               "collective ring, 4 buffer(s)"),
                ("parameter_server", "fp32")):
            with self.subTest(update=update):
                placement = devices.resolve_placement(settings_lib.DeviceSettings(
                    num_towers=2, variable_update=update, all_reduce_buffers=4))
                self.assertEqual(placement.towers, towers)
                self.assertEqual(placement.variable_update, update)
                self.assertEqual(placement.variable_device, "/cpu:0")
                self.assertEqual(placement.describe_arithmetic(), expected)


class PrecisionChoiceTest(unittest.TestCase):

    def test_precision_needs_the_right_hardware(self):
        cpu = devices.plan_towers(2, physical_gpus=0)
        gpu = devices.plan_towers(2, physical_gpus=2)
        precision_lib.check_precision("bf16", cpu, bf16_cpu=True)
        precision_lib.check_precision("fp16", gpu)
        precision_lib.check_precision("bf16", gpu, gpus=[H200, dataclasses.replace(H200, index=1)])
        with self.assertRaisesRegex(devices.PlacementError, "AVX512-BF16"):
            precision_lib.check_precision("bf16", cpu, bf16_cpu=False)
        with self.assertRaisesRegex(devices.PlacementError, "needs GPU towers"):
            precision_lib.check_precision("fp16", cpu)
        # An unknown precision is refused with the other choices: tests/config/settings_test.py.

    def test_bf16_on_a_gpu_without_it_names_the_gpu_and_what_to_use(self):
        gpu = devices.plan_towers(2, physical_gpus=2)
        with self.assertRaises(devices.PlacementError) as raised:
            precision_lib.check_precision("bf16", gpu, gpus=[H200, dataclasses.replace(V100, index=1)])
        message = str(raised.exception)
        self.assertIn("GPU 1 (Tesla V100-SXM2-16GB) has 7.0", message)
        self.assertIn("use --precision=fp16", message)
        self.assertEqual(len(message.splitlines()), 1)

    def test_gpu_towers_are_built_in_their_dtype_and_cpu_bf16_is_a_rewrite(self):
        cpu = devices.plan_towers(2, physical_gpus=0)
        gpu = devices.plan_towers(1, physical_gpus=1)
        self.assertEqual(precision_lib.tower_compute_dtype("bf16", gpu), tf.bfloat16)
        self.assertEqual(precision_lib.tower_compute_dtype("fp16", gpu), tf.float16)
        self.assertIsNone(precision_lib.tower_compute_dtype("fp32", gpu))
        self.assertIsNone(precision_lib.tower_compute_dtype("bf16", cpu))
        rewrite_on = tf1.ConfigProto().graph_options.rewrite_options.ON
        cpu_config = precision_lib.apply_precision(tf1.ConfigProto(), "bf16", cpu)
        self.assertEqual(
            cpu_config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16,
            rewrite_on)
        for precision in ("bf16", "fp16"):
            options = precision_lib.apply_precision(tf1.ConfigProto(), precision,
                                              gpu).graph_options.rewrite_options
            self.assertNotEqual(options.auto_mixed_precision, rewrite_on)
            self.assertNotEqual(options.auto_mixed_precision_onednn_bfloat16, rewrite_on)

    def test_cpu_flags_are_read(self):
        path = os.path.join(testing_utils.temp_dir("cpuinfo"), "cpuinfo")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("processor : 0\nflags : fpu avx512f avx512_bf16 sse\n")
        self.assertTrue(hardware.cpu_supports_bf16(path, environ={}))  # no oneDNN cap
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("flags : fpu avx2\n")
        self.assertFalse(hardware.cpu_supports_bf16(path, environ={}))

    def test_a_onednn_cap_below_bf16_turns_bf16_off(self):
        # oneDNN capped at AVX2 on a bf16 CPU aborts on the first bf16 matmul (checked by hand:
        # a bfloat16 tf.matmul under ONEDNN_MAX_CPU_ISA=AVX2 dies with a segmentation fault).
        path = os.path.join(testing_utils.temp_dir("cpuinfo_cap"), "cpuinfo")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("flags : fpu avx512f avx512_bf16 amx_bf16\n")
        for environ, expected in (({}, True), ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),
                                  ({"ONEDNN_MAX_CPU_ISA": "avx512_core"}, False),
                                  ({"DNNL_MAX_CPU_ISA": "AVX2"}, False),
                                  ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, True),
                                  ({"ONEDNN_MAX_CPU_ISA": "all"}, True)):
            self.assertEqual(hardware.cpu_supports_bf16(path, environ), expected, environ)
        self.assertEqual(hardware.onednn_isa_cap({"DNNL_MAX_CPU_ISA": " avx2 "}), "AVX2")
        self.assertIsNone(hardware.onednn_isa_cap({}))
        cpu = devices.plan_towers(2, physical_gpus=0)
        with mock.patch.object(hardware.machine, "cpu_flags", return_value={"avx512_bf16"}), \
                mock.patch.dict(os.environ, {"ONEDNN_MAX_CPU_ISA": "AVX2"}):
            with self.assertRaises(devices.PlacementError) as raised:
                precision_lib.check_precision("bf16", cpu)
        self.assertIn("ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN from them: unset it",
                      str(raised.exception))


FAKE_GPU = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")


class SessionConfigTest(unittest.TestCase):

    def test_cpu_towers_skip_the_grappler_work_that_changes_nothing_there(self):
        cpu = devices.session_config(devices.plan_towers(2, physical_gpus=0)).graph_options
        gpu = devices.session_config(devices.plan_towers(1, physical_gpus=1)).graph_options
        self.assertEqual(cpu.rewrite_options.meta_optimizer_iterations,
                         cpu.rewrite_options.ONE)
        self.assertEqual(cpu.rewrite_options.memory_optimization,
                         cpu.rewrite_options.NO_MEM_OPT)
        self.assertEqual(gpu.rewrite_options, type(gpu.rewrite_options)())  # the defaults


class GpuOptionsTest(unittest.TestCase):
    """configure_gpus against a stand-in for TensorFlow's device configuration (this machine
    has no GPU; gpu_test runs the real thing)."""

    def configure(self, placement, created=False, existing_split=None):
        calls = []
        config = tf.config
        with mock.patch.object(config, "list_physical_devices", return_value=[FAKE_GPU]), \
                mock.patch.object(config, "set_logical_device_configuration",
                                  side_effect=self.refuse_if(created, calls, "split")), \
                mock.patch.object(config, "get_logical_device_configuration",
                                  return_value=existing_split), \
                mock.patch.object(config.experimental, "set_memory_growth",
                                  side_effect=self.refuse_if(created, calls, "growth")), \
                mock.patch.object(config, "list_logical_devices",
                                  return_value=[FAKE_GPU] * len(existing_split or [1])), \
                mock.patch.object(hardware, "eager_devices_created", return_value=created):
            devices.configure_gpus(placement)
        return calls

    @staticmethod
    def refuse_if(created, calls, kind):
        def record(gpu, value):
            if created:
                raise RuntimeError("Physical devices cannot be modified after being initialized")
            calls.append((kind, gpu.name, value))
        return record

    def test_one_tower_per_gpu_gets_memory_growth(self):
        calls = self.configure(devices.plan_towers(1, physical_gpus=1))
        self.assertEqual(calls, [("growth", FAKE_GPU.name, True)])

    def test_more_towers_than_gpus_split_the_gpu_before_it_exists(self):
        calls = self.configure(devices.plan_towers(2, physical_gpus=1,
                                                   virtual_gpu_memory_mb=1500))
        self.assertEqual(len(calls), 1)
        kind, name, split = calls[0]
        self.assertEqual((kind, name), ("split", FAKE_GPU.name))
        self.assertEqual([device.memory_limit for device in split], [1500, 1500])

    def test_a_split_asked_for_after_the_devices_exist_is_a_clear_error(self):
        with self.assertRaisesRegex(devices.PlacementError,
                                    "created this process's GPU devices before"):
            self.configure(devices.plan_towers(2, physical_gpus=1, virtual_gpu_memory_mb=1500),
                           created=True)
        # A tower per GPU still fits the devices TensorFlow made by itself.
        self.assertEqual(self.configure(devices.plan_towers(1, physical_gpus=1), created=True),
                         [])

    def test_a_gpu_already_split_keeps_its_split(self):
        split = [tf.config.LogicalDeviceConfiguration(memory_limit=1500)] * 2
        self.assertEqual(self.configure(devices.plan_towers(1, physical_gpus=1),
                                        existing_split=split), [])


class DeviceCreationTest(unittest.TestCase):
    """The root cause of the split-GPU failures, shown on this machine: TensorFlow creates its
    devices (with default GPU options) while a training graph is built, before any session."""

    def run_python(self, code):
        completed = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
            check=False, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        self.assertEqual(completed.returncode, 0, completed.stderr[-3000:])
        return completed.stdout.split()

    def test_building_a_training_graph_creates_the_devices(self):
        created = self.run_python(
            "import functools\n"
            "import tensorflow as tf\n"
            "from inception.inputs import pipeline\n"
            "from inception.model import network\n"
            "from inception.parallel import hardware\n"
            "from inception.step import step_graph\n"
            "from tests import testing_utils\n"
            "print(hardware.eager_devices_created())\n"
            "with tf.Graph().as_default():\n"
            "    step_graph.build_train_graph(\n"
            "        pipeline.InputBatch(tf.zeros([4, 75, 75, 3]), tf.zeros([4], tf.int32),\n"
            "                            tf.constant(0, tf.int64), tf.no_op()),\n"
            "        functools.partial(network.make_model_fn, testing_utils.TINY_INCEPTION),\n"
            "        testing_utils.optimization(), testing_utils.sharing_of(['/cpu:0']), 8)\n"
            "print(hardware.eager_devices_created())\n")
        self.assertEqual(created, ["False", "True"])

    def test_training_sets_gpu_options_before_anything_creates_the_devices(self):
        seen = self.run_python(
            "from inception.config import settings as settings_lib\n"
            "from inception.driver import launch\n"
            "from inception.parallel import devices, hardware\n"
            "from tests import testing_utils\n"
            "original = devices.configure_gpus\n"
            "def spy(placement):\n"
            "    print('configure', hardware.eager_devices_created())\n"
            "    original(placement)\n"
            "devices.configure_gpus = spy\n"
            "data_dir = testing_utils.tiny_demo_data(train=8, validation=4)\n"
            "launch.train(settings_lib.train_settings(\n"
            "    train_dir=testing_utils.temp_dir('order'), data_dir=data_dir, dataset='demo',\n"
            "    max_steps=1, image_size=75, depth_multiplier=0.1, batch_size=2, num_towers=2,\n"
            "    eval_every_n_steps=0),\n"
            "    log=lambda line: None)\n"
            "print('after', hardware.eager_devices_created())\n")
        self.assertEqual(seen, ["configure", "False", "after", "True"])


if __name__ == "__main__":
    absltest.main()
