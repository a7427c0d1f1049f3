"""One training run from one TrainSettings: data set, model settings, towers, graph, loop.

`train(settings)` is what `//inception:train` calls after turning its flags into
settings.TrainSettings, and what tests call directly. Sections' None fields take the data set's
defaults (datasets.TrainingDefaults) when the run is resolved; in a directory with
checkpoints, the stored model settings win over defaults, and an explicit setting that
contradicts them is an error.
"""

import contextlib
import dataclasses
import functools

import tensorflow as tf

from common import files
from inception import checkpoints
from inception import datasets
from inception import devices
from inception import distributed
from inception import errors
from inception import input_pipeline
from inception import learning_rate_range
from inception import loss_scaling
from inception import model
from inception import run_directory
from inception import run_lock
from inception import train_graph
from inception import train_loop
from inception.compat import tf_slim as slim
from inception.settings import train_settings  # noqa: F401  (callers build runs from it)
from inception.settings import with_defaults
from inception.train_loop import timestamped


def resolve_model_settings(requested, dataset, stored):
    """The run's ModelSettings: the `requested` section's fields, else the stored settings,
    else the data set's defaults."""
    filled = with_defaults(requested, dataset.defaults)
    settings = dataclasses.replace(filled, num_classes=dataset.num_classes, dataset=dataset.name,
                                   depth_multiplier=float(filled.depth_multiplier))
    explicit = {"num_classes", "dataset"}
    explicit |= {name for name in ("image_size", "depth_multiplier")
                 if getattr(requested, name) is not None}
    settings = run_directory.merge_stored_model(stored.model if stored else None, settings,
                                                explicit)
    settings.validate()
    return settings


def resolve_dataset(data, stored, log):
    """The data set of the `data` section, or of the stored run when the section names none."""
    stored_dir = stored.data.data_dir if stored else ""
    if stored_dir and data.data_dir and data.data_dir != stored_dir:
        log(f"note: the data directory changed since the last checkpoint: {stored_dir} -> "
            f"{data.data_dir}")
    name = data.dataset or (stored.model.dataset if stored and not data.data_dir else "")
    return datasets.resolve_dataset(name, data.data_dir or stored_dir, data.num_labels, log=log)


def input_seed(settings):
    """The seed of this task's input order: each worker of a cluster gets its own, or all would
    read the same examples in the same order."""
    seed = settings.data.seed
    if seed is None or settings.cluster is None:
        return seed
    return seed + settings.cluster.task_id


def pretrained_initializer_factory(init, log):
    """make_initializer for train_loop from the `init` section: restore its pretrained
    checkpoint, or None."""
    if not init.pretrained_model_checkpoint_path:
        return None
    excluded = tuple(init.checkpoint_exclude_scopes)
    if init.fine_tune:
        excluded += tuple(s for s in checkpoints.FINE_TUNE_EXCLUDED_SCOPES if s not in excluded)
    return lambda: checkpoints.pretrained_initializer(
        run_directory.pretrained_checkpoint(init.pretrained_model_checkpoint_path, log),
        slim.get_model_variables(), excluded, log)


@dataclasses.dataclass(frozen=True)
class ResolvedRun:
    """A run checked before anything is written: its settings with every default filled, and
    what the data set and the machine add to them."""
    settings: object  # settings.TrainSettings, resolved
    dataset: datasets.Dataset
    placement: devices.TowerPlacement
    variable_device: str
    shards: list
    examples_per_epoch: int
    make_initializer: object


