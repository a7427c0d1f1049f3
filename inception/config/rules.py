"""Every rule a setting must keep, checked before TensorFlow loads. A rule of one setting (its
choices, bounds or check) is declared in its flag's entry beside the field (help_texts.py,
commands.py: common/field_flags.Flag) and applied here by `check_declared`; what is written here
is the checks those entries name, the paths that must be directories, and the combinations of
settings no run can use. The sections they check are in settings.py; the checks read their
fields, so each rule holds for every caller (the entry points' flags, the library's callers,
the resolved run).

Free of TensorFlow, like settings.py.
"""

import dataclasses
import os

from common import cli
from common import field_flags
from common import files
from inception.config.plans import PlanError
MIN_IMAGE_SIZE = 75  # Inception v3's stride-2 layers shrink anything smaller to nothing
MIN_AUX_IMAGE_SIZE = 107  # the auxiliary head's 5x5 pooling needs Mixed_6e at 5x5 or larger
DATASET_NAMES = ("demo", "imagenet", "flowers", "custom")
PRECISIONS = ("fp32", "bf16", "fp16")
AUTO = "auto"
PARAMETER_SERVER = "parameter_server"
REPLICATED = "replicated"
VARIABLE_UPDATES = (AUTO, PARAMETER_SERVER, REPLICATED)  # tf_cnn_benchmarks' names
VARIABLE_DEVICE_CHOICES = (AUTO, "cpu", "gpu")
# No buffer count differed beyond noise on CPU towers (bench/results/replicated-cpu-2core.json);
# 4 keeps bench/scaling.py's all-reduce latency near 0.6 ms a step at 8 GPUs (196 unpacked: 28).
DEFAULT_ALL_REDUCE_BUFFERS = 4
ON_NAN = ("stop", "rollback")
ON_DIVERGENCE = ("warn", "stop")
BEST_METRICS = ("precision_at_1", "recall_at_5", "loss")
AUGMENTS = ("none", "randaugment")
MAX_RANDAUGMENT_MAGNITUDE = 30  # RandAugment's scale: 10 is a full-strength op, as in timm
# How the learning rate follows the examples of one update (--learning_rate_scaling): linear
# (Goyal et al. 2017), sqrt (Krizhevsky 2014; Hoffer et al. 2017), or none.
LEARNING_RATE_SCALINGS = ("none", "linear", "sqrt")
DEFAULT_LEARNING_RATE_SCALING = "sqrt"  # measured: docs/learning-rate.md
# The original's flag names, kept for its users; the settings say what they count: towers (one
# per GPU, or virtual CPU devices) and labels (num_classes elsewhere counts the logits, with the
# background class).
FLAG_NAMES = {"num_towers": "num_gpus", "num_labels": "num_classes", "network": "model"}


class SettingsError(cli.UserError):
    """A setting has a value no run can use; the message names its flag and says what to use."""


def check_train(settings, sections, help_table):
    """Raises SettingsError (or PlanError) for the first setting of the TrainSettings
    `settings` that no run can use: each field of its `sections` against its declaration in
    `help_table` (help_texts.TRAIN_HELP), then the rules written here."""
    if not settings.train_dir:
        raise SettingsError("--train_dir must not be empty.")
    for section in sections:
        check_declared(section, help_table)
    for check in (_check_split, _check_paths, _check_combinations):
        check(settings)


def check_eval(evaluation, help_table):
    """Raises SettingsError for the first setting of the EvalSettings `evaluation` that no
    evaluation can use (its declarations: help_texts.EVAL_HELP)."""
    check_declared(evaluation, help_table)
    must_be_directory("eval_dir", evaluation.eval_dir)
    must_be_directory("data_dir", evaluation.data_dir, must_exist=True)


def check_declared(section, help_table):
    """Raises SettingsError naming the flag of the first field of the dataclass `section`
    whose value its entry in `help_table` refuses (common/field_flags.Flag's choices,
    minimum, maximum and check); None passes (not given, or a default still pending)."""
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        if field.name in help_table and value is not None:
            problem = field_flags.declared(help_table[field.name]).problem(value)
            if problem:
                _fail(field.name, value, problem)


