"""Every flag of training and evaluation, declared once: the flag's name, type and default are
its setting's (a field of config/settings.py, or config/cluster.ClusterSettings), its help
text is in config/help_texts.py, and its choices are here. The entry points define their flags with `define_flags`,
so a default is written in one place only (layout_test checks that each flag's default is its
setting's). Flag names are the original's (rules.FLAG_NAMES where a setting's name differs).
Free of TensorFlow.
"""

import dataclasses

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