def resolve_run(settings, log=print):
    """Checks `settings` (a TrainSettings) against the data, the machine and `train_dir`;
    writes nothing (it sets this process's GPU options for the towers, devices.configure_gpus).

    Raises ValueError subclasses with a message that says what to do.
    """
    # GPU options first: counting records below already makes TensorFlow create its devices.
    placement = devices.plan_towers(settings.devices.num_towers, devices.count_gpus(),
                                    settings.devices.virtual_gpu_memory_mb)
    devices.configure_gpus(placement)
    # Stored settings bind only once a checkpoint exists: a run that failed before saving one
    # must not pin the flags of the next attempt.
    directory = run_directory.RunDirectory(settings.train_dir)
    stored = directory.read_settings() if directory.newest() is not None else None
    dataset = resolve_dataset(settings.data, stored, log)
    data = dataclasses.replace(with_defaults(settings.data, dataset.defaults),
                               data_dir=dataset.data_dir, dataset=dataset.name)
    if data.batch_size % placement.num_towers:
        raise ValueError(f"--batch_size={data.batch_size} does not split evenly over "
                         f"{placement.num_towers} towers; use a multiple of "
                         f"{placement.num_towers}.")
    devices.check_precision(settings.devices.precision, placement)
    variable_device = devices.check_variable_device(settings.devices.variable_device, placement,
                                                    distributed=settings.cluster is not None)
    optimization = with_defaults(settings.optimization, dataset.defaults)
    resolved = dataclasses.replace(
        settings, data=data, model=resolve_model_settings(settings.model, dataset, stored),
        optimization=dataclasses.replace(optimization, plan=optimization.training_plan()),
        loop=with_defaults(settings.loop, dataset.defaults))
    return ResolvedRun(
        settings=resolved, dataset=dataset, placement=placement, variable_device=variable_device,
        shards=dataset.shards(data.subset),
        examples_per_epoch=dataset.num_examples(data.subset, log),
        make_initializer=pretrained_initializer_factory(settings.init, log))


def describe_run(run):
    """The first log line of a run: data, model, towers, batch, precision, end step."""
    settings = run.settings
    model_settings, batch_size = settings.model, settings.data.batch_size
    batch = f"global batch {batch_size}"
    extras = "".join([f"; variables on {run.variable_device.strip('/').upper()}"
                      if run.variable_device != devices.VARIABLE_DEVICES["cpu"] else "",
                      "; inputs staged on the GPUs" if stages_inputs(run) else "",
                      "; XLA" if settings.devices.xla else ""])
    if settings.cluster is not None:
        batch = (f"{settings.cluster.describe()}; batch {batch_size} per worker, "
                 f"{batch_size * settings.cluster.replicas_to_aggregate} per update")
    return (f"training {model_settings.dataset} ({model_settings.num_classes - 1} classes, "
            f"{run.dataset.data_dir}); Inception v3 x{model_settings.depth_multiplier:g} at "
            f"{model_settings.image_size}px; {run.placement.describe()}; {batch} "
            f"({batch_size // run.placement.num_towers} per tower); "
            f"{settings.devices.precision}{extras}; up to step {settings.loop.max_steps}")


def stages_inputs(run):
    """Whether each tower's input is copied to its device a step ahead: for GPU towers."""
    return run.placement.device_type == "gpu"


def graph_builder(run, replica, learning_rate=None):
    """build_graph() for train_loop.run_training: input pipeline, towers, stages (every stage
    at `learning_rate`, a tensor, when given: the range test)."""
    settings = run.settings
    data, precision = settings.data, settings.devices.precision

    def build_graph():
        if data.seed is not None:
            tf.compat.v1.set_random_seed(data.seed)  # reproducible initial weights too
        with tf.device(replica.local_device("/cpu:0") if replica else "/cpu:0"):
            input_batch = input_pipeline.build_train_input(
                run.shards, data.batch_size, settings.model.image_size,
                settings.model.num_classes, seed=input_seed(settings), strict=data.strict_input,
                crop=run.dataset.defaults.crop)
        compute_dtype = devices.tower_compute_dtype(precision, run.placement)
        return train_graph.build_train_graph(
            input_batch, functools.partial(model.make_model_fn, settings.model,
                                           compute_dtype=compute_dtype),
            settings.optimization, run.placement.tower_devices, run.examples_per_epoch,
            histograms=settings.loop.histograms,
            wrap_optimizer=replica.wrap_optimizer if replica else None,
            initial_loss_scale=loss_scaling.INITIAL_SCALE if precision == "fp16" else None,
            variable_device=run.variable_device, stage_inputs=stages_inputs(run),
            learning_rate=learning_rate)
    return build_graph


