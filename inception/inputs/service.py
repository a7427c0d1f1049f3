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
when the dispatcher or every worker is gone, a trainer's read waits forever, so the trainer
watches a step that waits (`unreachable`, loop/liveness.py: a line naming the service within
a minute) and limits each step (loop/hooks.TimedWorkerHooks: `lost_service_error` after
--input_service_timeout_secs, for a service that answers but serves nothing).
"""

import dataclasses
import fcntl
import functools
import ipaddress
import socket
import struct
import uuid
import zlib

import grpc  # TensorFlow's own dependency, for the dispatcher's list of workers
import tensorflow as tf
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

from common import cli
from inception.config import recovery
from inception.config import sources

PROCESSING_MODE = "distributed_epoch"
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address
# What TensorFlow's tf.data service servers listen on: every interface (their configs take a
# port but no address to bind).
LISTENS_ON = "all interfaces"


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


def check_reachable(address, timeout_secs=recovery.SERVICE_PROBE_TIMEOUT_SECS):
    """Raises InputServiceError when nothing accepts connections at `address`."""
    host, port = sources.service_host_port(address)
    try:
        socket.create_connection((host, port), timeout=timeout_secs).close()
    except OSError as error:
        raise InputServiceError(
            f"--input_service={address}: no dispatcher answers there ({error.strerror or error}); "
            f"start it with `{cli.program_command('input_service')} --port={port}` on "
            f"{host}, or fix the address.") from None


def unreachable(address, timeout_secs=recovery.SERVICE_PROBE_TIMEOUT_SECS,
                workers_required=True):
    """Why the tf.data service at `address` (grpc://host:port) cannot serve a trainer now, or
    None: its dispatcher does not accept connections, or none of the workers registered with
    it does (the dispatcher lists a lost worker for minutes); with `workers_required` False
    (a start, while workers may still be registering), an empty list is no reason."""
    host, port = sources.service_host_port(address)
    try:
        socket.create_connection((host, port), timeout=timeout_secs).close()
        workers = registered_worker_addresses(f"{host}:{port}", timeout_secs)
    except (OSError, grpc.RpcError) as error:
        return f"its dispatcher at {host}:{port} does not answer ({_reason(error)})"
    if not workers:
        return "no worker is registered with its dispatcher" if workers_required else None
    failures = []
    for worker in workers:
        worker_host, _, worker_port = worker.rpartition(":")
        try:
            socket.create_connection((worker_host, int(worker_port)),
                                     timeout=timeout_secs).close()
            return None
        except (OSError, ValueError) as error:
            failures.append(f"{worker}: {_reason(error)}")
    return f"none of its {len(workers)} worker(s) answers ({'; '.join(failures)})"


def _reason(error):
    if isinstance(error, grpc.RpcError):
        return error.code().name  # pylint: disable=no-member
    return error.strerror if isinstance(error, OSError) and error.strerror else (
        str(error) or type(error).__name__)


def registered_worker_addresses(dispatcher_address, timeout_secs):
    """The addresses (host:port) of the workers registered with the dispatcher at
    `dispatcher_address` (host:port), from its GetWorkers call; raises grpc.RpcError."""
    with grpc.insecure_channel(dispatcher_address) as channel:
        call = channel.unary_unary("/tensorflow.data.DispatcherService/GetWorkers",
                                   request_serializer=lambda unused: b"",
                                   response_deserializer=_workers_response().FromString)
        return [worker.address for worker in call(None, timeout=timeout_secs).workers]


@functools.lru_cache(maxsize=None)
def _workers_response():
    # TensorFlow's wheel has no Python module of the dispatcher's protocol
    # (tensorflow/core/data/service/dispatcher.proto): the reply's two messages, declared here.
    proto = descriptor_pb2.FileDescriptorProto(name="inception_dispatcher_probe.proto",
                                               package="tensorflow.data", syntax="proto3")
    info = proto.message_type.add(name="WorkerInfo")
    info.field.add(name="address", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                   label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    reply = proto.message_type.add(name="GetWorkersResponse")
    reply.field.add(name="workers", number=1, type_name=".tensorflow.data.WorkerInfo",
                    type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.data.GetWorkersResponse"))


def lost_service_line(address, step, reason):
    """The line of a trainer that lost the tf.data service at `address` during the step after
    `step`, for `reason` (from `unreachable`)."""
    return (f"training lost the tf.data service at {address} after step {step}: {reason}. "
            "Start the service again and rerun this command, which resumes from the last "
            "checkpoint.")


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


def start_worker(dispatcher_address, host, port=0):
    """A tf.data service worker (listening on `port`, 0: any) that registers with the
    dispatcher at `dispatcher_address` (host:port, no protocol) as `host`:its port, the
    address at which the dispatcher sends trainers to it (TensorFlow's default, localhost,
    would send every trainer to its own machine)."""
    return tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=dispatcher_address,
                                                  worker_address=f"{host}:%port%", port=port))


def bound_port(server):
    """The port a tf.data service server of this process listens on."""
    return int(server._address.rpartition(":")[2])  # pylint: disable=protected-access


def default_host(dispatcher_address):
    """(address, how it was chosen) under which this machine's workers register with the
    dispatcher at `dispatcher_address` (host:port) when --host is not given.

    The address this machine's packets to the dispatcher leave from (a UDP socket's connect
    picks the route and sends nothing): on a network the trainers share with the dispatcher,
    that is the address they reach this machine at. A dispatcher on this machine (its route
    is loopback) leaves no such clue: then this machine's one non-loopback IPv4 address, or
    of several the one its host name resolves to, or else the first; with none, localhost,
    which only trainers on this machine can reach."""
    host, _, port = dispatcher_address.rpartition(":")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, int(port)))
            source = probe.getsockname()[0]
    except OSError:
        source = "127.0.0.1"
    if not ipaddress.ip_address(source).is_loopback:
        return source, f"the address this machine reaches the dispatcher at {host} from"
    addresses = interface_addresses()
    if not addresses:
        return "localhost", ("no network interface but loopback: trainers on other machines "
                             "cannot reach these workers")
    try:
        named = socket.gethostbyname(socket.gethostname())
    except OSError:
        named = None
    chosen = named if named in addresses else addresses[0]
    others = [address for address in addresses if address != chosen]
    also = f"; also here: {', '.join(others)}" if others else ""
    return chosen, f"this machine's network address{also}"


def interface_addresses():
    """The IPv4 addresses of this machine's interfaces, loopback left out, in interface
    order (the standard library lists interfaces but not their addresses: an ioctl asks)."""
    addresses = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                    struct.pack("256s", name[:15].encode()))
            except OSError:  # no IPv4 address on this interface
                continue
            address = socket.inet_ntoa(reply[20:24])
            if not ipaddress.ip_address(address).is_loopback:
                addresses.append(address)
    return addresses


def registered_workers(dispatcher):
    """The workers registered with `dispatcher` (a DispatchServer of this process)."""
    return dispatcher._num_workers()  # pylint: disable=protected-access  # no public count
