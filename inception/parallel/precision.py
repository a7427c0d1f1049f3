"""The towers' arithmetic (--precision): whether this machine can run it, the dtype GPU towers
are built in, and TensorFlow's oneDNN bf16 rewrite for CPU towers."""

import tensorflow as tf

from inception.parallel import hardware
from inception.parallel.hardware import PlacementError


def check_precision(precision, placement, bf16_cpu=None, gpus=None):
    """Raises PlacementError when `precision` cannot run on this placement.

    bf16 on CPU towers needs a CPU with bf16 instructions; on GPU towers, GPUs of compute
    capability 8.0 or newer. fp16 (with loss scaling) needs GPU towers. `bf16_cpu` and `gpus`
    (a list of hardware.GpuInfo) stand in for this machine's in tests.
    """
    if precision == "bf16" and placement.device_type == "gpu":
        found = hardware.gpu_infos() if gpus is None else gpus
        lacking = [gpu for gpu in found if not gpu.has_bf16]
        if lacking:
            gpu = lacking[0]
            raise PlacementError(
                f"--precision=bf16 needs GPUs of compute capability 8.0 or newer; GPU "
                f"{gpu.index} ({gpu.name}) has {'.'.join(map(str, gpu.compute_capability))}: "
                "use --precision=fp16 there (dynamic loss scaling) or fp32.")
    if precision == "bf16" and placement.device_type == "cpu":
        if not (hardware.cpu_supports_bf16() if bf16_cpu is None else bf16_cpu):
            cap = hardware.onednn_isa_cap()
            reason = (f"ONEDNN_MAX_CPU_ISA={cap} keeps oneDNN from them: unset it or"
                      if cap and hardware.cpu_supports_bf16(environ={})
                      else "this one has neither:")
            raise PlacementError("--precision=bf16 needs a CPU with AVX512-BF16 or AMX "
                                 f"instructions; {reason} use --precision=fp32.")
    if precision == "fp16" and placement.device_type != "gpu":
        raise PlacementError("--precision=fp16 needs GPU towers; on this CPU use "
                             "--precision=bf16 (if it has bf16 instructions) or fp32.")


def tower_compute_dtype(precision, placement):
    """The dtype GPU towers are built in (mixed_precision.py): bfloat16 or float16 for
    --precision bf16 / fp16 on GPUs; None for fp32 and for CPU towers (there bf16 comes from
    TensorFlow's oneDNN rewrite, apply_precision)."""
    if placement.device_type != "gpu" or precision == "fp32":
        return None
    return {"bf16": tf.bfloat16, "fp16": tf.float16}[precision]


def apply_precision(config, precision, placement):
    """Turns on TensorFlow's oneDNN bf16 rewrite in `config` for bf16 on CPU towers (TensorFlow
    has no bf16 rewrite for GPUs; GPU towers are built in their dtype instead). Variables, the
    loss and the averaging stay float32; convolutions, matmuls and batch norm run in bf16.
    Returns `config`."""
    if precision == "bf16" and placement.device_type == "cpu":
        rewrite = config.graph_options.rewrite_options
        rewrite.auto_mixed_precision_onednn_bfloat16 = rewrite.ON
    return config