def session_config(run):
    """The ConfigProto of the run's towers: placement, threads, precision, XLA."""
    devices_section = run.settings.devices
    config = devices.apply_precision(
        devices.session_config(run.placement, devices_section.intra_op_threads,
                               devices_section.inter_op_threads),
        devices_section.precision, run.placement)
    if devices_section.xla:
        devices.apply_xla(config)
    return config


def train(settings, log=print, on_stuck=None):
    """Runs training as `settings` (a TrainSettings) say; returns train_loop.TrainResult.

    Checks the settings first (nothing is written for a bad one), then holds the lock of
    `train_dir` for the whole run (run_lock.py; on a cluster the chief alone).

    on_stuck: on a cluster, callable(message) for a TensorFlow call that outlives its own
    timeout (see distributed.ClusterWorker); the entry point ends the process.

    Raises ValueError subclasses (SettingsError, PlanError, RunLockError, DataError,
    PlacementError, CheckpointError) with a message that says what to do, and
    loop_guards.NonFiniteLossError when training diverges; on a cluster also
    distributed.ClusterError (a task lost or late) and DivergedError.
    """
    settings.validate()
    lock = run_lock.exclusive_run(settings.train_dir) if settings.is_chief else \
        contextlib.nullcontext()
    with lock:
        if settings.is_chief:
            check_writable(settings.train_dir)
        return _train_resolved(resolve_run(settings, log), log, on_stuck)


def check_writable(train_dir):
    """Raises CheckpointError when `train_dir` cannot be written (a read-only share, a bucket
    without write access), before anything is built."""
    try:
        files.ensure_writable_directory(train_dir)
    except (OSError, tf.errors.OpError) as error:
        raise checkpoints.CheckpointError(
            f"cannot write in --train_dir={train_dir} ({errors.file_error_cause(error)}); pass "
            "a directory you can write.") from None


def _train_resolved(run, log, on_stuck):
    settings = run.settings
    if settings.is_chief:
        run_directory.RunDirectory(settings.train_dir).write_settings(settings)
    log(timestamped(describe_run(run)))
    config = session_config(run)
    replica = (distributed.ClusterWorker(settings.cluster, config, log, on_stuck)
               if settings.cluster is not None else None)
    try:
        return train_loop.run_training(graph_builder(run, replica), config, settings.loop,
                                       run.make_initializer, log=log, replica=replica)
    except tf.errors.OpError as error:
        input_error = input_pipeline.explain(error)
        if input_error is not None:
            raise input_error from None
        if replica is None:
            raise
        raise replica.explain(error, "while training") from None


def find_learning_rate(settings, test, plot_path, log=print):
    """The learning-rate range test on the run `settings` describe (its data, model, towers and
    optimizer, from its initial or pretrained weights): returns learning_rate_range.RangeResult
    and writes the plot to `plot_path`. Writes no checkpoint and no settings, and takes no
    lock: the directory of a run is left as it was."""
    settings.validate()
    run = resolve_run(settings, log)
    log(timestamped(f"learning-rate range test, {test.steps} steps from {test.min_rate:g} to "
                    f"{test.max_rate:g}: {describe_run(run)}"))
    graph = tf.Graph()
    with graph.as_default():
        rate = tf.compat.v1.placeholder(tf.float32, [], name="learning_rate_tried")
        built = graph_builder(run, None, learning_rate=rate)()
        stage = built.stages[-1]
        init = tf.compat.v1.global_variables_initializer()
        restore = run.make_initializer() if run.make_initializer else None
        local_init = tf.compat.v1.local_variables_initializer()
    with tf.compat.v1.Session(graph=graph, config=session_config(run)) as session:
        session.run(init)
        if restore is not None:
            restore(session)
        session.run([local_init, built.input_initializer])
        if built.input_fill is not None:
            session.run(built.input_fill)
        result = learning_rate_range.run_range_test(session, stage.train_op, stage.mean_loss,
                                                    rate, test, log=log)
    learning_rate_range.write_plot(
        result, plot_path, f"{run.settings.model.dataset}, batch {run.settings.data.batch_size}")
    return result
