"""A run resolved from its TrainSettings in one pass, before anything is written: the
placement (first: its GPU options must be set before anything creates the devices), the stored
run, the data set, then every default, the model and the plan, and the whole checked once.

Each section's None fields take the data set's defaults (config/recipe.py); in a directory with
checkpoints, the stored model settings win over defaults, and an explicit setting that
contradicts them is an error.
"""

import dataclasses
import zlib

import tensorflow as tf

from inception.config import recipe
from inception.config import rules
from inception.config import settings as settings_lib
from inception.config import update_shape
from inception.config.update_shape import UpdateShape
from inception.inputs import label_weights
from inception.inputs import datasets
from inception.model import registry
from inception.model.slim_compat import tf_slim as slim
from inception.parallel import devices
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory


@dataclasses.dataclass(frozen=True)
class ResolvedRun:
    """A run checked before anything is written: its settings with every default filled, and
    what the data set and the machine add to them."""
    settings: settings_lib.TrainSettings  # resolved: no None left where a default exists
    dataset: datasets.Dataset
    placement: devices.Placement
    shards: list
    examples_per_epoch: int
    make_initializer: object
    class_weights: tuple = None  # of each logit's examples in the loss; None: all 1
    sampling_weights: tuple = None  # each label's draws per epoch (--balanced_sampling)


DETERMINISTIC_SEED = 0  # --deterministic without --seed
CLUSTER_SEEDS = 2**31 - 1  # a cluster without --seed draws its seed below this


def resolve_run(settings, log=print):
    """Checks `settings` (a TrainSettings) against the machine, `train_dir` and the data;
    writes nothing in `train_dir`, but makes what the data set needs on its first use (the
    demo's images, a folder's cached shards) and sets this process's GPU options for the
    towers. Returns ResolvedRun.

    Raises cli.UserError subclasses with a message that says what to do.
    """
    placement = devices.resolve_placement(settings.devices, settings.cluster)
    run_dir = RunDirectory(settings.train_dir)
    newest = run_dir.newest()
    stored = stored_run(run_dir, newest)
    check_same_input_kind(settings, stored)
    dataset = dataset_of_run(settings.data, stored, log)
    filled = keep_global_batch(settings_lib.fill_defaults(settings, dataset.defaults), stored,
                               placement, log)
    counts = training_label_counts(filled, dataset, log)
    examples_per_epoch = dataset.num_examples(
        filled.data.subset, log, counted=None if counts is None else int(counts.sum()))
    per_update = examples_per_update(filled)
    seed = filled.data.seed
    if seed is None and filled.data.deterministic:
        seed = DETERMINISTIC_SEED
    resolved = dataclasses.replace(
        filled, data=dataclasses.replace(filled.data, data_dir=dataset.data_dir,
                                         dataset=dataset.name, seed=seed),
        model=resolve_model_settings(settings.model, filled.model, dataset, stored),
        optimization=resolve_optimization(filled.optimization, per_update, log),
        devices=dataclasses.replace(filled.devices, num_towers=placement.num_towers),
        loop=resolve_length(settings.loop, filled.loop, examples_per_epoch, per_update, log),
    ).validate()  # every rule again, now on the numbers the machine and the data chose
    rules.check_profile_steps(resolved.loop.profile_steps, resolved.loop.max_steps,
                              checkpoint_io.step_of(newest) if newest else 0)
    shards = dataset.shards(resolved.data.subset)
    class_weights, sampling_weights = label_weights.resolve_weights(
        resolved.optimization.class_weight, resolved.data.balanced_sampling, counts,
        dataset.label_names, dataset.num_classes, log)
    return ResolvedRun(
        settings=resolved, dataset=dataset, placement=placement, shards=shards,
        examples_per_epoch=examples_per_epoch,
        make_initializer=pretrained_initializer_factory(settings.init, resolved.model, log),
        class_weights=class_weights, sampling_weights=sampling_weights)


