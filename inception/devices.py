"""Where towers run: one per GPU, or virtual CPU devices on machines without GPUs.

A session config carries the placement: N virtual CPU devices (`device_count`), or each GPU
split into equal virtual GPUs when the user asks for more towers than GPUs.
"""

import dataclasses
import math

import tensorflow as tf

tf1 = tf.compat.v1
DEFAULT_CPU_TOWERS = 2


class PlacementError(ValueError):
    """The requested towers do not fit the machine; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class TowerPlacement:
    """num_towers towers on `device_type` devices ('gpu' or 'cpu').

    virtual_gpu_memory_mb: when > 0, each physical GPU is split into virtual GPUs of this size.
    """
    num_towers: int
    device_type: str
    physical_gpus: int = 0
    virtual_gpu_memory_mb: int = 0

    @property
    def tower_devices(self):
        """Device name of each tower, e.g. ['/gpu:0', '/gpu:1'] or ['/cpu:0', '/cpu:1']."""
        return [f"/{self.device_type}:{index}" for index in range(self.num_towers)]

    def describe(self):
        """One line for the log."""
        if self.device_type == "cpu":
            return f"{self.num_towers} tower(s) on virtual CPU devices (no GPU found)"
        if self.virtual_gpu_memory_mb:
            return (f"{self.num_towers} tower(s) on virtual GPUs of "
                    f"{self.virtual_gpu_memory_mb} MB "
                    f"carved from {self.physical_gpus} GPU(s)")
        return f"{self.num_towers} tower(s), one per GPU"


def count_gpus():
    """Number of physical GPUs TensorFlow can see."""
    return len(tf.config.list_physical_devices("GPU"))


def plan_towers(requested, physical_gpus, virtual_gpu_memory_mb=0):
    """Chooses the placement for `requested` towers (None: one per GPU, or 2 virtual CPUs).

    More towers than GPUs is an error unless `virtual_gpu_memory_mb` > 0 asks to split GPUs.
    """
    if requested is not None and requested < 1:
        raise PlacementError(f"--num_gpus={requested} must be at least 1.")
    if physical_gpus == 0:
        return TowerPlacement(requested or DEFAULT_CPU_TOWERS, "cpu")
    num_towers = requested or physical_gpus
    if num_towers > physical_gpus and virtual_gpu_memory_mb <= 0:
        raise PlacementError(
            f"--num_gpus={num_towers} but this machine has {physical_gpus} GPU(s); use "
            f"--num_gpus={physical_gpus}, or split each GPU into virtual devices with "
            "--virtual_gpu_memory_mb=<MB per tower>.")
    return TowerPlacement(num_towers, "gpu", physical_gpus,
                          virtual_gpu_memory_mb if num_towers > physical_gpus else 0)


def session_config(placement, intra_op_threads=0, inter_op_threads=0):
    """A tf.compat.v1.ConfigProto that creates the devices `placement` needs."""
    config = tf1.ConfigProto(allow_soft_placement=True,
                             intra_op_parallelism_threads=intra_op_threads,
                             inter_op_parallelism_threads=inter_op_threads)
    if placement.device_type == "cpu":
        config.device_count["CPU"] = placement.num_towers
        return config
    if not placement.virtual_gpu_memory_mb:
        config.gpu_options.allow_growth = True
    else:
        per_gpu = math.ceil(placement.num_towers / placement.physical_gpus)
        for _ in range(placement.physical_gpus):
            config.gpu_options.experimental.virtual_devices.add(
                memory_limit_mb=[float(placement.virtual_gpu_memory_mb)] * per_gpu)
    return config


PRECISIONS = ("fp32", "bf16", "fp16")


def cpu_supports_bf16(cpuinfo_path="/proc/cpuinfo"):
    """True when the CPU has bf16 matrix instructions (AVX512-BF16 or AMX-BF16)."""
    try:
        with open(cpuinfo_path, encoding="utf-8") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle
                          if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def check_precision(precision, placement, bf16_cpu=None):
    """Raises PlacementError when `precision` cannot speed up this placement.

    bf16 uses TensorFlow's oneDNN mixed-precision rewrite, which runs on the CPU: it needs a CPU
    with bf16 instructions and CPU towers. fp16 (with loss scaling) needs GPU towers.
    """
    if precision not in PRECISIONS:
        raise PlacementError(f"--precision={precision}: use one of {', '.join(PRECISIONS)}.")
    if precision == "bf16":
        if placement.device_type != "cpu":
            raise PlacementError("--precision=bf16 rewrites CPU ops only (TensorFlow 2.21 has no "
                                 "bf16 graph rewrite for GPUs); use --precision=fp16 on GPUs.")
        if not (cpu_supports_bf16() if bf16_cpu is None else bf16_cpu):
            raise PlacementError("--precision=bf16 needs a CPU with AVX512-BF16 or AMX "
                                 "instructions; this one has neither, use --precision=fp32.")
    if precision == "fp16" and placement.device_type != "gpu":
        raise PlacementError("--precision=fp16 needs GPU towers; on this CPU use "
                             "--precision=bf16 (if it has bf16 instructions) or fp32.")


def apply_precision(config, precision):
    """Turns on TensorFlow's mixed-precision graph rewrite for `precision` in `config`.

    Variables, the loss and the gradient averaging stay float32; convolutions, matmuls and
    batch norm run in bf16 (oneDNN, CPU) or fp16 (GPU). Returns `config`.
    """
    rewrite = config.graph_options.rewrite_options
    if precision == "bf16":
        rewrite.auto_mixed_precision_onednn_bfloat16 = rewrite.ON
    elif precision == "fp16":
        rewrite.auto_mixed_precision = rewrite.ON
    return config


VARIABLE_DEVICES = {"cpu": "/cpu:0", "gpu": "/gpu:0"}


def check_variable_device(variable_device, placement, distributed=False):
    """Raises PlacementError unless the variables can live on `variable_device` ('cpu' or
    'gpu'); returns its device name. 'gpu' (the first GPU) needs GPU towers on this machine."""
    if variable_device not in VARIABLE_DEVICES:
        raise PlacementError(f"--variable_device={variable_device}: use cpu or gpu.")
    if variable_device == "gpu":
        if placement.device_type != "gpu":
            raise PlacementError("--variable_device=gpu needs GPU towers and this machine has "
                                 "no GPU; leave it at cpu.")
        if distributed:
            raise PlacementError("--variable_device=gpu is for one machine; on a cluster the "
                                 "variables live on the parameter servers.")
    return VARIABLE_DEVICES[variable_device]


def apply_xla(config):
    """Turns on XLA auto-clustering in `config` (TensorFlow compiles the fusable parts of the
    step); returns it. On CPUs this works only in a process that called
    cli.allow_xla_on_cpu() before TensorFlow listed its devices (every entry point does)."""
    config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
    return config
