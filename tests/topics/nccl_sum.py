"""NCCL's all-reduce against the collective ring on the machine's first two GPUs (run as its
own process by gpu_test.py, which hides every GPU but one from itself).

Each GPU holds gradient-like float32 tensors; parallel/all_reduce.py sums them with NCCL and
with the ring, packed into buffers as training packs them. With two devices each sum is one
float32 addition, the same in any order, so the two must agree bit for bit with each other
and with NumPy's sum. Prints "nccl equals ring" and exits 0, or fails with what differs.
"""

import sys

import numpy as np
import tensorflow as tf

from inception.parallel import all_reduce

tf1 = tf.compat.v1
SHAPES = ((3, 3, 32, 64), (64,), (1000, 2048), (7,))


def summed(communication, values, devices):
    """The per-device sums of `values` (per device, a list of arrays) by `communication`."""
    with tf.Graph().as_default():
        per_device = []
        for device, arrays in zip(devices, values):
            with tf.device(device):
                per_device.append([tf.constant(array) for array in arrays])
        spec = all_reduce.AllReduceSpec(communication=communication, num_buffers=2)
        sums = all_reduce.sum_across_devices(per_device, devices, spec,
                                             all_reduce.InstanceKeys())
        with tf1.Session() as session:
            return session.run(sums)


def main():
    tf1.disable_eager_execution()
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) < 2:
        sys.exit(f"NCCL needs two GPUs; TensorFlow sees {len(gpus)}")
    devices = ["/gpu:0", "/gpu:1"]
    rng = np.random.default_rng(0)
    values = [[rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]
              for _ in devices]
    expected = [a + b for a, b in zip(*values)]
    by_nccl = summed(all_reduce.NCCL, values, devices)
    by_ring = summed(all_reduce.RING, values, devices)
    for device_index in range(len(devices)):
        for index, want in enumerate(expected):
            for name, got in (("nccl", by_nccl), ("ring", by_ring)):
                if not np.array_equal(got[device_index][index], want):
                    sys.exit(f"{name}: tensor {index} on {devices[device_index]} is not the sum")
    print("nccl equals ring")


if __name__ == "__main__":
    main()
