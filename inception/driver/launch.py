"""One training run from one TrainSettings: resolved (resolution.py), locked, then the graph
built and the loop run.

`train(settings)` is what `//inception:train` calls after turning its flags into
settings.TrainSettings, and what tests call directly.
"""

import contextlib
import functools

import tensorflow as tf

from common import cli
from common import error_lines
from common import files
from inception import distributed
from inception.driver import determinism
from inception.driver import lr_range
from inception.driver import resolution
from inception.inputs import damaged
from inception.inputs import pipeline
from inception.inputs import service
from inception.inputs import shares
from inception.inputs import synthetic
from inception.loop import hooks as hooks_lib
from inception.loop import liveness
from inception.loop import resume
from inception.loop import session_loop
from inception.loop import first_step
from inception.model import network
from inception.model import registry
from inception.model import synced_batch_norm
from inception.parallel import devices
from inception.parallel import sharing
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.run.lock import exclusive_run
from inception.step import step_graph
from inception.validation import in_training

FIRST_STEP_EXTRA_SECS = 600  # a start's first step also builds, initializes and warms up


def describe_run(run):
    """The first log line of a run: data, model, towers, batch, precision, end step."""
    settings = run.settings
    model_settings, batch_size = settings.model, settings.data.batch_size
    batch = f"global batch {batch_size}"
    if settings.optimization.accumulate_steps > 1:
        batch += (f" x {settings.optimization.accumulate_steps} micro-batches = "
                  f"{batch_size * settings.optimization.accumulate_steps} per update")
    if settings.cluster is not None:
        batch = (f"{settings.cluster.describe()}; batch {batch_size} per worker, "
                 f"{batch_size * settings.cluster.replicas_to_aggregate} per update")
    network = registry.network_named(model_settings.network).title
    return (f"training {model_settings.dataset} ({model_settings.num_classes - 1} classes, "
            f"{run.dataset.data_dir}); {network} x{model_settings.depth_multiplier:g} at "
            f"{model_settings.image_size}px; {run.placement.towers.describe()}; {batch} "
            f"({batch_size // run.placement.num_towers} per tower); "
            f"{run.placement.describe_arithmetic()}; up to step {settings.loop.max_steps}"
            f"{_describe_randomness(settings.data)}")


def _describe_randomness(data):
    if data.seed is None:
        return ""
    return f"; seed {data.seed}" + (", deterministic ops" if data.deterministic else "")


def graph_builder(run, worker, learning_rate=None, service_input=None):
    """build_graph() for session_loop.run_training: input pipeline (on the tf.data service
    with `service_input`), towers, stages (every stage at `learning_rate`, a tensor, when
    given: the range test).

    How the towers share the variables is the cluster worker's (`variable_sharing`) or, on one
    machine, the placement's (sharing.on_one_machine). On a cluster every worker reads its
    share of one order from one position (inputs/shares.py), which lives with the variables
    (the chief saves it; who advances it is the sharing's `updates_statistics`); its towers are
    numbered among every worker's, so that their random draws follow their examples."""
    settings, placement = run.settings, run.placement
    data, cluster = settings.data, settings.cluster
    batch = data.batch_size * settings.optimization.accumulate_steps  # of this process's step
    share = shares.InputShare(cluster.task_id, cluster.num_workers) if cluster else shares.ALL

    def build_graph():
        if data.seed is not None:
            tf.compat.v1.set_random_seed(data.seed)  # reproducible initial weights too
        seed = resolution.input_seed(settings)
        position = shares.position_variable() if cluster else None  # placed as a variable
        host = devices.HOST_DEVICE
        with tf.device(worker.local_device(host) if worker else host):
            input_batch = train_input(run, batch, seed, position, share, service_input)
        mixing_seed = pipeline.fresh_seed() if seed is None else seed
        variable_sharing = (worker.variable_sharing(placement) if worker  # one per graph
                            else sharing.on_one_machine(placement))
        return step_graph.build_train_graph(
            input_batch, functools.partial(
                registry.make_model_fn, settings.model, options=network.TowerOptions(
                    compute_dtype=placement.compute_dtype, augmentation=settings.augmentation,
                    seed=mixing_seed, label_smoothing=settings.optimization.label_smoothing,
                    class_weights=run.class_weights,
                    first_tower=share.index * placement.num_towers
                    * settings.optimization.accumulate_steps,
                    batch_norm_groups=batch_norm_groups(
                        placement, share, settings.optimization.accumulate_steps))),
            settings.optimization, variable_sharing, run.examples_per_epoch,
            step_graph.StepOptions(
                histograms=settings.loop.histograms,
                initial_loss_scale=placement.initial_loss_scale,
                prefetch_inputs=placement.prefetch_inputs, learning_rate=learning_rate,
                max_steps=settings.loop.max_steps))
    return build_graph