def _fail(name, value, what):
    raise SettingsError(f"--{FLAG_NAMES.get(name, name)}={value} {what}.")


def positive(hint=""):
    """A Flag's check: the value must be above 0 (`hint` follows the complaint)."""
    def problem(value):
        return None if value > 0 else f"must be positive{hint}"
    return problem


def decay_factor_problem(factor):
    """What is wrong with a learning-rate decay factor, or None."""
    return None if 0 < factor <= 1 else "must be in (0, 1] (1 keeps the rate constant)"


def label_smoothing_problem(smoothing):
    """What is wrong with a label smoothing, or None."""
    return None if 0 <= smoothing < 1 else \
        "must be in [0, 1) (0: none; the recipe's 0.1 is the default)"


def clip_norm_problem(norm):
    """What is wrong with a gradient-clipping norm, or None."""
    return None if norm >= 0 else "must be positive, or 0 for no clipping"


def image_size_problem(size):
    """What is wrong with an input image size, or None."""
    if size >= MIN_IMAGE_SIZE:
        return None
    return f"is too small for Inception v3; use {MIN_IMAGE_SIZE} or more (299 is the original)"


def _check_split(settings):
    data, devices = settings.data, settings.devices
    if devices.num_towers and data.batch_size and data.batch_size % devices.num_towers:
        _fail("batch_size", data.batch_size,
              f"does not split evenly over --num_gpus={devices.num_towers} towers; use a "
              f"multiple of {devices.num_towers}")


def _check_paths(settings):
    class_weight = settings.optimization.class_weight
    if class_weight and class_weight != "balanced" and not files.is_url(class_weight) and \
            not os.path.isfile(class_weight):
        _fail("class_weight", class_weight, "is neither 'balanced' nor a file of '<label> "
              "<weight>' lines")
    must_be_directory("train_dir", settings.train_dir)
    must_be_directory("export_best_dir", settings.validation.export_best_dir)
    must_be_directory("data_dir", settings.data.data_dir, must_exist=True)


def must_be_directory(name, path, must_exist=False):
    """Raises SettingsError when the setting `name`'s `path` is a file (or, with `must_exist`,
    is no directory); a URL is left to TensorFlow."""
    if not path or files.is_url(path):  # a URL is checked through TensorFlow, at resolution
        return
    if os.path.exists(path) and not os.path.isdir(path):
        _fail(name, path, "is a file, not a directory")
    if must_exist and not os.path.isdir(path):
        _fail(name, path, "does not exist")


def _check_variable_update(devices, cluster):
    update = devices.variable_update
    if update == REPLICATED and devices.variable_device != AUTO:
        raise SettingsError(
            f"--variable_device={devices.variable_device} places the variables of "
            "--variable_update=parameter_server; with replicated every tower keeps its own "
            "copy on its own device: drop one of the two.")
    if cluster is None:
        return
    if cluster.collective and update == PARAMETER_SERVER:
        raise SettingsError("--variable_update=parameter_server needs parameter servers; a "
                            "cluster without them (no --ps_hosts) replicates the variables on "
                            "every worker: leave --variable_update at auto, or list --ps_hosts.")
    if cluster.collective and devices.variable_device != AUTO:
        raise SettingsError(f"--variable_device={devices.variable_device} places the variables "
                            "of one machine; a cluster without parameter servers keeps a copy "
                            "on every tower: leave it at auto.")
    if not cluster.collective and update == REPLICATED:
        raise SettingsError("--variable_update=replicated on a cluster needs no parameter "
                            "servers: drop --ps_hosts (the workers then all-reduce), or leave "
                            "--variable_update at auto to keep the variables on them.")


def _check_pairs(devices, optimization):
    if devices.batch_norm_group_size and not devices.sync_batch_norm:
        raise SettingsError("--batch_norm_group_size groups the towers of --sync_batch_norm; "
                            "pass --sync_batch_norm too, or drop it.")
    if optimization.warmup_epochs and optimization.warmup_steps:
        raise SettingsError("--warmup_epochs and --warmup_steps both set the warm-up; pass one.")


