"""Every flag of every entry point, declared once: the flag's name, type and default are its
setting's (a field of config/settings.py, cluster.ClusterSettings, plans.PlanFlags or
config/commands.py), its help text is beside the setting (config/help_texts.py, commands.py),
and its choices and which flags are paths are here. The entry points define their flags with
`define_flags` and read them back with `values_of`, so a default is written in one place only
(layout_test checks that each flag's default is its setting's and that the entry points define
no flag of their own). Flag names are the original's (rules.FLAG_NAMES where a setting's name
differs). Free of TensorFlow.
"""

from common import field_flags
from inception.config import plans
from inception.config import rules

DEFAULT_TRAIN_DIR = "/tmp/inception_train"  # where a run goes, and eval and export look
# Flag defaults where the setting has none of its own: library callers name a directory, the
# command line gets the original's; a cluster task is none until its flags say so.
FLAG_DEFAULTS = {"train_dir": DEFAULT_TRAIN_DIR, "checkpoint_dir": DEFAULT_TRAIN_DIR,
                 "job_name": "", "task_id": 0, "ps_hosts": (), "worker_hosts": ()}
CHOICES = {
    "dataset": ("",) + rules.DATASET_NAMES,
    "learning_rate_scaling": rules.LEARNING_RATE_SCALINGS,
    "precision": rules.PRECISIONS,
    "variable_update": rules.VARIABLE_UPDATES,
    "variable_device": rules.VARIABLE_DEVICE_CHOICES,
    "on_nan": rules.ON_NAN,
    "on_divergence": rules.ON_DIVERGENCE,
    "best_metric": rules.BEST_METRICS,
    "optimizer": plans.OPTIMIZERS,
    "learning_rate_schedule": plans.SCHEDULES,
    "augment": rules.AUGMENTS,
    "job_name": ("", "ps", "worker"),
}
# Flags that name a file or directory: relative to the directory the command was started in
# (cli.user_path), not Bazel's runfiles directory.
PATHS = frozenset({"train_dir", "data_dir", "pretrained_model_checkpoint_path", "export_best_dir",
                   "checkpoint_dir", "eval_dir", "training_plan", "checkpoint_path",
                   "export_dir", "model", "output_json", "work_dir"})

TABLE = field_flags.FlagTable(names=rules.FLAG_NAMES, defaults=FLAG_DEFAULTS, choices=CHOICES,
                              paths=PATHS)


def define_flags(section_classes, help_table, flag_values=None):
    """Defines one flag per field of the dataclasses `section_classes` that `help_table`
    ({setting name: help}) names: a list for a tuple field, an enum for one with CHOICES, else
    the field's type; its default the field's (FLAG_DEFAULTS where the field has none for the
    command line). `flag_values`: absl's FlagValues to define them in (None: flags.FLAGS)."""
    for section in section_classes:
        TABLE.define_flags(section, help_table, flag_values)


def values_of(flag_values, section):
    """{field name: value} of the flags of the dataclass `section` in absl's parsed
    `flag_values`: lists as tuples, PATHS as the user meant them."""
    return TABLE.values_of(flag_values, section)


def flag_default(field):
    """The command-line default of the setting `field` (a dataclasses.Field)."""
    return TABLE.flag_default(field)
