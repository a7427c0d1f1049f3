"""Each tower's input copied to its device one step ahead (GPU towers).

Without it, every step starts by copying its images from the host to each GPU while the GPU
waits (a global batch of 256 at 299 px is 275 MB of float32). Here each tower reads its batch
from a one-deep FIFO staging area on its own device, and the same step puts the next batch
there, so the copy runs while the GPU computes. Running the put once, after the input iterator is
initialized, stages the first batch; from then on step k trains on batch k exactly as without
staging (the FIFO hands out the oldest batch), and one batch is left unused when training ends.
TensorFlow's `prefetch_to_device` does this for a single device and a dataset; the towers here
split one global batch on the host, hence the staging ops (`tf.raw_ops.Stage` / `Unstage`).
"""

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class PrefetchedInputs:
    """tower_inputs: per tower, this step's tensors on its device (same dtypes and shapes as
    given); put_op: stages the next batch. It is part of every step, and must run once alone
    before the first step: a step on an empty staging area would wait for ever."""
    tower_inputs: list
    put_op: tf.Operation


def prefetch_to_devices(tower_inputs, devices, name="prefetched_input"):
    """Puts each tower's input tuple into a staging area on its device; returns PrefetchedInputs.

    Args:
      tower_inputs: list (one per tower) of tuples of tensors with fully known shapes.
      devices: the towers' device names.
    """
    puts, staged = [], []
    for index, (inputs, device) in enumerate(zip(tower_inputs, devices)):
        dtypes = [tensor.dtype for tensor in inputs]
        area = f"{name}_{index}"
        with tf.device(device), tf.name_scope(f"prefetch_tower_{index}"):
            puts.append(tf.raw_ops.Stage(values=list(inputs), shared_name=area, name="put"))
            taken = tf.raw_ops.Unstage(dtypes=dtypes, shared_name=area, name="take")
        for tensor, original in zip(taken, inputs):
            tensor.set_shape(original.shape)
        staged.append(tuple(taken))
    return PrefetchedInputs(tower_inputs=staged, put_op=tf.group(*puts, name=f"{name}_put"))
