"""One training run from explicit options: data set, model settings, towers, graph, loop.

`train(TrainOptions(...))` is what `//inception:train` calls after parsing flags, and what tests
call directly. Options left as None take the data set's defaults (datasets.TrainingDefaults);
in a directory with checkpoints, the stored model settings win over defaults, and an explicit
option that contradicts them is an error.
"""

import contextlib
import dataclasses
import functools

import tensorflow as tf

from inception import checkpoints
from inception import datasets
from inception import devices
from inception import distributed
from inception import input_pipeline
from inception import learning_rate_range
from inception import loss_scaling
from inception import model
from inception import run_lock
from inception import stages
from inception import train_graph
from inception import train_loop
from inception.compat import tf_slim as slim
from inception.options import TrainOptions  # noqa: F401  (callers build runs from it)
from inception.train_loop import timestamped


def _pick(value, default):
    return default if value is None else value


def resolve_model_settings(options, dataset, stored):
    """The run's ModelSettings: flags, else stored settings, else the data set's defaults."""
    defaults = dataset.defaults
    requested = model.ModelSettings(
        num_classes=dataset.num_classes,
        image_size=_pick(options.image_size, defaults.image_size),
        depth_multiplier=float(_pick(options.depth_multiplier, defaults.depth_multiplier)),
        dataset=dataset.name)
    explicit = {"num_classes", "dataset"}
    explicit |= {name for name in ("image_size", "depth_multiplier")
                 if getattr(options, name) is not None}
    settings = checkpoints.merge_settings(stored.settings if stored else None, requested,
                                          explicit)
    settings.validate()
    return settings


def resolve_plan(options, default_optimizer):
    """The TrainingPlan from --trainable_scopes, --stages or --training_plan (at most one:
    options.py checks); the first two use --optimizer, else `default_optimizer`."""
    if options.training_plan:
        return stages.load_plan(options.training_plan)
    optimizer = options.optimizer or default_optimizer
    if options.stages:
        return stages.parse_stages(options.stages, optimizer)
    return stages.plan_from_scopes(options.trainable_scopes, optimizer)


def input_seed(options):
    """--seed for this task's input order: each worker of a cluster gets its own, or all would
    read the same examples in the same order."""
    if options.seed is None or options.cluster is None:
        return options.seed
    return options.seed + options.cluster.task_id


def pretrained_initializer_factory(options, log):
    """make_initializer for train_loop: restore --pretrained_model_checkpoint_path, or None."""
    if not options.pretrained_model_checkpoint_path:
        return None
    excluded = tuple(options.checkpoint_exclude_scopes)
    if options.fine_tune:
        excluded += tuple(s for s in checkpoints.FINE_TUNE_EXCLUDED_SCOPES if s not in excluded)
    return lambda: checkpoints.pretrained_initializer(
        options.pretrained_model_checkpoint_path, slim.get_model_variables(), excluded, log)


@dataclasses.dataclass(frozen=True)
class ResolvedRun:
    """Everything a run needs, checked before anything is written."""
    dataset: datasets.Dataset
    settings: model.ModelSettings
    batch_size: int
    max_steps: int
    placement: devices.TowerPlacement
    variable_device: str
    plan: stages.TrainingPlan
    shards: list
    optimization: train_graph.OptimizationSettings
    make_initializer: object


