"""Summing every device's gradients on every device (--variable_update=replicated), with
TensorFlow's own collectives: NCCL between GPUs of one machine (`tf.raw_ops.NcclAllReduce`
through nccl_ops.all_sum, as tf_cnn_benchmarks and MirroredStrategy do), and otherwise its
collective runtime's ring (`CollectiveReduceV2`, communication hint "ring"): between CPU
devices, between virtual GPUs that share one GPU (NCCL refuses two ranks on one GPU), and
between the workers of a cluster over gRPC.

The gradients are packed into a few large buffers before they are reduced, the way
tf_cnn_benchmarks' gradient repacking and PyTorch DDP's buckets do: one collective per
variable would pay a launch and a synchronization per tensor (Inception v3 has 196 of them,
most small). Every device packs the same variables, in the same order, into the same buffers:
the variables in reverse creation order (the last layers' gradients are ready first, so the
first buffer can be reduced while backpropagation goes on), cut into `num_buffers` runs of
about equal size.

The workers of a cluster without parameter servers also share a group of one device each
(WORKER_GROUP_KEY): the chief's variables are broadcast through it at the start
(`broadcast_variables`), and small per-step values are summed over it (`sum_over_workers`).
"""

import dataclasses
import itertools

import tensorflow as tf

NCCL = "nccl"
RING = "ring"
GRADIENT_GROUP_KEY = 1  # the collective group of every device's gradient buffers
WORKER_GROUP_KEY = 2  # one device of each worker of a cluster: broadcasts and votes
# Instance keys of the worker group's collectives start here, far from the gradients' keys
# (which count from 1), so the two never meet whatever the number of buffers.
WORKER_INSTANCE_KEYS = 1_000_000
# Synchronized batch norm (model/synced_batch_norm.py): group g of towers is collective group
# BATCH_NORM_GROUP_KEYS + g; its layers' sums take instance keys from
# BATCH_NORM_INSTANCE_KEYS on.
BATCH_NORM_GROUP_KEYS = 16
BATCH_NORM_INSTANCE_KEYS = 2_000_000
# A broadcast sends at most this many elements in one collective (64 MiB of float32), so that
# no one message holds the whole model (Inception v3 with its RMSProp slots and moving
# averages: about 4 x 24M floats, some 350 MB).
BROADCAST_BUFFER_ELEMENTS = 1 << 24
# What CollectiveBcastSendV2/RecvV2 carry; other dtypes travel cast to int32 (bool) or
# float32 and are cast back.
BROADCAST_DTYPES = (tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32, tf.int64)


@dataclasses.dataclass(frozen=True)
class AllReduceSpec:
    """How gradients are summed across the towers' devices.

    communication: NCCL or RING; num_buffers: buffers the gradients are packed into (0: one
    collective per gradient, unpacked); num_workers: processes taking part, each with the same
    number of devices (a cluster without parameter servers; 1 on one machine).
    """
    communication: str = RING
    num_buffers: int = 4
    num_workers: int = 1

    def describe(self):
        """A few words for the run's first log line."""
        link = "NCCL" if self.communication == NCCL else "the collective ring"
        if self.num_workers > 1:
            link += f" across {self.num_workers} workers"
        packing = (f"{self.num_buffers} buffer(s)" if self.num_buffers
                   else "one collective per gradient")
        return f"all-reduce over {link}, {packing}"


class InstanceKeys:
    """Instance keys of the collectives of one graph, in the order they are built: every
    worker of a cluster builds the same graph, hence the same keys for the same buffers."""

    def __init__(self, start=1):
        self._next = itertools.count(start)

    def next(self):
        """A key no collective of this graph has used yet."""
        return next(self._next)


class GradientReducer:
    """Sums equally shaped tensor lists across `devices` (and the same devices of every other
    worker) by `spec`, giving each buffer of the graph its own collective instance."""

    def __init__(self, devices, spec):
        self.devices, self.spec = list(devices), spec
        self._keys = InstanceKeys()

    def sum(self, per_device):
        """`sum_across_devices` of `per_device` (one tensor list per device of `devices`)."""
        return sum_across_devices(per_device, self.devices, self.spec, self._keys)


def buffer_plan(sizes, num_buffers):
    """Which tensors go into which buffer: a list of lists of indices into `sizes` (element
    counts), in reverse order (the last first), cut into at most `num_buffers` consecutive runs
    of about equal total size; num_buffers 0: one run per tensor."""
    order = list(reversed(range(len(sizes))))
    if not num_buffers or num_buffers >= len(order):
        return [[index] for index in order]
    total, plan, run, filled = sum(sizes), [], [], 0
    for index in order:
        run.append(index)
        filled += sizes[index]
        # Close a run once it holds its share of what has been packed so far.
        if len(plan) < num_buffers - 1 and filled >= total * (len(plan) + 1) / num_buffers:
            plan.append(run)
            run = []
    if run:
        plan.append(run)
    return plan


