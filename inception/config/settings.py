"""What a training run and an evaluation job take: one frozen settings object per entry point.

`TrainSettings` has one section per part of a run: `data` (what is read), `model` (the network;
stored as model_settings.json), `optimization` (plan, optimizer, learning-rate schedule,
accumulation), `augmentation` (RandAugment, random erasing, Mixup/CutMix), `devices` (towers,
precision, placement), `loop` (train_dir, cadences, limits, what a divergence does), `validation`
(scoring the validation shards during training, the best checkpoint), `init` (a fresh run's
weights), `input_source` (config/sources.py) and `cluster`. Library code takes the section it
needs. None in a section means "the data set's default" until the run is resolved
(driver/resolution.py: `fill_defaults`). Free of TensorFlow: every flag is checked in a second,
before anything loads or is written."""

import dataclasses

from inception.config import help_texts
from inception.config import recipe
from inception.config import rules
from inception.config.cluster import ClusterSettings
from inception.config.plans import DEFAULT_PLAN
from inception.config.plans import SCHEDULES
from inception.config.plans import TrainingPlan
from inception.config.sources import InputSourceSettings
from inception.config.rules import SettingsError


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """What a run reads. num_labels: labels in the data (background excluded), only for shards
    without labels.txt; seed: input order and distortions (and initial weights);
    deterministic: TensorFlow's op determinism, seed 0 when none is given (the same command then
    writes bit-identical checkpoints on the same machine); validation_fraction: of each label's
    images, for a folder of label folders (data/folder_cache.py); balanced_sampling: draw each
    record as often as its class's balanced weight says (inputs/pipeline.py)."""
    data_dir: str = ""
    dataset: str = ""
    num_labels: int = None
    subset: str = "train"
    batch_size: int = None
    seed: int = None
    deterministic: bool = False
    strict_input: bool = False
    validation_fraction: float = 0.0
    balanced_sampling: bool = False


def _resolved(default=None):  # a field filled when the run is resolved, never by a flag
    return dataclasses.field(default=default, metadata={"resolved": True})


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """What defines the network; stored beside checkpoints (model_settings.json) so evaluation
    and export need no flags. num_classes counts logits, background (label 0) included: 1001
    for ImageNet; it and `dataset` come from the data set when the run is resolved. network:
    a name of model/registry.py (--model), recipe.DEFAULT_NETWORK once resolved."""
    num_classes: int = _resolved()
    image_size: int = None
    depth_multiplier: float = None
    dataset: str = _resolved()
    network: str = None

    def validate(self):
        """Raises SettingsError with a fix when resolved settings cannot build a network."""
        rules.check_declared(self, help_texts.TRAIN_HELP)
        if self.num_classes < 2:
            raise SettingsError(f"num_classes={self.num_classes} must be at least 2.")


@dataclasses.dataclass(frozen=True)
class OptimizationSettings:
    """How variables are updated: the plan, its optimizer and the learning-rate schedule.

    plan: plans.TrainingPlan (None: every variable in one stage); optimizer: for the stages
    that name none. learning_rate_schedule: one of SCHEDULES (step/schedules.py); the
    exponential one is initial_learning_rate * decay_factor ** floor(step / decay_steps), with
    decay_steps = steps_per_epoch * num_epochs_per_decay; each is multiplied by
    min(1, (step + 1) / warmup_steps) while warming up (0: none; or warmup_epochs, in epochs).
    adapt_batch_norm_and_biases: LARS and LAMB adapt (and decay) those too.
    accumulate_steps: micro-batches of the global batch whose gradients make one update.
    learning_rate_scaling: how initial_learning_rate follows the examples of one update
    against the recipe's base batch (rules.scaled_learning_rate); label_smoothing: of the
    cross-entropy's targets; clip_gradient_norm: the largest global norm of the averaged
    gradients of an update (0: no clipping); class_weight: '' (every example weighs 1),
    'balanced', or a file of weights per label (inputs/label_weights.py).
    """
    plan: TrainingPlan = None
    optimizer: str = None
    initial_learning_rate: float = None
    num_epochs_per_decay: float = None
    learning_rate_decay_factor: float = recipe.LEARNING_RATE_DECAY_FACTOR
    warmup_steps: int = None
    warmup_epochs: float = 0.0
    adapt_batch_norm_and_biases: bool = False
    learning_rate_schedule: str = SCHEDULES[0]
    accumulate_steps: int = 1
    learning_rate_scaling: str = rules.DEFAULT_LEARNING_RATE_SCALING
    label_smoothing: float = recipe.LABEL_SMOOTHING
    clip_gradient_norm: float = 0.0
    class_weight: str = ""

    def decay_steps(self, steps_per_epoch):
        """Steps between learning-rate decays (at least 1)."""
        return max(1, int(steps_per_epoch * self.num_epochs_per_decay))

    def training_plan(self):
        """The plan to build: every stage with an optimizer (settings resolved first)."""
        if None in (self.optimizer, self.initial_learning_rate, self.num_epochs_per_decay,
                    self.warmup_steps):
            raise SettingsError("optimization settings not resolved: fill them (with_defaults).")
        return (self.plan or DEFAULT_PLAN).with_optimizer(self.optimizer)