def resolve_run(options, log=print):
    """Checks `options` against the data, the machine and `train_dir`; writes nothing (it sets
    this process's GPU options for the towers, devices.configure_gpus).

    Raises ValueError subclasses with a message that says what to do.
    """
    # GPU options first: counting records below already makes TensorFlow create its devices.
    placement = devices.plan_towers(options.num_towers, devices.count_gpus(),
                                    options.virtual_gpu_memory_mb)
    devices.configure_gpus(placement)
    # Stored settings bind only once a checkpoint exists: a run that failed before saving one
    # must not pin the flags of the next attempt.
    has_checkpoint = checkpoints.latest_checkpoint(options.train_dir) is not None
    stored = checkpoints.read_stored_run(options.train_dir) if has_checkpoint else None
    data_dir = options.data_dir or (stored.data_dir if stored else "")
    if stored and options.data_dir and stored.data_dir and options.data_dir != stored.data_dir:
        log(f"note: the data directory changed since the last checkpoint: {stored.data_dir} -> "
            f"{options.data_dir}")
    dataset_name = options.dataset or (stored.settings.dataset if stored and not options.data_dir
                                       else "")
    dataset = datasets.resolve_dataset(dataset_name, data_dir, options.num_classes, log=log)
    defaults = dataset.defaults
    batch_size = _pick(options.batch_size, defaults.batch_size)
    if batch_size % placement.num_towers:
        raise ValueError(f"--batch_size={batch_size} does not split evenly over "
                         f"{placement.num_towers} towers; use a multiple of "
                         f"{placement.num_towers}.")
    devices.check_precision(options.precision, placement)
    variable_device = devices.check_variable_device(options.variable_device, placement,
                                                    distributed=options.cluster is not None)
    plan = resolve_plan(options, defaults.optimizer)
    if options.cluster is not None:
        check_cluster_options(options, plan)
    return ResolvedRun(
        dataset=dataset, settings=resolve_model_settings(options, dataset, stored),
        batch_size=batch_size, max_steps=_pick(options.max_steps, defaults.max_steps),
        placement=placement, variable_device=variable_device, plan=plan,
        shards=dataset.shards(options.subset),
        optimization=train_graph.OptimizationSettings(
            batch_size=batch_size, examples_per_epoch=dataset.num_examples(options.subset, log),
            initial_learning_rate=_pick(options.initial_learning_rate,
                                        defaults.initial_learning_rate),
            num_epochs_per_decay=_pick(options.num_epochs_per_decay,
                                       defaults.num_epochs_per_decay),
            learning_rate_decay_factor=options.learning_rate_decay_factor,
            warmup_steps=_pick(options.warmup_steps, defaults.warmup_steps)),
        make_initializer=pretrained_initializer_factory(options, log))


def check_cluster_options(options, plan):
    """What distributed training does not support, as clear errors (the plan's stages are known
    only once the plan is read; options.py checks the rest)."""
    del options
    if len(plan.stages) > 1:
        raise stages.PlanError("distributed training runs one-stage plans only (--trainable_scopes "
                               "works); run each stage as its own run, one after the other.")


def describe_run(options, run):
    """The first log line of a run: data, model, towers, batch, precision, end step."""
    settings, batch_size = run.settings, run.batch_size
    batch = f"global batch {batch_size}"
    extras = "".join([f"; variables on {run.variable_device.strip('/').upper()}"
                      if run.variable_device != devices.VARIABLE_DEVICES["cpu"] else "",
                      "; inputs staged on the GPUs" if stages_inputs(run) else "",
                      "; XLA" if options.xla else ""])
    if options.cluster is not None:
        batch = (f"{options.cluster.describe()}; batch {batch_size} per worker, "
                 f"{batch_size * options.cluster.replicas_to_aggregate} per update")
    return (f"training {settings.dataset} ({settings.num_classes - 1} classes, "
            f"{run.dataset.data_dir}); Inception v3 x{settings.depth_multiplier:g} at "
            f"{settings.image_size}px; {run.placement.describe()}; {batch} "
            f"({batch_size // run.placement.num_towers} per tower); {options.precision}"
            f"{extras}; up to step {run.max_steps}")


def stages_inputs(run):
    """Whether each tower's input is copied to its device a step ahead: for GPU towers."""
    return run.placement.device_type == "gpu"


def graph_builder(options, run, replica, learning_rate=None):
    """build_graph() for train_loop.run_training: input pipeline, towers, stages (every stage
    at `learning_rate`, a tensor, when given: the range test)."""
    def build_graph():
        if options.seed is not None:
            tf.compat.v1.set_random_seed(options.seed)  # reproducible initial weights too
        with tf.device(replica.local_device("/cpu:0") if replica else "/cpu:0"):
            input_batch = input_pipeline.build_train_input(
                run.shards, run.batch_size, run.settings.image_size, run.settings.num_classes,
                seed=input_seed(options), strict=options.strict_input,
                crop=run.dataset.defaults.crop)
        compute_dtype = devices.tower_compute_dtype(options.precision, run.placement)
        return train_graph.build_train_graph(
            input_batch, functools.partial(model.make_model_fn, run.settings,
                                           compute_dtype=compute_dtype),
            run.optimization, run.placement.tower_devices, run.plan, options.histograms,
            wrap_optimizer=replica.wrap_optimizer if replica else None,
            initial_loss_scale=(loss_scaling.INITIAL_SCALE if options.precision == "fp16"
                                else None),
            variable_device=run.variable_device, stage_inputs=stages_inputs(run),
            learning_rate=learning_rate)
    return build_graph


