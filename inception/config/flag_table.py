"""Every flag of every entry point, declared once: the flag's name, type and default are its
setting's (a field of config/settings.py, cluster.ClusterSettings, plans.PlanFlags,
sources.InputServiceSettings or config/commands.py), and its help, choices, path-ness and any
command-line default of its own are its entry in the help table beside the setting
(config/help_texts.py, cluster.py, commands.py, plans.py, sources.py:
common/field_flags.Flag; its choices and bounds are checked by rules.check_declared). The entry
points define their flags with `define_flags` and read them back with `values_of`, so nothing
about a flag is written twice (layout_test checks that each flag's default is its setting's and
that the entry points define no flag of their own). Flag names are the original's
(rules.FLAG_NAMES where a setting's name differs). Free of TensorFlow.
"""

from common import field_flags
from inception.config import rules

TABLE = field_flags.FlagTable(names=rules.FLAG_NAMES)


def define_flags(section_classes, help_table, flag_values=None):
    """Defines one flag per field of the dataclasses `section_classes` that `help_table`
    ({setting name: Flag or help}) names: a list for a tuple field, an enum for one with
    choices, else the field's type. `flag_values`: absl's FlagValues to define them in (None:
    flags.FLAGS)."""
    for section in section_classes:
        TABLE.define_flags(section, help_table, flag_values)


def values_of(flag_values, section, help_table):
    """{field name: value} of the flags of the dataclass `section` in absl's parsed
    `flag_values`: lists as tuples, the paths `help_table` declares as the user meant them."""
    return TABLE.values_of(flag_values, section, help_table)


def flag_default(field, entry):
    """The command-line default of the setting `field` (a dataclasses.Field) whose help table
    entry is `entry`."""
    return TABLE.flag_default(field, entry)
