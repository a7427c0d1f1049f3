"""Command-line flags made from a dataclass's fields, so that a default is written once: the
field's. Each field that the help table names becomes one absl flag (a list for a tuple field,
an enum where choices are given, else the field's type) and is read back into the dataclass's
keyword arguments. Entry points use it through their own table of names, defaults and choices
(inception/config/flag_table.py, data/builder_cli.py). absl has no such bridge of its own.
"""

import dataclasses

from absl import flags

from common import cli

# absl credits a flag to the module that defines it; this helper's callers own theirs.
flags.disclaim_key_flags()


@dataclasses.dataclass(frozen=True)
class FlagTable:
    """How fields become flags. names: {field: flag name} where they differ; defaults: {field:
    flag default} where the field has none fit for a command line; choices: {field: allowed
    values} (an enum flag); paths: fields that name a file or directory, read back as the user
    meant them (cli.user_path)."""
    names: dict = dataclasses.field(default_factory=dict)
    defaults: dict = dataclasses.field(default_factory=dict)
    choices: dict = dataclasses.field(default_factory=dict)
    paths: frozenset = frozenset()

    def flag_name(self, field_name):
        """The flag of the field `field_name`."""
        return self.names.get(field_name, field_name)

    def flag_default(self, field):
        """The command-line default of `field` (a dataclasses.Field)."""
        if field.name in self.defaults:
            return self.defaults[field.name]
        return None if field.default is dataclasses.MISSING else field.default

    def define_flags(self, section, help_table, flag_values=None):
        """Defines an absl flag for each field of the dataclass `section` that `help_table`
        ({field name: help}) names, in `flag_values` (None: the process's flags.FLAGS)."""
        flag_values = flags.FLAGS if flag_values is None else flag_values
        for field in dataclasses.fields(section):
            if field.name in help_table and not field.metadata.get("resolved"):
                self._define(field, help_table[field.name], flag_values)

    def values_of(self, flag_values, section):
        """{field name: value} of the flags of `section`'s fields in absl's parsed
        `flag_values` (fields without a flag are left out): lists as tuples, paths as the user
        meant them."""
        values = {}
        for field in dataclasses.fields(section):
            name = self.flag_name(field.name)
            if name not in flag_values or field.metadata.get("resolved"):
                continue
            value = flag_values[name].value
            if field.type is tuple:
                value = tuple(value)
            values[field.name] = cli.user_path(value) if field.name in self.paths else value
        return values

    def _define(self, field, help_text, flag_values):
        name, default = self.flag_name(field.name), self.flag_default(field)
        if field.type is tuple:
            flags.DEFINE_list(name, list(default), help_text, flag_values=flag_values)
        elif field.name in self.choices:
            flags.DEFINE_enum(name, default, self.choices[field.name], help_text,
                              flag_values=flag_values)
        else:
            define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
                      float: flags.DEFINE_float, str: flags.DEFINE_string}[field.type]
            define(name, default, help_text, flag_values=flag_values)