def train_input(run, batch, seed, position, share, service_input=None):
    """The InputBatch of this process's `batch` (the examples of one update): synthetic
    (--synthetic_input), or the pipeline's (its order from `seed`, reading from `position`,
    `share` of a cluster's), here or on the tf.data service's workers (`service_input`)."""
    settings, model = run.settings, run.settings.model
    if settings.input_source.synthetic_input:
        return synthetic.synthetic_input(batch, model.image_size, model.num_classes, seed)
    stream = pipeline.TrainStream(
        run.shards, batch, model.image_size, model.num_classes, seed=seed,
        strict=settings.data.strict_input, crop=run.dataset.defaults.crop,
        augmentation=settings.augmentation, examples_per_epoch=run.examples_per_epoch,
        sampling_weights=run.sampling_weights)
    return pipeline.build_train_input(stream, position, share, service_input)


def service_input_of(settings):
    """The service.ServiceInput of a run with --input_service, or None."""
    if not settings.input_source.input_service:
        return None
    return service.ServiceInput.for_run(settings.input_source.input_service, settings.train_dir,
                                        resolution.input_seed(settings),
                                        settings.cluster is not None)


def describe_input(settings, service_input):
    """The log line of where the training input comes from, or None for the pipeline here."""
    if settings.input_source.synthetic_input:
        return ("input: synthetic, one fixed random batch on each tower's device "
                "(--synthetic_input: the step's speed alone, nothing learned)")
    return service_input.describe() if service_input else None


def batch_norm_groups(placement, share, micro_batches):
    """The synced_batch_norm.BatchNormGroups of this process's towers (worker `share.index`
    of a cluster), or None without --sync_batch_norm."""
    if not placement.batch_norm_group_size:
        return None
    return synced_batch_norm.BatchNormGroups(
        group_size=placement.batch_norm_group_size, towers_per_worker=placement.num_towers,
        first_device=share.index * placement.num_towers, micro_batches=micro_batches)


def train(settings, log=print, on_stuck=None, startup=None):
    """Runs training as `settings` (a TrainSettings) say; returns session_loop.TrainResult.

    Checks the settings first (nothing is written for a bad one), then holds the lock of
    `train_dir` for the whole run (run/lock.py; on a cluster the chief alone).

    on_stuck: callable(message) for a TensorFlow call that outlives its own timeout on a
    cluster (see distributed.ClusterWorker), or a step that waits for an input service found
    unreachable (loop/liveness.py); the entry point ends the process.

    Raises cli.UserError subclasses (SettingsError, PlanError, RunLockError, DataError,
    PlacementError, CheckpointError) with a message that says what to do, and
    guards.DivergenceError when training diverges; on a cluster also
    distributed.ClusterError (a task lost or late).

    startup: the loop.first_step.StartupClock of the parts of the start before this call
    (the entry point's); None: the start-up line counts from here.
    """
    clock = startup or first_step.StartupClock()
    settings.validate()
    held = exclusive_run(settings.train_dir, retryable=settings.cluster is not None,
                         log=log) if settings.is_chief else contextlib.nullcontext()
    with held:
        if settings.is_chief:
            check_writable(settings.train_dir)
        run = resolution.resolve_run(settings, log)
        clock.mark("checks and data set")
        return _train_resolved(run, log, on_stuck, clock)


