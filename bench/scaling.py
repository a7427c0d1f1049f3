"""`bazel run //bench:scaling [-- --report=bench/results/gpu-h200.json]`: several GPUs, on paper.

We measure on one GPU; this models what one training step costs on N GPUs of one machine from
that measurement, for each way of sharing the variables, and prints the predicted scaling
efficiency (images/sec on N GPUs / (N x the best one-GPU rate)) over PCIe Gen5 and over NVLink.

Per step each GPU computes its batch b at the one-GPU rate r: t_compute = b / r. On top:
- variables on the CPU (the original's design, --variable_device=cpu): every GPU copies the
  weights in (P bytes) and its gradients out (P bytes) over its link, `gpus_per_uplink` GPUs
  sharing one host link; the host then averages N gradients and applies RMSProp and the moving
  averages, reading and writing (N + 11) x P bytes of host memory (N gradients read and the
  average written; variable, gradient and two RMSProp slots read, three written; variable and
  average read, average written), all before the next step can start.
- variables on GPU 0 (--variable_device=gpu): GPU 0 receives N - 1 gradients and sends N - 1
  copies of the weights over its own link, then updates in its memory ((N + 11) x P bytes).
- replicated variables (--variable_update=replicated, NCCL's ring all-reduce, as
  tf_cnn_benchmarks does): the gradients packed into B buffers (--all_reduce_buffers), each
  summed by one all-reduce in which every GPU sends and receives 2 (N - 1) / N of it, at a
  latency of a launch plus 2 (N - 1) ring hops per buffer; then every GPU updates its own copy
  (11 x P bytes of its memory). The last buffer (the first layers' gradients, ready last)
  cannot overlap backpropagation and counts with the update.
The pessimistic figure exposes every transfer; the optimistic one hides the transfers behind
the computation (gradients leave while backpropagation goes on; weights arrive layer by layer)
and exposes only the update. Link and memory bandwidths and latencies are the assumptions
below, not measurements.
"""

import dataclasses
import json

from absl import app
from absl import flags

from inception.config import rules

FLAGS = flags.FLAGS
flags.DEFINE_string("report", "", "A GPU benchmark report (bench/results/gpu-*.json) to take "
                    "the one-GPU rates and batch from; empty: the rates named by the flags.")
flags.DEFINE_float("tf32_images_per_sec", 1700.0, "One-GPU TF32 rate without a report.")
flags.DEFINE_float("bf16_images_per_sec", 3000.0, "One-GPU bf16 rate without a report.")
flags.DEFINE_integer("per_gpu_batch", 256, "Images per GPU per step without a report.")
flags.DEFINE_integer("gpus", 8, "GPUs of the machine modelled.")

# Inception v3, 1001 classes, auxiliary head: 27,145,970 trainable float32 values, counted from
# the graph (tf.compat.v1.trainable_variables()).
PARAMETER_BYTES = 27_145_970 * 4
PCIE = "PCIe Gen5 x16"
LINKS = {  # achievable bytes/s per direction between GPUs (assumed)
    PCIE: 50e9,      # 64 GB/s raw
    "NVLink 4 (H100/H200 SXM)": 370e9,  # 450 GB/s raw per direction
}
GPUS_PER_UPLINK = 2  # 8-GPU servers hang two GPUs off each PCIe switch's x16 host link
HOST_UPDATE_BYTES_PER_SEC = 40e9  # TensorFlow's CPU kernels on a server, assumed
GPU_UPDATE_BYTES_PER_SEC = 3000e9  # an H200's 4.8 TB/s HBM, elementwise kernels
COLLECTIVE_LAUNCH_SEC = 30e-6  # one all-reduce's launch and synchronization (assumed)
RING_HOP_SEC = 8e-6  # one hop of a ring step between two GPUs (assumed)
GRADIENT_TENSORS = 196  # Inception v3's trainable variables (counted): one all-reduce each


@dataclasses.dataclass(frozen=True)
class Step:
    """Seconds of one step: the computation, the exposed transfers (pessimistic) and the
    update that no overlap hides."""
    compute: float
    transfers: float
    update: float

    def efficiency(self, optimistic):
        """images/sec on N GPUs / (N x one GPU's compute-only rate)."""
        exposed = self.update + (0.0 if optimistic else self.transfers)
        return self.compute / (self.compute + exposed)


