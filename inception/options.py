"""What a training run and an evaluation job take, and the values each option accepts.

Free of TensorFlow, so the entry points check every flag in well under two seconds, before
they load TensorFlow, build anything or write anything. The checks that need the data or the
machine (shards, labels, GPUs) happen when the run is resolved (training.resolve_run).
"""

import dataclasses
import os

from common import files
from inception.cluster import ClusterSettings

MIN_IMAGE_SIZE = 75  # Inception v3's stride-2 layers shrink anything smaller to nothing
MIN_AUX_IMAGE_SIZE = 107  # the auxiliary head's 5x5 pooling needs Mixed_6e at 5x5 or larger
DATASET_NAMES = ("demo", "imagenet", "flowers", "custom")
PRECISIONS = ("fp32", "bf16", "fp16")
VARIABLE_DEVICES = ("auto", "cpu", "gpu")
ON_NAN = ("stop", "rollback")
ON_DIVERGENCE = ("warn", "stop")
OPTIMIZERS = ("rmsprop", "momentum", "sgd", "adam")


class OptionsError(ValueError):
    """An option has a value no run can use; the message names it and says what to use."""


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """Everything a training run takes. None means "the data set's default".

    on_nan: what a non-finite loss or update does: stop, or roll back to the newest finite
      checkpoint and go on with the next batches, at most `max_nan_rollbacks` times per run.
    on_divergence: what a smoothed loss far above its start does: warn (one line) or stop.
    warmup_steps: steps of the linear learning-rate warm-up (None: the data set's default).
    optimizer: the optimizer of a plan given by --trainable_scopes / --stages or of the default
      plan (None: the data set's default); a --training_plan file names its own.
    keep_checkpoints: how many of the newest checkpoints stay; older ones are deleted, except
      one every `keep_checkpoint_every_n_hours` (0: none).
    cluster: a worker task of a cluster (cluster.ClusterSettings); None: this machine alone.
    """
    train_dir: str
    data_dir: str = ""
    dataset: str = ""
    num_classes: int = None
    subset: str = "train"
    num_towers: int = None
    virtual_gpu_memory_mb: int = 0
    batch_size: int = None
    max_steps: int = None
    image_size: int = None
    depth_multiplier: float = None
    initial_learning_rate: float = None
    num_epochs_per_decay: float = None
    learning_rate_decay_factor: float = 0.16
    seed: int = None
    precision: str = "fp32"
    variable_device: str = "auto"
    xla: bool = False
    strict_input: bool = False
    histograms: bool = False
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
    warmup_steps: int = None
    optimizer: str = None
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    trainable_scopes: tuple = ()
    stages: str = ""
    training_plan: str = ""
    pretrained_model_checkpoint_path: str = ""
    fine_tune: bool = False
    checkpoint_exclude_scopes: tuple = ()
    cluster: ClusterSettings = None

    def validate(self):
        """Raises OptionsError for the first option no run can use; returns self."""
        for check in (_check_counts, _check_rates, _check_choices, _check_sizes,
                      _check_train_paths, _check_combinations):
            check(self)
        return self


@dataclasses.dataclass(frozen=True)
class EvalOptions:
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
        """Raises OptionsError for the first option no evaluation can use; returns self."""
        _at_least(self, ("batch_size",), 1)
        _at_least(self, ("num_examples", "eval_interval_secs", "timeout_secs"), 0)
        _check_sizes(self)
        _must_be_directory("eval_dir", self.eval_dir)
        _must_be_directory("data_dir", self.data_dir, must_exist=True)
        return self


FLAG_NAMES = {"num_towers": "num_gpus"}  # where a flag keeps the original's name


def _fail(name, value, what):
    raise OptionsError(f"--{FLAG_NAMES.get(name, name)}={value} {what}.")


def _at_least(options, names, minimum):
    for name in names:
        value = getattr(options, name)
        if value is not None and value < minimum:
            _fail(name, value, f"must be at least {minimum}")


