"""What this machine has, found without creating any device: its GPUs (count, names, compute
capability), whether TensorFlow already created its eager devices, and whether the CPU's bf16
instructions are usable by oneDNN. parallel/devices.py decides the placement from these."""

import dataclasses
import os

import tensorflow as tf

from common import cli
from common import machine


class PlacementError(cli.UserError):
    """The requested towers or their arithmetic do not fit the machine; the message says what
    to do."""


def count_gpus():
    """Number of physical GPUs TensorFlow can see (creates no device)."""
    return len(tf.config.list_physical_devices("GPU"))


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """A physical GPU: its index, name and CUDA compute capability (major, minor)."""
    index: int
    name: str
    compute_capability: tuple

    @property
    def has_bf16(self):
        """bf16 tensor cores arrived with compute capability 8.0 (Ampere)."""
        return tuple(self.compute_capability) >= (8, 0)


def gpu_infos():
    """GpuInfo of every physical GPU TensorFlow sees (creates no device)."""
    infos = []
    for index, gpu in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(gpu)
        infos.append(GpuInfo(index, details.get("device_name", gpu.name),
                             tuple(details.get("compute_capability", (0, 0)))))
    return infos


def eager_devices_created():
    """True once this process has created its eager devices (GPU options are fixed then)."""
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    return context.context()._context_handle is not None  # pylint: disable=protected-access


# oneDNN's instruction-set caps (ONEDNN_MAX_CPU_ISA) under which it still has bf16 matmul and
# convolution kernels; below them (e.g. AVX2 on an AVX-512 machine) a bf16 op aborts the process
# with "could not create a primitive descriptor", because TensorFlow trusts the CPU's flags.
ONEDNN_BF16_ISA_CAPS = frozenset((
    "ALL", "DEFAULT", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512", "AVX512_CORE_AMX",
    "AVX10_1_512_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX_FP16"))


def onednn_isa_cap(environ=None):
    """The instruction-set cap the user gave oneDNN (ONEDNN_MAX_CPU_ISA, or its older name
    DNNL_MAX_CPU_ISA), upper-cased; None when neither is set."""
    environ = os.environ if environ is None else environ
    cap = environ.get("ONEDNN_MAX_CPU_ISA") or environ.get("DNNL_MAX_CPU_ISA")
    return cap.strip().upper() if cap and cap.strip() else None


def cpu_supports_bf16(cpuinfo_path=machine.CPUINFO, environ=None):
    """True when the CPU has bf16 matrix instructions (AVX512-BF16 or AMX-BF16) and oneDNN is
    allowed to use them (no ONEDNN_MAX_CPU_ISA cap below AVX512_CORE_BF16)."""
    flags = machine.cpu_flags(cpuinfo_path)
    cap = onednn_isa_cap(environ)
    if cap is not None and cap not in ONEDNN_BF16_ISA_CAPS:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
