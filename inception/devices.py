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
