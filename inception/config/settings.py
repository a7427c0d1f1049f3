"""What a training run and an evaluation job take: one frozen settings object per entry point.

`TrainSettings` has one section per part of a run: `data` (what is read), `model` (the network;
the section stored as model_settings.json), `optimization` (plan, optimizer, learning-rate
schedule), `devices` (towers, precision, placement), `loop` (train_dir, cadences, limits, what a
divergence does), `validation` (scoring the validation shards during training, the best
checkpoint), `init` (where a fresh run's weights come from) and `cluster`. Library code
takes the section it needs. None in a section means "the data set's default" until the run is
resolved (driver/resolution.py fills it: `fill_defaults`).

Free of TensorFlow, so the entry points check every flag in well under two seconds, before
they load TensorFlow, build anything or write anything. The checks that need the data or the
machine (shards, labels, GPUs) happen when the run is resolved.
"""

import dataclasses
import os

from common import files
from inception.config import recipe
from inception.config.cluster import ClusterSettings
from inception.config.plans import DEFAULT_PLAN
from inception.config.plans import OPTIMIZERS
from inception.config.plans import PlanError
from inception.config.plans import TrainingPlan

MIN_IMAGE_SIZE = 75  # Inception v3's stride-2 layers shrink anything smaller to nothing
MIN_AUX_IMAGE_SIZE = 107  # the auxiliary head's 5x5 pooling needs Mixed_6e at 5x5 or larger
DATASET_NAMES = ("demo", "imagenet", "flowers", "custom")
PRECISIONS = ("fp32", "bf16", "fp16")
VARIABLE_DEVICE_CHOICES = ("auto", "cpu", "gpu")
ON_NAN = ("stop", "rollback")
ON_DIVERGENCE = ("warn", "stop")
BEST_METRICS = ("precision_at_1", "recall_at_5", "loss")
FLAG_NAMES = {"num_towers": "num_gpus", "num_labels": "num_classes"}  # the original's names


class SettingsError(ValueError):
    """A setting has a value no run can use; the message names its flag and says what to use."""


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """What a run reads. num_labels: labels in the data (background excluded), only for shards
    without labels.txt; seed: input order and distortions (and initial weights)."""
    data_dir: str = ""
    dataset: str = ""
    num_labels: int = None
    subset: str = "train"
    batch_size: int = None
    seed: int = None
    strict_input: bool = False


def _resolved(default=None):
    # Fields filled when the run is resolved (from the data set), never by a flag.
    return dataclasses.field(default=default, metadata={"resolved": True})


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """What defines the network; stored beside checkpoints (model_settings.json) so evaluation
    and export need no flags.

    num_classes counts logits, background (label 0) included: 1001 for ImageNet. It and
    `dataset` come from the data set when the run is resolved.
    """
    num_classes: int = _resolved()
    image_size: int = None
    depth_multiplier: float = None
    dataset: str = _resolved()

    def validate(self):
        """Raises SettingsError with a fix when resolved settings cannot build a network."""
        _check_model(self)
        if self.num_classes < 2:
            raise SettingsError(f"num_classes={self.num_classes} must be at least 2.")


@dataclasses.dataclass(frozen=True)
class OptimizationSettings:
    """How variables are updated: the plan, its optimizer and the learning-rate schedule.

    plan: plans.TrainingPlan (None: every variable in one stage); optimizer: for the stages
    that name none. The rate is initial_learning_rate * decay_factor ** floor(step /
    decay_steps), with decay_steps = steps_per_epoch * num_epochs_per_decay, times
    min(1, (step + 1) / warmup_steps) while warming up (warmup_steps 0: none).
    """
    plan: TrainingPlan = None
    optimizer: str = None
    initial_learning_rate: float = None
    num_epochs_per_decay: float = None
    learning_rate_decay_factor: float = recipe.LEARNING_RATE_DECAY_FACTOR
    warmup_steps: int = None

    def decay_steps(self, steps_per_epoch):
        """Steps between learning-rate decays (at least 1)."""
        return max(1, int(steps_per_epoch * self.num_epochs_per_decay))

    def training_plan(self):
        """The plan to build: every stage with an optimizer (settings resolved first)."""
        if None in (self.optimizer, self.initial_learning_rate, self.num_epochs_per_decay,
                    self.warmup_steps):
            raise SettingsError("the optimization settings are not resolved; fill them with "
                                "settings.with_defaults(section, data set defaults) first.")
        return (self.plan or DEFAULT_PLAN).with_optimizer(self.optimizer)


