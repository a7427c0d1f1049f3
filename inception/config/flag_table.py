"""Every flag of every entry point, declared once: the flag's name, type and default are its
setting's (a field of config/settings.py, cluster.ClusterSettings, plans.PlanFlags or
config/commands.py), its help text is beside the setting (config/help_texts.py, commands.py),
and its choices and which flags are paths are here. The entry points define their flags with
`define_flags` and read them back with `values_of`, so a default is written in one place only
(layout_test checks that each flag's default is its setting's and that the entry points define
no flag of their own). Flag names are the original's (rules.FLAG_NAMES where a setting's name
differs). Free of TensorFlow.
"""

import dataclasses

from common import cli
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
                   "export_dir", "model", "output_json"})

def define_flags(flags, section_classes, help_table, flag_values=None):
    """Defines with absl's `flags` module one flag per field of the dataclasses
    `section_classes` that `help_table` ({setting name: help}) names: a list for a tuple
    field, an enum for one with CHOICES, else the field's type; its default the field's
    (FLAG_DEFAULTS where the field has none for the command line). `flag_values`: absl's
    FlagValues to define them in (None: the process's flags.FLAGS)."""
    for section in section_classes:
        for field in dataclasses.fields(section):
            if field.name in help_table and not field.metadata.get("resolved"):
                _define(flags, field, help_table[field.name],
                        flags.FLAGS if flag_values is None else flag_values)


def values_of(flag_values, section):
    """{field name: value} of the flags of the dataclass `section` (each field's flag, as
    define_flags made it) in absl's parsed `flag_values`: lists as tuples, PATHS as the user
    meant them."""
    values = {}
    for field in dataclasses.fields(section):
        name = rules.FLAG_NAMES.get(field.name, field.name)
        if name not in flag_values or field.metadata.get("resolved"):
            continue
        value = flag_values[name].value
        if field.type is tuple:
            value = tuple(value)
        values[field.name] = cli.user_path(value) if field.name in PATHS else value
    return values


def flag_default(field):
    """The command-line default of the setting `field` (a dataclasses.Field)."""
    if field.name in FLAG_DEFAULTS:
        return FLAG_DEFAULTS[field.name]
    return None if field.default is dataclasses.MISSING else field.default


def _define(flags, field, help_text, flag_values):
    name, default = rules.FLAG_NAMES.get(field.name, field.name), flag_default(field)
    if field.type is tuple:
        flags.DEFINE_list(name, list(default), help_text, flag_values=flag_values)
    elif field.name in CHOICES:
        flags.DEFINE_enum(name, default, CHOICES[field.name], help_text,
                          flag_values=flag_values)
    else:
        define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
                  float: flags.DEFINE_float, str: flags.DEFINE_string}[field.type]
        define(name, default, help_text, flag_values=flag_values)
