"""Command-line flags made from a dataclass's fields, so that a setting is declared once: its
field (name, type, default) and its help table's entry (help, and where needed its choices,
that it is a path, a command-line default of its own: `Flag`). Each field the table names
becomes one absl flag (a list for a tuple field, an enum where choices are given, else the
field's type) and is read back into the dataclass's keyword arguments. absl has no such bridge
of its own.
"""

import dataclasses

from absl import flags

from common import cli

# absl credits a flag to the module that defines it; this helper's callers own theirs.
flags.disclaim_key_flags()
FIELDS_OWN = object()  # a Flag's default: the field's own


@dataclasses.dataclass(frozen=True)
class Flag:
    """A flag declared beside its setting, where it needs more than its help text (a help
    table's entry is a Flag or the help text alone). choices: the values allowed (an enum
    flag); path: it names a file or directory, read back as the user meant it (cli.user_path);
    default: its command-line default where the field has none fit for a command line
    (FIELDS_OWN: the field's); minimum, maximum: the smallest and largest values allowed;
    check: callable(value) -> what is wrong with it (a phrase) or None, for a rule a bound
    cannot say."""
    help: str
    choices: tuple = None
    path: bool = False
    default: object = FIELDS_OWN
    minimum: object = None
    maximum: object = None
    check: object = None

    def problem(self, value):
        """What is wrong with the setting's `value` (a phrase such as "must be at least 1"),
        or None when its choices, bounds and check all allow it."""
        if self.choices is not None and value not in self.choices:
            return f"is not one of {', '.join(choice for choice in self.choices if choice)}"
        low = self.minimum is not None and value < self.minimum
        high = self.maximum is not None and value > self.maximum
        if (low or high) and None not in (self.minimum, self.maximum):
            return f"must be in [{self.minimum}, {self.maximum}]"
        if low:
            return f"must be at least {self.minimum}"
        if high:
            return f"must be at most {self.maximum}"
        return self.check(value) if self.check else None


def declared(entry):
    """The Flag of a help table's `entry` (a Flag, or a help text)."""
    return entry if isinstance(entry, Flag) else Flag(entry)


@dataclasses.dataclass(frozen=True)
class FlagTable:
    """How fields become flags, beside what each help table's entries declare. names: {field:
    flag name} where they differ (the original scripts' names)."""
    names: dict = dataclasses.field(default_factory=dict)

    def flag_name(self, field_name):
        """The flag of the field `field_name`."""
        return self.names.get(field_name, field_name)

    @staticmethod
    def flag_default(field, entry):
        """The command-line default of `field` (a dataclasses.Field) declared by its help
        table's `entry`."""
        default = declared(entry).default
        if default is not FIELDS_OWN:
            return default
        return None if field.default is dataclasses.MISSING else field.default

    def define_flags(self, section, help_table, flag_values=None):
        """Defines an absl flag for each field of the dataclass `section` that `help_table`
        ({field name: Flag or help}) names, in `flag_values` (None: the process's flags.FLAGS)."""
        flag_values = flags.FLAGS if flag_values is None else flag_values
        for field in dataclasses.fields(section):
            if field.name in help_table and not field.metadata.get("resolved"):
                self._define(field, help_table[field.name], flag_values)

    def values_of(self, flag_values, section, help_table):
        """{field name: value} of the flags of `section`'s fields in absl's parsed
        `flag_values` (fields without a flag are left out): lists as tuples, the paths
        `help_table` declares as the user meant them."""
        values = {}
        for field in dataclasses.fields(section):
            name = self.flag_name(field.name)
            if (field.name not in help_table or name not in flag_values
                    or field.metadata.get("resolved")):
                continue
            value = flag_values[name].value
            if field.type is tuple:
                value = tuple(value)
            path = declared(help_table[field.name]).path
            values[field.name] = cli.user_path(value) if path else value
        return values

    def _define(self, field, entry, flag_values):
        flag = declared(entry)
        name, default = self.flag_name(field.name), self.flag_default(field, entry)
        if field.type is tuple:
            flags.DEFINE_list(name, list(default), flag.help, flag_values=flag_values)
        elif flag.choices is not None:
            flags.DEFINE_enum(name, default, flag.choices, flag.help, flag_values=flag_values)
        else:
            define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
                      float: flags.DEFINE_float, str: flags.DEFINE_string}[field.type]
            define(name, default, flag.help, flag_values=flag_values)