def _check_counts(options):
    _at_least(options, ("num_towers", "batch_size", "keep_checkpoints", "num_classes"), 1)
    _at_least(options, ("max_steps", "virtual_gpu_memory_mb", "log_every_n_steps",
                        "save_summaries_steps", "save_summaries_secs", "save_checkpoint_steps",
                        "save_interval_secs", "keep_checkpoint_every_n_hours",
                        "max_nan_rollbacks", "intra_op_threads", "inter_op_threads",
                        "warmup_steps"), 0)
    if (options.num_towers and options.batch_size
            and options.batch_size % options.num_towers):
        _fail("batch_size", options.batch_size,
              f"does not split evenly over --num_gpus={options.num_towers} towers; use a "
              f"multiple of {options.num_towers}")


def _check_rates(options):
    if options.initial_learning_rate is not None and not options.initial_learning_rate > 0:
        _fail("initial_learning_rate", options.initial_learning_rate,
              "must be positive (a negative rate climbs the loss); try 0.01 to 0.1")
    if options.num_epochs_per_decay is not None and not options.num_epochs_per_decay > 0:
        _fail("num_epochs_per_decay", options.num_epochs_per_decay, "must be positive")
    if not 0 < options.learning_rate_decay_factor <= 1:
        _fail("learning_rate_decay_factor", options.learning_rate_decay_factor,
              "must be in (0, 1] (1 keeps the rate constant)")


def _check_choices(options):
    for name, allowed in (("precision", PRECISIONS), ("variable_device", VARIABLE_DEVICES),
                          ("on_nan", ON_NAN), ("on_divergence", ON_DIVERGENCE),
                          ("dataset", ("",) + DATASET_NAMES),
                          ("optimizer", (None,) + OPTIMIZERS)):
        if getattr(options, name) not in allowed:
            _fail(name, getattr(options, name),
                  f"is not one of {', '.join(value for value in allowed if value)}")


def _check_sizes(options):
    if options.image_size is not None and options.image_size < MIN_IMAGE_SIZE:
        _fail("image_size", options.image_size,
              f"is too small for Inception v3; use {MIN_IMAGE_SIZE} or more (299 is the "
              "original)")
    if options.depth_multiplier is not None and not options.depth_multiplier > 0:
        _fail("depth_multiplier", options.depth_multiplier, "must be positive (1.0 is the full "
              "network)")


def _check_train_paths(options):
    _must_be_directory("train_dir", options.train_dir)
    _must_be_directory("data_dir", options.data_dir, must_exist=True)
    for name in ("training_plan",):
        path = getattr(options, name)
        if path and not files.is_url(path) and not os.path.isfile(path):
            _fail(name, path, "is not a file")


def _must_be_directory(name, path, must_exist=False):
    if not path or files.is_url(path):  # a URL is checked through TensorFlow, at resolution
        return
    if os.path.exists(path) and not os.path.isdir(path):
        _fail(name, path, "is a file, not a directory")
    if must_exist and not os.path.isdir(path):
        _fail(name, path, "does not exist")


def _check_combinations(options):
    given = [name for name in ("trainable_scopes", "stages", "training_plan")
             if getattr(options, name)]
    if len(given) > 1:
        raise OptionsError(f"pass only one of --{' / --'.join(given)}.")
    if options.optimizer and options.training_plan:
        raise OptionsError("--optimizer does not apply to --training_plan; the plan file names "
                           "each stage's optimizer.")
    if (options.fine_tune or options.checkpoint_exclude_scopes) and \
            not options.pretrained_model_checkpoint_path:
        raise OptionsError("--fine_tune and --checkpoint_exclude_scopes need "
                           "--pretrained_model_checkpoint_path.")
    if options.cluster is not None and options.on_nan == "rollback":
        raise OptionsError("--on_nan=rollback is for one machine; on a cluster use "
                           "--on_nan=stop and restart from the chief's last checkpoint.")
    if options.cluster is not None and options.precision == "fp16":
        raise OptionsError("--precision=fp16 (loss scaling) is not available for distributed "
                           "training; use fp32.")
