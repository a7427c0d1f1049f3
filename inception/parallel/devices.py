"""Where and in which arithmetic a run's towers compute: one frozen `Placement`, resolved once
(`resolve_placement`) and only read by the graph builder, the loop and the evaluation job.

The towers run one per GPU, or on virtual CPU devices on machines without GPUs. A session
config carries the placement: N virtual CPU devices (`device_count`), or each GPU split into
equal virtual GPUs when the user asks for more towers than GPUs.

GPU devices are created once per process, by whatever asks for them first, and TensorFlow keeps
each GPU's memory allocator for the life of the process with the options of that first
creator. Building a TF2 graph already does it (a `tf.cond` registers its branches with the
eager context, which then creates every GPU with its defaults: no memory growth, the whole GPU
for GPU 0), and so does counting records with tf.data. A session config asking for virtual GPUs
afterwards got its second virtual GPU squeezed into what GPU 0 left ("No BLAS for stream", or
out of memory on GPU:1). So `configure_gpus` sets the process's GPU options first thing, and the
session config repeats them.
"""

import dataclasses
import math

import tensorflow as tf

from inception.config import recipe
from inception.config import rules
from inception.parallel import all_reduce as all_reduce_lib
from inception.parallel import grappler
from inception.parallel import hardware
from inception.parallel import precision as precision_lib
from inception.parallel.hardware import PlacementError
from inception.parallel import variable_update

tf1 = tf.compat.v1
DEFAULT_CPU_TOWERS = 2
HOST_DEVICE = "/cpu:0"  # the input pipeline's, and the variables' with --variable_device=cpu


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


def configure_gpus(placement):
    """Sets this process's GPU options for `placement` before anything creates the devices.

    One tower per GPU: memory growth on every GPU, so an evaluation job or a second run can share
    it (best effort: where the devices already exist they keep their options, which a tower per
    GPU does not need). More towers than GPUs: each GPU split into virtual GPUs of
    `placement.virtual_gpu_memory_mb`, which must happen before anything creates the devices:
    call this before building a graph or running an op. Calling it again with the same placement
    is harmless. Raises PlacementError when the split cannot be had in this process.
    """
    if placement.device_type != "gpu":
        return
    gpus = tf.config.list_physical_devices("GPU")
    wanted = _logical_configuration(placement)
    for gpu in gpus:
        if wanted is None:
            _try_memory_growth(gpu)
            continue
        try:
            tf.config.set_logical_device_configuration(gpu, wanted)
        except RuntimeError as error:
            raise PlacementError(
                f"TensorFlow created this process's GPU devices before the towers were placed "
                f"({error}); split GPUs into virtual GPUs in a new process.") from None
    if hardware.eager_devices_created():
        _check_logical_gpus(placement, gpus)


def _try_memory_growth(gpu):
    if tf.config.get_logical_device_configuration(gpu):
        return  # already split into virtual GPUs (e.g. by a test process); growth cannot apply
    try:
        tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:
        pass  # the devices exist already, with TensorFlow's default: one tower still fits


def _logical_configuration(placement):
    if not placement.virtual_gpu_memory_mb:
        return None
    per_gpu = math.ceil(placement.num_towers / placement.physical_gpus)
    return [tf.config.LogicalDeviceConfiguration(memory_limit=placement.virtual_gpu_memory_mb)
            for _ in range(per_gpu)]


def _check_logical_gpus(placement, gpus):
    logical = len(tf.config.list_logical_devices("GPU"))
    if logical < placement.num_towers:
        raise PlacementError(
            f"this process already has {logical} GPU device(s) for {len(gpus)} GPU(s), too few "
            f"for {placement.describe()}; start a new process.")


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
    """A tf.compat.v1.ConfigProto that creates the devices `placement` needs (for GPUs the same
    options as configure_gpus, which must have run first)."""
    config = tf1.ConfigProto(allow_soft_placement=True,
                             intra_op_parallelism_threads=intra_op_threads,
                             inter_op_parallelism_threads=inter_op_threads)
    if placement.device_type == "cpu":
        config.device_count["CPU"] = placement.num_towers
        return grappler.lean_cpu_rewrites(config)
    split = _logical_configuration(placement)
    if split is None:
        config.gpu_options.allow_growth = True
        return config
    for _ in range(placement.physical_gpus):
        config.gpu_options.experimental.virtual_devices.add(
            memory_limit_mb=[float(device.memory_limit) for device in split])
    return config


VARIABLE_DEVICE_NAMES = {"cpu": HOST_DEVICE, "gpu": "/gpu:0"}  # --variable_device -> device


def check_variable_device(variable_device, placement, distributed=False):
    """Raises PlacementError unless the variables can live on `variable_device` ('auto', 'cpu'
    or 'gpu'); returns its device name. 'gpu' (the first GPU) needs GPU towers on this machine.

    'auto': the first GPU when the towers share one physical GPU (nothing to average, so a copy
    of the weights to the host and back would be pure cost); otherwise the CPU, as in the
    original (several GPUs average there; a cluster keeps them on its parameter servers).
    """
    if variable_device == "auto":
        one_gpu = placement.device_type == "gpu" and placement.physical_gpus == 1
        variable_device = "gpu" if one_gpu and not distributed else "cpu"
    if variable_device == "gpu":
        if placement.device_type != "gpu":
            raise PlacementError("--variable_device=gpu needs GPU towers and this machine has "
                                 "no GPU; leave it at auto or cpu.")
        if distributed:
            raise PlacementError("--variable_device=gpu is for one machine; on a cluster the "
                                 "variables live on the parameter servers.")
    return VARIABLE_DEVICE_NAMES[variable_device]