def batch_norm_group_size(devices, towers, workers, collective):
    """--sync_batch_norm's towers per group, `towers` per worker (None: tf-slim's own)."""
    total = towers * (workers if collective else 1)  # what one group may span
    size = devices.batch_norm_group_size or total
    if total % size:
        raise SettingsError(f"--batch_norm_group_size={size} does not divide the {total} towers "
                            "it groups; pick a divisor (0: all of them).")
    return size if devices.sync_batch_norm and size > 1 else None


def _check_combinations(settings):
    init, validation = settings.init, settings.validation
    check_profile_steps(settings.loop.profile_steps, settings.loop.max_steps)
    if settings.data.balanced_sampling and settings.optimization.class_weight == "balanced":
        raise SettingsError("--balanced_sampling and --class_weight=balanced each even out the "
                            "classes, and together they overcorrect; pass one.")
    if settings.loop.num_epochs is not None and settings.loop.max_steps is not None:
        raise SettingsError(f"--num_epochs={settings.loop.num_epochs:g} and --max_steps="
                            f"{settings.loop.max_steps} both set the run's length; pass one.")
    acting = ("stop_after_evals_without_improvement", "export_best_dir", "target_accuracy")
    if validation.eval_every_n_steps == 0 and any(getattr(validation, n) for n in acting):
        raise SettingsError(f"{', '.join('--' + n for n in acting)} act on validation during "
                            "training; pass --eval_every_n_steps=N.")
    if (init.fine_tune or init.checkpoint_exclude_scopes) and \
            not init.pretrained_model_checkpoint_path:
        raise SettingsError("--fine_tune and --checkpoint_exclude_scopes need "
                            "--pretrained_model_checkpoint_path.")
    _check_variable_update(settings.devices, settings.cluster)
    _check_pairs(settings.devices, settings.optimization)
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


def profile_window(words):
    """(first, last) from --profile_steps' one or two numbers (as the flag's list gives them);
    () when it is empty; SettingsError otherwise."""
    try:
        steps = tuple(int(word) for word in words)
    except ValueError:
        steps = ()
    if words and len(steps) not in (1, 2):
        raise SettingsError(f"--profile_steps={','.join(words)} takes a first and a last step, "
                            "e.g. --profile_steps=20,25, or one step.")
    return (steps[0], steps[-1]) if steps else ()


def check_profile_steps(steps, max_steps, resumed_step=0):
    """Raises SettingsError unless `steps` (first, last) lie in the run: after
    `resumed_step` (where a resumed run goes on from) and up to `max_steps` (None: not yet
    known); empty `steps` trace nothing."""
    if not steps:
        return
    first, last = steps
    flag = f"--profile_steps={first},{last}"
    if not 1 <= first <= last:
        raise SettingsError(f"{flag} must name a first and a last step with 1 <= first <= "
                            "last, e.g. --profile_steps=20,25 (a few steps after the start).")
    if max_steps is not None and last > max_steps:
        raise SettingsError(f"{flag} goes past the run's end at step {max_steps}; trace "
                            f"steps up to {max_steps}.")
    if first <= resumed_step:
        raise SettingsError(f"{flag} starts before this run: it resumes from step "
                            f"{resumed_step}; trace later steps (e.g. --profile_steps="
                            f"{resumed_step + 10},{resumed_step + 15}) or leave the flag out.")


def scaled_learning_rate(rate, scaling, examples_per_update, base_batch):
    """`rate` (the rate for `base_batch` examples an update) for `examples_per_update`:
    times their ratio (linear), its square root (sqrt), or as it is (none)."""
    ratio = examples_per_update / base_batch
    return rate * {"none": 1.0, "linear": ratio, "sqrt": ratio ** 0.5}[scaling]


def epochs_to_steps(num_epochs, examples_per_epoch, examples_per_update):
    """The updates `num_epochs` passes over `examples_per_epoch` examples take, the last one
    whole: ceil(num_epochs x examples / examples per update), at least 1."""
    return max(1, -(-round(num_epochs * examples_per_epoch) // examples_per_update))