@dataclasses.dataclass(frozen=True)
class AugmentationSettings:
    """Augmentation beyond the recipe's crop, flip and colours (inputs/augment.py and
    mixing.py), all seeded by --seed. augment 'randaugment': randaugment_ops random ops at
    randaugment_magnitude (0 to MAX_RANDAUGMENT_MAGNITUDE) on each training image after its
    crop; random_erasing: the probability of a rectangle of noise per image; mixup_alpha,
    cutmix_alpha: Beta(alpha, alpha) mixing of each tower's batch with soft labels (0: off;
    both: one per batch)."""
    augment: str = rules.AUGMENTS[0]
    randaugment_ops: int = 2
    randaugment_magnitude: int = 9
    random_erasing: float = 0.0
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0


@dataclasses.dataclass(frozen=True)
class DeviceSettings:
    """Where and in which arithmetic the towers run. num_towers: one per GPU by default, or
    virtual CPU devices without GPUs; intra/inter_op_threads 0: TensorFlow decides.
    variable_update: 'parameter_server' (the variables on `variable_device`), 'replicated' (a
    copy on every tower's device, gradients summed by an all-reduce packed into
    all_reduce_buffers buffers) or 'auto' (parallel/devices.py decides). sync_batch_norm:
    batch norm over groups of batch_norm_group_size towers (0: all of the cluster's)."""
    num_towers: int = None
    virtual_gpu_memory_mb: int = 0
    precision: str = "fp32"
    variable_update: str = rules.AUTO
    variable_device: str = rules.AUTO
    all_reduce_buffers: int = rules.DEFAULT_ALL_REDUCE_BUFFERS
    sync_batch_norm: bool = False
    batch_norm_group_size: int = 0
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
    num_epochs: the run's length in passes over the training examples, instead of max_steps
      (the run is resolved to the updates they take: driver/resolution.py).
    profile_steps: (first, last) steps traced by TensorFlow's profiler into
      <train_dir>/plugins/profile (loop/profiling.py); empty: none."""
    train_dir: str = ""
    max_steps: int = None
    num_epochs: float = None
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
    profile_steps: tuple = ()


@dataclasses.dataclass(frozen=True)
class ValidationSettings:
    """Validation inside training (validation/in_training.py): the validation shards scored
    every eval_every_n_steps steps and at the end (0: never), the best checkpoint by
    best_metric kept in <train_dir>/best and exported to export_best_dir (empty: not
    exported), training stopped after stop_after_evals_without_improvement evaluations
    without a new best (0: never) or at the first reaching target_accuracy (0: none)."""
    eval_every_n_steps: int = None
    eval_batch_size: int = recipe.EVAL_BATCH_SIZE
    best_metric: str = rules.BEST_METRICS[0]
    export_best_dir: str = ""
    stop_after_evals_without_improvement: int = 0
    target_accuracy: float = 0.0


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
    augmentation: AugmentationSettings = AugmentationSettings()
    devices: DeviceSettings = DeviceSettings()
    loop: LoopSettings = LoopSettings()
    validation: ValidationSettings = ValidationSettings()
    init: InitSettings = InitSettings()
    input_source: InputSourceSettings = InputSourceSettings()
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
        rules.check_train(self, [getattr(self, name) for name in SECTIONS], help_texts.TRAIN_HELP)
        self.input_source.validate(self.data.deterministic)
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
    defaults = recipe.for_optimizer(defaults, settings.optimization.optimizer)
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
    batch_size: int = recipe.EVAL_BATCH_SIZE
    eval_interval_secs: float = 60
    run_once: bool = False
    timeout_secs: float = 0
    image_size: int = None
    depth_multiplier: float = None
    strict_input: bool = False

    def validate(self):
        """Raises SettingsError for the first setting no evaluation can use; returns self."""
        rules.check_eval(self, help_texts.EVAL_HELP)
        return self