def loop_settings(options, run):
    """The loop's cadences, limits and what a divergence does."""
    return train_loop.LoopSettings(
        train_dir=options.train_dir, max_steps=run.max_steps, batch_size=run.batch_size,
        log_every_n_steps=options.log_every_n_steps,
        save_summaries_steps=options.save_summaries_steps,
        save_summaries_secs=options.save_summaries_secs,
        save_checkpoint_steps=options.save_checkpoint_steps,
        save_interval_secs=options.save_interval_secs,
        keep_checkpoints=options.keep_checkpoints,
        keep_checkpoint_every_n_hours=options.keep_checkpoint_every_n_hours,
        on_nan=options.on_nan, max_nan_rollbacks=options.max_nan_rollbacks,
        on_divergence=options.on_divergence)


def train(options, log=print, on_stuck=None):
    """Runs training as `options` say; returns train_loop.TrainResult.

    Checks the options first (nothing is written for a bad one), then holds the lock of
    `train_dir` for the whole run (run_lock.py; on a cluster the chief alone).

    on_stuck: on a cluster, callable(message) for a TensorFlow call that outlives its own
    timeout (see distributed.ClusterWorker); the entry point ends the process.

    Raises ValueError subclasses (OptionsError, RunLockError, DataError, PlacementError,
    CheckpointError) with a message that says what to do, and loop_guards.NonFiniteLossError
    when training diverges; on a cluster also distributed.ClusterError (a task lost or late)
    and DivergedError.
    """
    options.validate()
    chief = options.cluster is None or options.cluster.is_chief
    with run_lock.exclusive_run(options.train_dir) if chief else contextlib.nullcontext():
        return _train_resolved(options, resolve_run(options, log), log, on_stuck)


def _train_resolved(options, run, log, on_stuck):
    if options.cluster is None or options.cluster.is_chief:
        checkpoints.write_stored_run(options.train_dir,
                                     checkpoints.StoredRun(run.settings, run.dataset.data_dir))
    log(timestamped(describe_run(options, run)))
    config = devices.apply_precision(
        devices.session_config(run.placement, options.intra_op_threads,
                               options.inter_op_threads),
        options.precision, run.placement)
    if options.xla:
        devices.apply_xla(config)
    replica = (distributed.ClusterWorker(options.cluster, config, log, on_stuck)
               if options.cluster is not None else None)
    try:
        return train_loop.run_training(graph_builder(options, run, replica), config,
                                       loop_settings(options, run), run.make_initializer,
                                       log=log, replica=replica)
    except tf.errors.OpError as error:
        input_error = input_pipeline.explain(error)
        if input_error is not None:
            raise input_error from None
        if replica is None:
            raise
        raise replica.explain(error, "while training") from None


def find_learning_rate(options, test, plot_path, log=print):
    """The learning-rate range test on the run `options` describe (its data, model, towers and
    optimizer, from its initial or pretrained weights): returns learning_rate_range.RangeResult
    and writes the plot to `plot_path`. Writes no checkpoint and no settings, and takes no
    lock: the directory of a run is left as it was."""
    options.validate()
    run = resolve_run(options, log)
    log(timestamped(f"learning-rate range test, {test.steps} steps from {test.min_rate:g} to "
                    f"{test.max_rate:g}: {describe_run(options, run)}"))
    config = devices.apply_precision(
        devices.session_config(run.placement, options.intra_op_threads,
                               options.inter_op_threads), options.precision, run.placement)
    graph = tf.Graph()
    with graph.as_default():
        rate = tf.compat.v1.placeholder(tf.float32, [], name="learning_rate_tried")
        built = graph_builder(options, run, None, learning_rate=rate)()
        stage = built.stages[-1]
        init = tf.compat.v1.global_variables_initializer()
        restore = run.make_initializer() if run.make_initializer else None
        local_init = tf.compat.v1.local_variables_initializer()
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(init)
        if restore is not None:
            restore(session)
        session.run([local_init, built.input_initializer])
        if built.input_fill is not None:
            session.run(built.input_fill)
        result = learning_rate_range.run_range_test(session, stage.train_op, stage.mean_loss,
                                                    rate, test, log=log)
    learning_rate_range.write_plot(result, plot_path,
                                   f"{run.settings.dataset}, batch {run.batch_size}")
    return result