def training_label_counts(settings, dataset, log):
    """The label counts of the split `settings` train on when --class_weight=balanced or
    --balanced_sampling needs them, else None: one pass over the shards, which also gives the
    number of records."""
    if not label_weights.needs_counts(settings.optimization.class_weight,
                                      settings.data.balanced_sampling):
        return None
    shards = dataset.shards(settings.data.subset)
    datasets.announce_count(shards, f"the '{settings.data.subset}' labels", log)
    return label_weights.label_counts(shards, dataset.num_classes)


def keep_global_batch(settings, stored, placement, log):
    """`settings` (filled) with the accumulate_steps that keep the global batch of the stored
    run when its number of workers changed (config/update_shape.py), logged."""
    shape, note = update_shape.keep_global_batch(
        stored.update if stored else None, UpdateShape.of(settings, placement.num_towers))
    if note:
        log(note)
    return dataclasses.replace(settings, optimization=dataclasses.replace(
        settings.optimization, accumulate_steps=shape.accumulate_steps))


def examples_per_update(settings):
    """The examples one update averages: the global batch, times the micro-batches, times
    the workers whose gradients a cluster's update aggregates."""
    replicas = settings.cluster.replicas_to_aggregate if settings.cluster else 1
    return settings.data.batch_size * settings.optimization.accumulate_steps * replicas


def resolve_optimization(optimization, per_update, log):
    """The optimization section with its plan, and the initial rate scaled to `per_update`
    examples by its learning_rate_scaling (logged when that changes it)."""
    base = optimization.initial_learning_rate
    rate = rules.scaled_learning_rate(base, optimization.learning_rate_scaling, per_update,
                                      recipe.BASE_BATCH_SIZE)
    if optimization.learning_rate_scaling != "none":
        log(f"learning rate {rate:.4g}: {base:g} for the base batch of "
            f"{recipe.BASE_BATCH_SIZE} scaled to {per_update} examples per update "
            f"(--learning_rate_scaling={optimization.learning_rate_scaling})")
    return dataclasses.replace(optimization, plan=optimization.training_plan(),
                               initial_learning_rate=rate)


def resolve_length(requested, loop, examples_per_epoch, per_update, log):
    """The filled loop section `loop` with max_steps from num_epochs when that gives the
    length (logged): --num_epochs, or the data set's default epochs unless `requested` (the
    section as given) has max_steps."""
    if requested.max_steps is not None:
        loop = dataclasses.replace(loop, num_epochs=None)
    if loop.num_epochs is None:
        return loop
    steps = rules.epochs_to_steps(loop.num_epochs, examples_per_epoch, per_update)
    log(f"{loop.num_epochs:g} epochs = {steps} steps ({examples_per_epoch} training examples, "
        f"{per_update} per update)")
    return dataclasses.replace(loop, max_steps=steps, num_epochs=None)


def stored_run(run_dir, newest):
    """The StoredRun of the RunDirectory `run_dir` once it has a checkpoint (`newest`), else
    None: a run that failed before saving one must not pin the flags of the next attempt."""
    return run_dir.read_settings() if newest is not None else None


def check_same_input_kind(settings, stored):
    """SettingsError when the checkpoints of `stored` (a StoredRun, or None: nothing to resume)
    were trained on synthetic input and `settings` ask for the data set's, or the reverse:
    resuming would mix a model with noise."""
    synthetic = settings.input_source.synthetic_input
    if stored is None or stored.synthetic_input in (None, synthetic):
        return
    if synthetic:
        raise settings_lib.SettingsError(
            f"--synthetic_input: --train_dir={settings.train_dir} holds checkpoints trained on "
            "the data set's images, which training on random input would spoil; time the step "
            "in another --train_dir, or drop --synthetic_input to go on training.")
    raise settings_lib.SettingsError(
        f"--train_dir={settings.train_dir} holds checkpoints trained with --synthetic_input "
        "(random input, for timing): train on the data set in another --train_dir, or pass "
        "--synthetic_input to go on timing.")


def dataset_of_run(data, stored, log):
    """The data set of the `data` section, or of the stored run when the section names none."""
    stored_dir = stored.data_dir if stored else ""
    if stored_dir and data.data_dir and data.data_dir != stored_dir:
        log(f"note: the data directory changed since the last checkpoint: {stored_dir} -> "
            f"{data.data_dir}")
    name = data.dataset or (stored.model.dataset if stored and not data.data_dir else "")
    return datasets.resolve_dataset(name, data.data_dir or stored_dir, data.num_labels, log=log,
                                    validation_fraction=data.validation_fraction)


