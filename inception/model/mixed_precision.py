"""Towers built in bf16 or fp16 with float32 variables (--precision=bf16/fp16 on GPUs).

TensorFlow 2.21 rewrites graphs to bf16 only for CPUs (its oneDNN pass skips GPU ops), so on
GPUs the towers are built in the low precision directly, the way Keras's mixed-precision
policies do it: every variable a layer asks for in the compute dtype is created in float32 and
read through a cast inside the tower, so the optimizer, the moving averages, the checkpoints
and the evaluation job see exactly the float32 variables of an fp32 run. Images are cast on
entry and the logits back to float32 before the loss. Batch norm keeps float32 parameters and
statistics (its fused kernel takes bf16/fp16 activations with float32 parameters). fp16 also
needs dynamic loss scaling (loss_scaling.py); bf16 has fp32's exponent range and needs none.
"""

import contextlib

import tensorflow as tf

tf1 = tf.compat.v1
LOW_PRECISION_DTYPES = (tf.bfloat16, tf.float16)


def float32_storage_getter(compute_dtype):
    """A variable-scope custom getter: a variable asked for in `compute_dtype` is created (or
    reused) in float32 and returned as a `compute_dtype` cast of it; others pass through."""
    def custom_getter(getter, name, *args, **kwargs):
        if kwargs.get("dtype") != compute_dtype:
            return getter(name, *args, **kwargs)
        variable = getter(name, *args, **dict(kwargs, dtype=tf.float32))
        return tf.cast(variable, compute_dtype, name=f"{name.split('/')[-1]}_{compute_dtype.name}")
    return custom_getter


@contextlib.contextmanager
def building_in(compute_dtype):
    """Context in which layers built on `compute_dtype` inputs keep float32 variables; a no-op
    for None (fp32). Reuse follows the enclosing variable scope (towers after the first)."""
    if compute_dtype is None:
        yield
        return
    if compute_dtype not in LOW_PRECISION_DTYPES:
        raise ValueError(f"compute dtype {compute_dtype} is not bfloat16 or float16")
    with tf1.variable_scope(tf1.get_variable_scope(), auxiliary_name_scope=False,
                            custom_getter=float32_storage_getter(compute_dtype)):
        yield


def to_compute(tensor, compute_dtype):
    """`tensor` cast to `compute_dtype` (unchanged for None)."""
    return tensor if compute_dtype is None else tf.cast(tensor, compute_dtype)


def to_float32(tensor):
    """`tensor` as float32 (None stays None): logits before the loss."""
    return None if tensor is None else tf.cast(tensor, tf.float32)