def apply_xla(config):
    """Turns on XLA auto-clustering in `config` (TensorFlow compiles the fusable parts of the
    step); returns it. On CPUs this works only in a process that called
    driver.startup.allow_xla_on_cpu() before TensorFlow listed its devices (every entry point
    does)."""
    config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
    return config


@dataclasses.dataclass(frozen=True)
class Placement:
    """A run's towers, resolved: their devices, where the variables live, the arithmetic.

    compute_dtype: the dtype GPU towers are built in (bfloat16 / float16), None for float32
      (and for CPU towers, whose bf16 comes from oneDNN's rewrite in the session config).
    initial_loss_scale: dynamic loss scaling starts at this scale (fp16); None: off.
    all_reduce: with replicated variables (--variable_update), how the towers' gradients are
      summed (all_reduce.AllReduceSpec); the variables' own copy is then on the first tower's
      device, `variable_device`. None: the variables live on `variable_device` alone.
    batch_norm_group_size: --sync_batch_norm's towers per group (resolved, 2 or more); None:
      each tower's batch norm on its own batch.
    """
    towers: TowerPlacement
    variable_device: str
    precision: str
    compute_dtype: object
    initial_loss_scale: float
    xla: bool = False
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    all_reduce: all_reduce_lib.AllReduceSpec = None
    batch_norm_group_size: int = None

    @property
    def variable_update(self):
        """'replicated' or 'parameter_server'."""
        return rules.REPLICATED if self.all_reduce is not None else rules.PARAMETER_SERVER

    @property
    def num_towers(self):
        """How many towers."""
        return self.towers.num_towers

    @property
    def tower_devices(self):
        """Each tower's device name."""
        return self.towers.tower_devices

    @property
    def prefetch_inputs(self):
        """Whether each tower's input is copied to its device a step ahead: GPU towers."""
        return self.towers.device_type == "gpu"

    def session_config(self):
        """The tf.compat.v1.ConfigProto of the towers: devices, threads, precision, XLA."""
        config = precision_lib.apply_precision(
            session_config(self.towers, self.intra_op_threads, self.inter_op_threads),
            self.precision, self.towers)
        return apply_xla(config) if self.xla else config

    def describe_arithmetic(self):
        """The log line's part about the arithmetic and what moves where, e.g. "bf16; inputs
        prefetched to the GPUs; XLA"."""
        extras = "".join([
            f"; variables replicated on every tower, {self.all_reduce.describe()}"
            if self.all_reduce is not None else
            f"; variables on {self.variable_device.strip('/').upper()}"
            if self.variable_device != VARIABLE_DEVICE_NAMES["cpu"] else "",
            "; inputs prefetched to the GPUs" if self.prefetch_inputs else "",
            f"; batch norm synchronized over groups of {self.batch_norm_group_size} towers"
            if self.batch_norm_group_size else "",
            "; XLA" if self.xla else ""])
        return f"{self.precision}{extras}"


def resolve_placement(device_settings, cluster=None):
    """The Placement of config.settings.DeviceSettings on this machine (a worker of `cluster`,
    a config.cluster.ClusterSettings, when given): towers planned, this process's GPU options
    set (before anything creates the devices: configure_gpus), the precision checked against
    the hardware and turned into the towers' arithmetic, the variables placed or replicated.
    Raises PlacementError saying what to do."""
    towers = plan_towers(device_settings.num_towers, hardware.count_gpus(),
                         device_settings.virtual_gpu_memory_mb)
    configure_gpus(towers)
    precision = device_settings.precision
    precision_lib.check_precision(precision, towers)
    update = variable_update.choose(device_settings.variable_update, towers, cluster,
                                    device_settings.variable_device)
    if update == rules.REPLICATED:
        variable_device = towers.tower_devices[0]
        spec = variable_update.all_reduce_spec(towers, device_settings.all_reduce_buffers,
                               cluster.num_workers if cluster is not None else 1)
    else:
        variable_device = check_variable_device(device_settings.variable_device, towers,
                                                cluster is not None)
        spec = None
    return Placement(
        towers=towers, variable_device=variable_device,
        precision=precision, compute_dtype=precision_lib.tower_compute_dtype(precision, towers),
        initial_loss_scale=recipe.INITIAL_LOSS_SCALE if precision == "fp16" else None,
        xla=device_settings.xla, intra_op_threads=device_settings.intra_op_threads,
        inter_op_threads=device_settings.inter_op_threads, all_reduce=spec,
        batch_norm_group_size=rules.batch_norm_group_size(
            device_settings, towers.num_towers, cluster.num_workers if cluster else 1,
            cluster is None or cluster.collective))


def evaluation_session_config():
    """The session config of an evaluation job, which shares a GPU with a training run beside
    it: this process's GPU options set first (memory growth), soft placement."""
    configure_gpus(plan_towers(None, hardware.count_gpus()))
    config = tf1.ConfigProto(allow_soft_placement=True)
    config.gpu_options.allow_growth = True
    return config if hardware.count_gpus() else grappler.lean_cpu_rewrites(config)