def resolve_model_settings(requested, filled, dataset, stored):
    """The run's ModelSettings: the `requested` section's fields, else the stored settings,
    else the data set's defaults (already in `filled`)."""
    settings = dataclasses.replace(filled, num_classes=dataset.num_classes, dataset=dataset.name,
                                   depth_multiplier=float(filled.depth_multiplier),
                                   network=registry.network_named(filled.network).name)
    explicit = {"num_classes", "dataset"}
    explicit |= {name for name in ("image_size", "depth_multiplier", "network")
                 if getattr(requested, name) is not None}
    settings = merge_stored_model(stored.model if stored else None, settings, explicit)
    settings.validate()
    return settings


def input_seed(settings):
    """The seed of the input order and of the towers' random draws: --seed (None alone: a fresh
    one). The workers of a cluster read their shares of one order (inputs/shares.py), and the
    trainers of the tf.data service's job one dataset, so they need one seed: without --seed,
    one made from --train_dir, which every worker and every restart of the run share."""
    seed = settings.data.seed
    if seed is not None or (settings.cluster is None and
                            not settings.input_source.input_service):
        return seed
    return zlib.crc32(settings.train_dir.encode()) % CLUSTER_SEEDS


def pretrained_initializer_factory(init, model, log):
    """make_initializer for session_loop from the `init` section: restore its pretrained
    checkpoint into the network of `model` (settings.ModelSettings), or None."""
    if not init.pretrained_model_checkpoint_path:
        return None
    excluded = tuple(init.checkpoint_exclude_scopes)
    if init.fine_tune:
        excluded += tuple(scope for scope in registry.network_named(model.network).head_scopes
                          if scope not in excluded)
    return lambda: checkpoint_io.pretrained_initializer(
        pretrained_checkpoint(init.pretrained_model_checkpoint_path, log),
        slim.get_model_variables(), excluded, log)


def merge_stored_model(stored, requested, explicit):
    """The model settings of a run in a directory that already has some.

    Args:
      stored: ModelSettings from the directory, or None.
      requested: ModelSettings from flags and data-set defaults.
      explicit: names of the fields the user set explicitly (by a flag, or through the data).

    Returns the stored settings; raises CheckpointError when an explicit setting contradicts
    them, in the terms the user passed (labels, not logits).
    """
    if stored is None:
        return requested
    if "num_classes" in explicit and stored.num_classes != requested.num_classes:
        raise checkpoint_io.CheckpointError(
            f"the checkpoints here were trained on {stored.num_classes - 1} labels "
            f"({stored.dataset}), but this data has {requested.num_classes - 1}; pass a new "
            "--train_dir (to start from these weights there: --pretrained_model_checkpoint_path="
            "<this directory> --fine_tune).")
    for field in dataclasses.fields(settings_lib.ModelSettings):
        name = field.name
        if name in explicit and getattr(stored, name) != getattr(requested, name):
            flag = ("--dataset (or --data_dir)" if name == "dataset"
                    else f"--{rules.FLAG_NAMES.get(name, name)}")
            raise checkpoint_io.CheckpointError(
                f"the checkpoints here were trained with {name}={getattr(stored, name)!r}, "
                f"not {getattr(requested, name)!r}; drop {flag} or pass a new --train_dir.")
    return stored


def pretrained_checkpoint(path, log=print):
    """A checkpoint prefix from --pretrained_model_checkpoint_path: a prefix, or a directory
    (its newest usable checkpoint)."""
    if tf.io.gfile.isdir(path):
        newest = RunDirectory(path).newest_usable(log)
        if newest is None:
            raise checkpoint_io.CheckpointError(
                f"no checkpoint in directory {path}; pass a checkpoint file such as "
                ".../inception_v3.ckpt or .../model.ckpt-1000.")
        return newest
    if not (tf.io.gfile.exists(path + ".index") or tf.io.gfile.exists(path)):
        raise checkpoint_io.CheckpointError(
            f"--pretrained_model_checkpoint_path={path} does not exist.")
    return path