@dataclasses.dataclass(frozen=True)
class DeviceSettings:
    """Where and in which arithmetic the towers run. num_towers: one per GPU by default, or
    virtual CPU devices without GPUs; intra/inter_op_threads 0: TensorFlow decides."""
    num_towers: int = None
    virtual_gpu_memory_mb: int = 0
    precision: str = "fp32"
    variable_device: str = "auto"
    xla: bool = False
    intra_op_threads: int = 0
    inter_op_threads: int = 0


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """The training loop: its directory, end, cadences (0 turns a step or seconds cadence off),
    and what divergence does.

    keep_checkpoints: the newest this many checkpoints stay (across resumed runs); older ones
      are deleted except one every keep_checkpoint_every_n_hours (0: none kept that way).
    on_nan: what a non-finite loss or update does: 'stop', or 'rollback' to the newest finite
      checkpoint of this run and go on with the next batches, at most max_nan_rollbacks times.
    on_divergence: what a smoothed loss far above its start does: 'warn' (one line) or 'stop'.
    histograms: write gradient and variable histograms with the summaries (costly).
    """
    train_dir: str = ""
    max_steps: int = None
    log_every_n_steps: int = 10
    save_summaries_steps: int = 20
    save_summaries_secs: float = 0
    save_checkpoint_steps: int = 1000
    save_interval_secs: float = 600
    keep_checkpoints: int = 5
    keep_checkpoint_every_n_hours: float = 0
    on_nan: str = "stop"
    max_nan_rollbacks: int = 3
    on_divergence: str = "warn"
    histograms: bool = False


@dataclasses.dataclass(frozen=True)
class ValidationSettings:
    """Validation inside training (validation/in_training.py): the validation shards scored
    every eval_every_n_steps steps and at the end (0: never), the best checkpoint by
    best_metric kept in <train_dir>/best and exported to export_best_dir (empty: not
    exported), training stopped after stop_after_evals_without_improvement evaluations
    without a new best (0: never)."""
    eval_every_n_steps: int = None
    eval_batch_size: int = 100
    best_metric: str = BEST_METRICS[0]
    export_best_dir: str = ""
    stop_after_evals_without_improvement: int = 0


@dataclasses.dataclass(frozen=True)
class InitSettings:
    """Where a fresh run's weights come from: a pretrained checkpoint (ours or tf-slim's),
    without the logits layers (fine_tune) or the scopes in checkpoint_exclude_scopes."""
    pretrained_model_checkpoint_path: str = ""
    fine_tune: bool = False
    checkpoint_exclude_scopes: tuple = ()


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """Everything a training run takes, by section (see the module docstring). cluster: a
    worker task of a cluster (cluster.ClusterSettings); None: this machine alone."""
    data: DataSettings = DataSettings()
    model: ModelSettings = ModelSettings()
    optimization: OptimizationSettings = OptimizationSettings()
    devices: DeviceSettings = DeviceSettings()
    loop: LoopSettings = LoopSettings()
    validation: ValidationSettings = ValidationSettings()
    init: InitSettings = InitSettings()
    cluster: ClusterSettings = None

    @property
    def train_dir(self):
        """The run's directory (checkpoints, summaries, model_settings.json)."""
        return self.loop.train_dir

    @property
    def is_chief(self):
        """Whether this task writes the run's files: alone, or worker 0 of a cluster."""
        return self.cluster is None or self.cluster.is_chief

    def validate(self):
        """Raises SettingsError for the first setting no run can use; returns self."""
        if not self.train_dir:
            raise SettingsError("--train_dir must not be empty.")
        for check in (_check_counts, _check_rates, _check_choices, _check_paths,
                      _check_combinations):
            check(self)
        _check_model(self.model)
        return self