def check_writable(train_dir):
    """Raises CheckpointError when `train_dir` cannot be written (a read-only share, a bucket
    without write access), before anything is built."""
    try:
        files.ensure_writable_directory(train_dir)
    except (OSError, tf.errors.OpError) as error:
        raise checkpoint_io.CheckpointError(
            error_lines.cannot_write(f"in --train_dir={train_dir}", error)) from None


def _train_resolved(run, log, on_stuck, clock):
    with determinism.op_determinism(run.settings.data.deterministic):
        return _run_training(run, log, on_stuck, clock)


def _run_training(run, log, on_stuck, clock):
    settings, service_input = run.settings, service_input_of(run.settings)
    if service_input:
        service.check_reachable(service_input.address)
    if settings.is_chief:
        RunDirectory(settings.train_dir).write_settings(settings)
    log(cli.timestamped(describe_run(run)))
    input_line = describe_input(settings, service_input)
    if input_line:
        log(cli.timestamped(input_line))
    config = run.placement.session_config()
    worker = (distributed.start_worker(settings.cluster, config, log, on_stuck)
              if settings.cluster is not None else None)
    if worker is not None:
        clock.mark("cluster server")
    if worker is not None and service_input:
        worker.input_service = service_input.address
    validation = None
    try:
        validation = in_training.build(settings, run.dataset, config, log)
        if validation is not None:
            clock.mark("evaluation graph")
        return session_loop.run_training(graph_builder(run, worker, service_input=service_input),
                                         config, settings.loop,
                                         run.make_initializer, log=log,
                                         worker=worker or _timed_steps(settings, on_stuck),
                                         companions=session_loop.LoopCompanions(
                                             validation, clock))
    except tf.errors.OpError as error:
        input_error = damaged.explain(error) or determinism.explain_determinism(error)
        if input_error is not None:
            raise input_error from None
        if worker is None:
            raise
        raise worker.explain(error, "while training") from None
    finally:
        if validation is not None:
            validation.close()


def _timed_steps(settings, on_stuck):
    """The loop's one-machine hooks: steps limited in time when the input comes from the
    tf.data service (a lost service would leave a step waiting for ever), else None; with
    `on_stuck` (which ends the process), a step also ends soon after the service is found
    unreachable."""
    address = settings.input_source.input_service
    if not address:
        return None

    def watch(step, first):
        probe = functools.partial(service.unreachable, address, workers_required=not first)
        return liveness.StepWatch(probe, on_stuck).around(
            functools.partial(service.lost_service_line, address, step))
    return hooks_lib.TimedWorkerHooks(
        settings.input_source.input_service_timeout_secs, FIRST_STEP_EXTRA_SECS,
        lambda step, waited: service.lost_service_error(address, step, waited),
        watch=watch if on_stuck is not None else None)


def find_learning_rate(settings, test, plot_path, log=print):
    """The learning-rate range test on the run `settings` describe (its data, model, towers and
    optimizer, from its initial or pretrained weights): returns lr_range.RangeResult
    and writes the plot to `plot_path`. Writes no checkpoint and no settings, and takes no
    lock: the directory of a run is left as it was."""
    settings.validate()
    run = resolution.resolve_run(settings, log)
    log(cli.timestamped(f"learning-rate range test, {test.steps} steps from {test.min_rate:g} to "
                    f"{test.max_rate:g}: {describe_run(run)}"))
    graph = tf.Graph()
    with graph.as_default():
        rate = tf.compat.v1.placeholder(tf.float32, [], name="learning_rate_tried")
        built = graph_builder(run, None, learning_rate=rate)()
        stage = built.stages[-1]
        start = resume.prepare_fresh_start(built, run.make_initializer)
        local_init = tf.compat.v1.local_variables_initializer()
    with tf.compat.v1.Session(graph=graph, config=run.placement.session_config()) as session:
        start(session)
        resume.start_input(session, built, local_init)
        result = lr_range.run_range_test(session, stage.train_op, stage.mean_loss,
                                         rate, test, log=log)
    lr_range.write_plot(
        result, plot_path, f"{run.settings.model.dataset}, batch {run.settings.data.batch_size}")
    return result
