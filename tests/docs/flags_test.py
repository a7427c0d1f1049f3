"""Every flag of every command is in the manual: each appears as `--flag_name` in a page of
docs/, and docs/reference.md (every flag with its default and help) is what
docs/flag_reference.py writes from the commands' flag tables today."""

import dataclasses
import glob
import os
import re

from absl import flags
from absl.testing import absltest

from data import bounding_boxes
from data import builder_cli
from data import image_folders
from data import imagenet
from data import process_bounding_boxes
from docs import flag_reference
from inception.config import cluster as cluster_lib
from inception.config import commands
from inception.config import flag_table
from inception.config import help_texts
from inception.config import plans
from inception.config import settings as settings_lib
from inception.config import sources

DOCS = os.path.dirname(os.path.abspath(flag_reference.__file__))
# (command, [(settings dataclasses, help table)]) as each entry point defines its flags.
APPLICATION = {
    "train": [(list(settings_lib.SECTIONS.values()), help_texts.TRAIN_HELP),
              ([cluster_lib.ClusterSettings], cluster_lib.CLUSTER_HELP),
              ([plans.PlanFlags], plans.PLAN_HELP),
              ([commands.RangeTestSettings], commands.RANGE_TEST_HELP)],
    "eval": [([settings_lib.EvalSettings], help_texts.EVAL_HELP)],
    "export": [([commands.ExportSettings], commands.EXPORT_HELP)],
    "classify": [([commands.ClassifySettings], commands.CLASSIFY_HELP)],
    "input_service": [([sources.InputServiceSettings], sources.SERVICE_HELP)],
}
# (command, flag table, options dataclass): every field of the options is a flag.
DATA_PROGRAMS = (
    ("build_image_data", builder_cli.TABLE, image_folders.FolderBuildOptions),
    ("build_imagenet_data", builder_cli.TABLE, imagenet.ImageNetBuildOptions),
    ("process_bounding_boxes", process_bounding_boxes.TABLE, bounding_boxes.BoxCsvOptions),
)


def every_flag():
    """{command: sorted flag names}, from the tables every command defines its flags with."""
    found = {}
    for command, tables in APPLICATION.items():
        values = flags.FlagValues()
        for sections, help_table in tables:
            flag_table.define_flags(sections, help_table, values)
        found[command] = sorted(values)
    for command, table, options in DATA_PROGRAMS:
        found[command] = sorted(table.flag_name(field.name)
                                for field in dataclasses.fields(options))
    return found


def manual_text():
    """Every page of docs/, joined."""
    texts = []
    for path in sorted(glob.glob(os.path.join(DOCS, "*.md"))):
        with open(path, encoding="utf-8") as handle:
            texts.append(handle.read())
    return "\n".join(texts)


class FlagsTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.generated = flag_reference.every_command_flags()  # a process per data program

    def test_every_flag_of_every_command_appears_in_the_manual(self):
        text = manual_text()
        found = every_flag()
        self.assertGreater(sum(len(names) for names in found.values()), 100)
        for command, names in found.items():
            missing = [name for name in names
                       if not re.search(r"--" + re.escape(name) + r"(?![\w-])", text)]
            with self.subTest(command=command):
                self.assertEqual(missing, [], "say what these flags do in a page of docs/")

    def test_the_flag_reference_is_up_to_date(self):
        with open(os.path.join(DOCS, "reference.md"), encoding="utf-8") as handle:
            committed = handle.read()
        generated = flag_reference.render(self.generated)
        self.assertEqual(committed, generated,
                         "docs/reference.md is out of date: bin/bazel run //docs:flag_reference")

    def test_the_reference_lists_the_flags_of_every_command(self):
        listed = {command.rsplit(":", 1)[1]: sorted(name for name, _, _ in rows)
                  for command, rows in self.generated.items()}
        self.assertEqual(listed, every_flag())


if __name__ == "__main__":
    absltest.main()