SECTIONS = {field.name: field.type for field in dataclasses.fields(TrainSettings)
            if field.name != "cluster"}


def train_settings(cluster=None, **values):
    """TrainSettings from flat setting names (each names one field of one section, e.g.
    `max_steps` of `loop`); the entry point's and tests' way to build them."""
    sections = {name: {} for name in SECTIONS}
    for name, value in values.items():
        sections[_section_of(name)][name] = value
    return TrainSettings(cluster=cluster, **{name: SECTIONS[name](**fields)
                                             for name, fields in sections.items()})


def flat_names():
    """Every setting name train_settings takes (those a flag sets), in section order."""
    return [field.name for section in SECTIONS.values() for field in dataclasses.fields(section)
            if not field.metadata.get("resolved")]


def _section_of(name):
    for section, kind in SECTIONS.items():
        if name in {field.name for field in dataclasses.fields(kind)
                    if not field.metadata.get("resolved")}:
            return section
    raise TypeError(f"unknown setting {name!r}")


def fill_defaults(settings, defaults):
    """`settings` (a TrainSettings) with every section filled by `with_defaults`."""
    return dataclasses.replace(settings, **{name: with_defaults(getattr(settings, name), defaults)
                                            for name in SECTIONS})


def with_defaults(section, defaults):
    """`section` with each None field that `defaults` (recipe.TrainingDefaults) has taken
    from `defaults`: how a data set's defaults reach every section."""
    missing = {field.name: getattr(defaults, field.name) for field in dataclasses.fields(section)
               if getattr(section, field.name) is None and hasattr(defaults, field.name)}
    return dataclasses.replace(section, **missing)


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """Everything an evaluation job takes; None/empty means "as stored with the checkpoints"."""
    checkpoint_dir: str
    eval_dir: str = ""
    data_dir: str = ""
    subset: str = "validation"
    num_examples: int = 0
    batch_size: int = 100
    eval_interval_secs: float = 60
    run_once: bool = False
    timeout_secs: float = 0
    image_size: int = None
    depth_multiplier: float = None
    strict_input: bool = False

    def validate(self):
        """Raises SettingsError for the first setting no evaluation can use; returns self."""
        _at_least(self, ("batch_size",), 1)
        _at_least(self, ("num_examples", "eval_interval_secs", "timeout_secs"), 0)
        _check_model(self)
        _must_be_directory("eval_dir", self.eval_dir)
        _must_be_directory("data_dir", self.data_dir, must_exist=True)
        return self


def _fail(name, value, what):
    raise SettingsError(f"--{FLAG_NAMES.get(name, name)}={value} {what}.")


def _at_least(section, names, minimum):
    for name in names:
        value = getattr(section, name)
        if value is not None and value < minimum:
            _fail(name, value, f"must be at least {minimum}")


def _check_counts(settings):
    data, devices, loop = settings.data, settings.devices, settings.loop
    _at_least(data, ("batch_size", "num_labels"), 1)
    _at_least(devices, ("num_towers",), 1)
    _at_least(devices, ("virtual_gpu_memory_mb", "intra_op_threads", "inter_op_threads"), 0)
    _at_least(loop, ("keep_checkpoints",), 1)
    _at_least(loop, ("max_steps", "log_every_n_steps", "save_summaries_steps",
                     "save_summaries_secs", "save_checkpoint_steps", "save_interval_secs",
                     "keep_checkpoint_every_n_hours", "max_nan_rollbacks"), 0)
    _at_least(settings.optimization, ("warmup_steps",), 0)
    _at_least(settings.validation, ("eval_every_n_steps",
                                    "stop_after_evals_without_improvement"), 0)
    _at_least(settings.validation, ("eval_batch_size",), 1)
    if devices.num_towers and data.batch_size and data.batch_size % devices.num_towers:
        _fail("batch_size", data.batch_size,
              f"does not split evenly over --num_gpus={devices.num_towers} towers; use a "
              f"multiple of {devices.num_towers}")