def cpu_variables(compute, gpus, link=None):
    """Variables, averaging and update on the host, reached over PCIe whatever links the GPUs
    have between them (`link` is ignored)."""
    del link
    sharing = min(gpus, GPUS_PER_UPLINK)
    return Step(compute, 2 * sharing * PARAMETER_BYTES / LINKS[PCIE],
                (gpus + 11) * PARAMETER_BYTES / HOST_UPDATE_BYTES_PER_SEC)


def gpu_variables(compute, gpus, link):
    """Variables, averaging and update on GPU 0, the hub of every transfer."""
    return Step(compute, 2 * (gpus - 1) * PARAMETER_BYTES / link,
                (gpus + 11) * PARAMETER_BYTES / GPU_UPDATE_BYTES_PER_SEC)


def ring_all_reduce(compute, gpus, link, buffers=rules.DEFAULT_ALL_REDUCE_BUFFERS):
    """Replicated variables, gradients packed into `buffers` (0: one per variable) and summed
    by a ring all-reduce each."""
    collectives = buffers or GRADIENT_TENSORS
    latency = COLLECTIVE_LAUNCH_SEC + 2 * (gpus - 1) * RING_HOP_SEC
    one = 2 * (gpus - 1) / gpus * PARAMETER_BYTES / collectives / link + latency
    return Step(compute, (collectives - 1) * one,
                one + 11 * PARAMETER_BYTES / GPU_UPDATE_BYTES_PER_SEC)


PLACEMENTS = {"variables on the CPU": cpu_variables, "variables on GPU 0": gpu_variables,
              f"replicated, {rules.DEFAULT_ALL_REDUCE_BUFFERS} buffers": ring_all_reduce}


def rates_from_report(path):
    """(per-GPU batch, {precision: one-GPU images/sec}) from a GPU benchmark report."""
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    rates = {"TF32": report.get("ours_images_per_sec"),
             "bf16": report.get("ours_bf16_images_per_sec")}
    return report["settings"]["per_gpu_batch"], {k: v for k, v in rates.items() if v}


def table(batch, rates, gpus):
    """Markdown rows: precision, placement, link, efficiency pessimistic / optimistic."""
    rows = ["| one-GPU rate | placement | link | step overhead (ms) | efficiency at "
            f"{gpus} GPUs |", "| --- | --- | --- | --- | --- |"]
    for precision, rate in rates.items():
        compute = batch / rate
        for placement, model in PLACEMENTS.items():
            for link_name, link in LINKS.items():
                if model is cpu_variables and link_name != PCIE:
                    continue  # the host is reached over PCIe only
                step = model(compute, gpus, link)
                rows.append(
                    f"| {precision} {rate:,.0f} images/s | {placement} | {link_name} | "
                    f"{1000 * step.update:.1f} + {1000 * step.transfers:.1f} | "
                    f"{step.efficiency(False):.1%} to {step.efficiency(True):.1%} |")
    return "\n".join(rows)


def main(argv):
    del argv
    if FLAGS.report:
        batch, rates = rates_from_report(FLAGS.report)
    else:
        batch = FLAGS.per_gpu_batch
        rates = {"TF32": FLAGS.tf32_images_per_sec, "bf16": FLAGS.bf16_images_per_sec}
    print(f"per-GPU batch {batch}; parameters {PARAMETER_BYTES / 1e6:.1f} MB; step overhead = "
          "update + transfers (pessimistic adds both, optimistic only the update)")
    print(table(batch, rates, FLAGS.gpus))
    for precision, rate in rates.items():
        one = cpu_variables(batch / rate, 1)
        print(f"one GPU, {precision}: variables on the CPU cost {1000 * one.update:.1f} ms of "
              f"update + {1000 * one.transfers:.1f} ms of copies per step of "
              f"{1000 * batch / rate:.1f} ms ({one.efficiency(False):.0%} of the rate with "
              "the variables on the GPU)")


if __name__ == "__main__":
    app.run(main)
