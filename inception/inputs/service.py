"""The training input made elsewhere: TensorFlow's tf.data service.

A dispatcher hands out work and its workers (processes on this or other machines, usually
CPU machines) run the input pipeline, everything before the towers, and stream finished
batches to the trainers (`--input_service=grpc://host:port`; `//inception:input_service`
starts the service). The pipeline's source is the epochs of the one seeded order
(pipeline.py), and the service runs in its `distributed_epoch` mode: the dispatcher gives
each epoch to one worker, which reads, decodes and batches it whole, so every example is read
once an epoch however many workers there are; the trainers of a cluster share one job, and
each batch goes to one of them. What it gives up: the order in which finished batches reach
a trainer depends on which worker is faster, so no seed fixes it (--deterministic is refused),
and a resumed run starts at the first epoch after the records it had consumed instead of the
next record (pipeline._start; a cluster's trainers go on with their job: ServiceInput).

A lost worker is the service's own business (the dispatcher gives its epoch to another);
when the dispatcher and every worker are gone, a trainer's read waits forever, so the trainer
limits each step (loop/hooks.TimedWorkerHooks) and ends with `lost_service_error`.
"""

import dataclasses
import socket
import uuid
import zlib

import tensorflow as tf

from common import cli
from inception.config import sources

PROCESSING_MODE = "distributed_epoch"
REACHABLE_TIMEOUT_SECS = 5.0


class InputServiceError(cli.UserError):
    """The input service cannot be reached, or stopped serving; the message names it and
    says what to do. A restart may get past it (the service may be started again)."""
    retryable = True


@dataclasses.dataclass(frozen=True)
class ServiceInput:
    """The service at `address` (grpc://host:port) and the name of the job that the run's
    trainers read from. from_position: the job starts at the first epoch after the records
    the run has consumed (a new job each start); else at the order's first epoch (a job the
    trainers of a cluster share, and join again after a restart while the service keeps it:
    the trainers cannot agree on a new name, as tf.data names jobs before anything runs)."""
    address: str
    job_name: str
    from_position: bool = True

    @classmethod
    def for_run(cls, address, train_dir, seed, cluster):
        """The service input of the run in `train_dir` whose input order is `seed`; `cluster`:
        whether the trainers are the workers of a cluster."""
        job_name = f"inception-{zlib.crc32(train_dir.encode()):08x}-{seed}"
        if cluster:
            return cls(address, job_name, from_position=False)
        return cls(address, f"{job_name}-{uuid.uuid4().hex[:8]}")

    def distribute(self, dataset):
        """`dataset` made by the service's workers, in this input's job."""
        return dataset.apply(tf.data.experimental.service.distribute(
            processing_mode=PROCESSING_MODE, service=self.address, job_name=self.job_name))

    def describe(self):
        """What the log's first lines say of the input."""
        start = ("the first epoch after the records consumed" if self.from_position
                 else "the job's own place (a new job: the order's first epoch)")
        return (f"input: from the tf.data service at {self.address}, job {self.job_name} "
                f"(its workers read, decode and batch whole epochs; reading from {start})")


def check_reachable(address, timeout_secs=REACHABLE_TIMEOUT_SECS):
    """Raises InputServiceError when nothing accepts connections at `address`."""
    host, port = sources.service_host_port(address)
    try:
        socket.create_connection((host, port), timeout=timeout_secs).close()
    except OSError as error:
        raise InputServiceError(
            f"--input_service={address}: no dispatcher answers there ({error.strerror or error}); "
            f"start it with `bin/bazel run //inception:input_service -- --port={port}` on "
            f"{host}, or fix the address.") from None


def lost_service_error(address, step, waited_secs):
    """The InputServiceError of a step that got no batch from the service in `waited_secs`."""
    return InputServiceError(
        f"training got no input from the tf.data service at {address} for {waited_secs:g} s "
        f"after step {step}: its dispatcher or every worker is gone (or a step takes longer: "
        "raise --input_service_timeout_secs); start the service again and rerun this command, "
        "which resumes from the last checkpoint.")


def start_dispatcher(port, work_dir=""):
    """A tf.data service dispatcher listening on `port` (0: any free port); with `work_dir`,
    fault tolerant: its journal there lets a restarted dispatcher resume its jobs."""
    config = tf.data.experimental.service.DispatcherConfig(
        port=port, work_dir=work_dir or None, fault_tolerant_mode=bool(work_dir))
    return tf.data.experimental.service.DispatchServer(config)


def start_worker(dispatcher_address, port=0):
    """A tf.data service worker (listening on `port`, 0: any) that registers with the
    dispatcher at `dispatcher_address` (host:port, no protocol)."""
    return tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=dispatcher_address,
                                                  port=port))


def registered_workers(dispatcher):
    """The workers registered with `dispatcher` (a DispatchServer of this process)."""
    return dispatcher._num_workers()  # pylint: disable=protected-access  # no public count