def _check_rates(settings):
    optimization = settings.optimization
    if optimization.initial_learning_rate is not None and \
            not optimization.initial_learning_rate > 0:
        _fail("initial_learning_rate", optimization.initial_learning_rate,
              "must be positive (a negative rate climbs the loss); try 0.01 to 0.1")
    if optimization.num_epochs_per_decay is not None and \
            not optimization.num_epochs_per_decay > 0:
        _fail("num_epochs_per_decay", optimization.num_epochs_per_decay, "must be positive")
    if not 0 < optimization.learning_rate_decay_factor <= 1:
        _fail("learning_rate_decay_factor", optimization.learning_rate_decay_factor,
              "must be in (0, 1] (1 keeps the rate constant)")


def _check_choices(settings):
    for section, name, allowed in (
            (settings.devices, "precision", PRECISIONS),
            (settings.devices, "variable_device", VARIABLE_DEVICE_CHOICES),
            (settings.loop, "on_nan", ON_NAN), (settings.loop, "on_divergence", ON_DIVERGENCE),
            (settings.validation, "best_metric", BEST_METRICS),
            (settings.data, "dataset", ("",) + DATASET_NAMES),
            (settings.optimization, "optimizer", (None,) + OPTIMIZERS)):
        if getattr(section, name) not in allowed:
            _fail(name, getattr(section, name),
                  f"is not one of {', '.join(value for value in allowed if value)}")


def _check_model(section):
    if section.image_size is not None and section.image_size < MIN_IMAGE_SIZE:
        _fail("image_size", section.image_size,
              f"is too small for Inception v3; use {MIN_IMAGE_SIZE} or more (299 is the "
              "original)")
    if section.depth_multiplier is not None and not section.depth_multiplier > 0:
        _fail("depth_multiplier", section.depth_multiplier, "must be positive (1.0 is the full "
              "network)")


def _check_paths(settings):
    _must_be_directory("train_dir", settings.train_dir)
    _must_be_directory("export_best_dir", settings.validation.export_best_dir)
    _must_be_directory("data_dir", settings.data.data_dir, must_exist=True)


def _must_be_directory(name, path, must_exist=False):
    if not path or files.is_url(path):  # a URL is checked through TensorFlow, at resolution
        return
    if os.path.exists(path) and not os.path.isdir(path):
        _fail(name, path, "is a file, not a directory")
    if must_exist and not os.path.isdir(path):
        _fail(name, path, "does not exist")


def _check_combinations(settings):
    init, validation = settings.init, settings.validation
    if validation.eval_every_n_steps == 0 and (
            validation.stop_after_evals_without_improvement or validation.export_best_dir):
        raise SettingsError("--stop_after_evals_without_improvement and --export_best_dir "
                            "act on validation during training; pass --eval_every_n_steps=N.")
    if (init.fine_tune or init.checkpoint_exclude_scopes) and \
            not init.pretrained_model_checkpoint_path:
        raise SettingsError("--fine_tune and --checkpoint_exclude_scopes need "
                            "--pretrained_model_checkpoint_path.")
    if settings.cluster is not None and settings.loop.on_nan == "rollback":
        raise SettingsError("--on_nan=rollback is for one machine; on a cluster use "
                            "--on_nan=stop and restart from the chief's last checkpoint.")
    if settings.cluster is not None and settings.devices.precision == "fp16":
        raise SettingsError("--precision=fp16 (loss scaling) is not available for distributed "
                            "training; use fp32.")
    plan = settings.optimization.plan
    if settings.cluster is not None and plan is not None and len(plan.stages) > 1:
        raise PlanError("distributed training runs one-stage plans only (--trainable_scopes "
                        "works); run each stage as its own run, one after the other.")
