"""A run resolved from its TrainSettings in one pass, before anything is written:
data set -> stored run -> model -> placement -> plan.

Each section's None fields take the data set's defaults; in a directory with checkpoints, the
stored model settings win over defaults, and an explicit setting that contradicts them is an
error.
"""

import dataclasses

from inception.config.settings import with_defaults
from inception.inputs import datasets
from inception.model.slim_compat import tf_slim as slim
from inception.parallel import devices
from inception.run import checkpoint_io
from inception.run.directory import merge_stored_model
from inception.run.directory import pretrained_checkpoint
from inception.run.directory import RunDirectory


def resolve_model_settings(requested, dataset, stored):
    """The run's ModelSettings: the `requested` section's fields, else the stored settings,
    else the data set's defaults."""
    filled = with_defaults(requested, dataset.defaults)
    settings = dataclasses.replace(filled, num_classes=dataset.num_classes, dataset=dataset.name,
                                   depth_multiplier=float(filled.depth_multiplier))
    explicit = {"num_classes", "dataset"}
    explicit |= {name for name in ("image_size", "depth_multiplier")
                 if getattr(requested, name) is not None}
    settings = merge_stored_model(stored.model if stored else None, settings,
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
        excluded += tuple(s for s in checkpoint_io.FINE_TUNE_EXCLUDED_SCOPES if s not in excluded)
    return lambda: checkpoint_io.pretrained_initializer(
        pretrained_checkpoint(init.pretrained_model_checkpoint_path, log),
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
    directory = RunDirectory(settings.train_dir)
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