def sum_across_devices(per_device, devices, spec, keys):
    """Each device's tensors summed over every device (of every worker), on each device.

    Args:
      per_device: one list per device of this worker, each of the same length, shapes and
        dtypes (float32 gradients); entry k of every list is summed with entry k of the others.
      devices: the device of each list.
      spec: AllReduceSpec; keys: the graph's InstanceKeys.

    Returns a list per device of the sums (same shapes), each on its device.
    """
    if not per_device or not per_device[0]:
        return [[] for _ in per_device]
    sizes = [tensor.shape.num_elements() for tensor in per_device[0]]
    summed = [[None] * len(sizes) for _ in per_device]
    for number, indices in enumerate(buffer_plan(sizes, spec.num_buffers)):
        packed = [_pack([tensors[i] for i in indices], device, number)
                  for tensors, device in zip(per_device, devices)]
        reduced = _reduce(packed, devices, spec, keys)
        for device_index, (buffer, device) in enumerate(zip(reduced, devices)):
            parts = _unpack(buffer, [per_device[device_index][i] for i in indices], device)
            for index, part in zip(indices, parts):
                summed[device_index][index] = part
    return summed


def _pack(tensors, device, number):
    with tf.device(device), tf.name_scope(f"pack_{number}"):
        if len(tensors) == 1:
            return tf.reshape(tensors[0], [-1])
        return tf.concat([tf.reshape(tensor, [-1]) for tensor in tensors], axis=0)


def _unpack(buffer, like, device):
    with tf.device(device), tf.name_scope("unpack"):
        if len(like) == 1:
            return [tf.reshape(buffer, like[0].shape)]
        parts = tf.split(buffer, [tensor.shape.num_elements() for tensor in like])
        return [tf.reshape(part, tensor.shape) for part, tensor in zip(parts, like)]


def _reduce(packed, devices, spec, keys):
    """One buffer per device, summed across every device of every worker."""
    if len(devices) * spec.num_workers == 1:
        return packed  # one tower: nothing to sum with
    if spec.communication == NCCL:
        # nccl_ops is TensorFlow's own wrapper of NcclAllReduce (one op per device, one
        # communicator for all of them); it has no public name in TF 2.
        from tensorflow.python.ops import nccl_ops  # pylint: disable=import-outside-toplevel
        return nccl_ops.all_sum(packed)
    instance = keys.next()
    group_size = len(devices) * spec.num_workers
    reduced = []
    for buffer, device in zip(packed, devices):
        with tf.device(device):
            reduced.append(collective_sum(buffer, group_size, GRADIENT_GROUP_KEY, instance))
    return reduced


def collective_sum(tensor, group_size, group_key, instance_key, name="all_reduce"):
    """`tensor` summed over the `group_size` members of the collective group `group_key`, each
    of which builds this op with the same `instance_key` (on its own device): TensorFlow's
    collective ring."""
    return tf.raw_ops.CollectiveReduceV2(
        input=tensor, group_size=group_size, group_key=group_key, instance_key=instance_key,
        ordering_token=[], merge_op="Add", final_op="Id", communication_hint=RING, name=name)


def broadcast_variables(variables, device, num_workers, is_source, keys):
    """An op that sets `variables` on every worker of a cluster to the source worker's values
    (the chief's, after it initialized or restored them): each worker builds it once, with the
    same variables in the same order (on `device`, one per worker) and is_source True on the
    source alone. Variables of one dtype travel packed, in buffers of at most
    BROADCAST_BUFFER_ELEMENTS elements. A cluster of one worker (one left after a resize) has
    nobody to send to: no op."""
    if num_workers == 1:
        return tf.no_op(name="broadcast_variables")
    by_dtype = {}
    for variable in variables:
        by_dtype.setdefault(variable.dtype.base_dtype, []).append(variable)
    assigns = []
    with tf.device(device), tf.name_scope("broadcast_variables"):
        for dtype in sorted(by_dtype, key=lambda d: d.name):
            group = by_dtype[dtype]
            sizes = [variable.shape.num_elements() for variable in group]
            count = -(-sum(sizes) // BROADCAST_BUFFER_ELEMENTS)
            for indices in buffer_plan(sizes, count):
                chosen = [group[i] for i in indices]
                carried = dtype if dtype in BROADCAST_DTYPES else (
                    tf.int32 if dtype == tf.bool else tf.float32)
                instance = keys.next()
                if is_source:
                    packed = _pack([tf.cast(tf.convert_to_tensor(v), carried) for v in chosen],
                                   device, instance)
                    assigns.append(tf.raw_ops.CollectiveBcastSendV2(
                        input=packed, group_size=num_workers, group_key=WORKER_GROUP_KEY,
                        instance_key=instance, communication_hint=RING))
                    continue
                received = tf.raw_ops.CollectiveBcastRecvV2(
                    T=carried, group_size=num_workers, group_key=WORKER_GROUP_KEY,
                    instance_key=instance, communication_hint=RING,
                    shape=[sum(v.shape.num_elements() for v in chosen)])
                for variable, part in zip(chosen, _unpack(received, chosen, device)):
                    assigns.append(tf.compat.v1.assign(variable, tf.cast(part, dtype)))
    return tf.group(*assigns, name="broadcast_variables")


def sum_over_workers(tensor, device, num_workers, keys):
    """`tensor` (on `device`, one per worker) summed over the workers of a cluster, on every
    worker: one collective of the worker group (the tensor itself for a cluster of one)."""
    with tf.device(device):
        if num_workers == 1:
            return tf.identity(tensor, name="sum_over_workers")
        return collective_sum(tensor, num_workers, WORKER_GROUP_KEY, keys.next(),
                              name="sum_over_workers")
