"""`bin/bazel run //docs:flag_reference`: rewrites docs/reference.md, every flag of every
command with its default and help, from the tables the commands define their flags with.

The application's commands take their flags from settings dataclasses and help tables
(inception/config); they are defined here into a fresh absl FlagValues exactly as each entry
point defines them. The shard builders and the bounding-box converter define theirs on import
(data/builder_cli.py's TABLE), and two of them share names with different defaults, so each is
imported in a process of its own. //tests/docs:flags_test checks that the page is up to date.
"""

import json
import os
import subprocess
import sys

from absl import flags

from inception.config import cluster as cluster_lib
from inception.config import commands
from inception.config import flag_table
from inception.config import help_texts
from inception.config import plans
from inception.config import settings as settings_lib
from inception.config import sources

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.md")
# (command, [(settings dataclasses, help table)]) in the order of each entry point.
APPLICATION = (
    ("//inception:train", [(list(settings_lib.SECTIONS.values()), help_texts.TRAIN_HELP),
                           ([cluster_lib.ClusterSettings], cluster_lib.CLUSTER_HELP),
                           ([plans.PlanFlags], plans.PLAN_HELP),
                           ([commands.RangeTestSettings], commands.RANGE_TEST_HELP)]),
    ("//inception:eval", [([settings_lib.EvalSettings], help_texts.EVAL_HELP)]),
    ("//inception:export", [([commands.ExportSettings], commands.EXPORT_HELP)]),
    ("//inception:classify", [([commands.ClassifySettings], commands.CLASSIFY_HELP)]),
    ("//inception:input_service", [([sources.InputServiceSettings], sources.SERVICE_HELP)]),
)
# (command, module that defines its flags on import)
DATA_PROGRAMS = (
    ("//data:build_image_data", "data.build_image_data"),
    ("//data:build_imagenet_data", "data.build_imagenet_data"),
    ("//data:process_bounding_boxes", "data.process_bounding_boxes"),
)
# Run in a fresh process: imports the module named by argv[1] and prints its flags as JSON
# (a default path inside the repository relative to it, as the same on every machine).
_LIST_FLAGS = """
import importlib
import json
import sys
from absl import flags
import os
importlib.import_module(sys.argv[1])
root = os.path.dirname(os.path.dirname(os.path.abspath(importlib.import_module("data").__file__)))
def shown(value):
    if isinstance(value, str) and value.startswith(root + os.sep):
        return os.path.relpath(value, root)
    return value
print(json.dumps([[name, shown(flags.FLAGS[name].default), flags.FLAGS[name].help]
                  for name in sorted(flags.FLAGS)
                  if flags.FLAGS.find_module_defining_flag(name, "").startswith("data.")]))
"""


def application_flags():
    """{command: [(flag name, default, help)]} of the application's commands, sorted by name."""
    found = {}
    for command, tables in APPLICATION:
        values = flags.FlagValues()
        for sections, help_table in tables:
            flag_table.define_flags(sections, help_table, values)
        found[command] = [(name, values[name].default, values[name].help)
                          for name in sorted(values)]
    return found


def data_program_flags():
    """{command: [(flag name, default, help)]} of the data programs, each listed by a process
    of its own that imports it (all at once)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    running = [(command, subprocess.Popen([sys.executable, "-c", _LIST_FLAGS, module], env=env,
                                          cwd=root, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
               for command, module in DATA_PROGRAMS]
    found = {}
    for command, process in running:
        out, err = process.communicate()
        if process.returncode:
            raise RuntimeError(f"listing the flags of {command} failed: {err.strip()}")
        found[command] = [tuple(row) for row in json.loads(out.strip().splitlines()[-1])]
    return found


def _cell(text):
    """`text` for a Markdown table cell: pipes escaped; outside `code`, < and * escaped too."""
    parts = str(text).replace("|", "\\|").split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace("*", "\\*")
    return "`".join(parts)


def _default(value):
    if isinstance(value, list):
        value = ",".join(str(item) for item in value)
    return "(none)" if value in (None, "") else f"`{value}`"


def render(commands_flags):
    """The page: a table of flag, default and help per command ({command: rows})."""
    lines = ["# Every flag", "",
             "Every flag of every command, its default and its help, as `--help` prints them. "
             "This page is generated from the tables the commands define their flags with "
             "(`docs/flag_reference.py`; rewrite it with `bin/bazel run //docs:flag_reference`); "
             "`//tests/docs:flags_test` fails when it is out of date. The other pages say what "
             "the flags do together; a default of \"(none)\" is filled in when the run is "
             "resolved (the data set's default, or off)."]
    for command, rows in commands_flags.items():
        lines += ["", f"## `{command}`", "", "| flag | default | help |", "| --- | --- | --- |"]
        lines += [f"| `--{name}` | {_cell(_default(default))} | {_cell(' '.join(help.split()))} |"
                  for name, default, help in rows]
    return "\n".join(lines) + "\n"


def every_command_flags():
    """{command: [(flag name, default, help)]} of every command, the application's first."""
    return {**application_flags(), **data_program_flags()}


def main():
    """Writes the page into the source tree (bazel run) or beside this file."""
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    page = os.path.join(root, "docs", "reference.md") if root else PAGE
    with open(page, "w", encoding="utf-8") as handle:
        handle.write(render(every_command_flags()))
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
