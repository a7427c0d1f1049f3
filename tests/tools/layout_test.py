"""The folder tree shows the architecture, and the BUILD files say so truly: every target's
deps are what its sources import (tools/build_deps.py), no two module names of the application
can be confused, no file or function grows past what a reader takes in at once, no function
takes more than seven parameters, every error meant for users is a common.cli.UserError, the
one class the entry points catch, and every flag is generated from its setting (default once,
help once)."""

import ast
import collections
import dataclasses
import os
import re
import unittest

from absl import flags
from absl.testing import absltest

from common import field_flags
from inception.config import cluster as cluster_lib
from inception.config import commands
from inception.config import flag_table
from inception.config import help_texts
from inception.config import plans
from inception.config import rules
from inception.config import settings as settings_lib
from tools import build_deps

MAX_MODULE_LINES = 300  # a module of the application (APPLICATION): one role, read at once
MAX_FILE_LINES = 400  # a test, benchmark or tool
MAX_FUNCTION_LINES = 60
# A function of the application takes its inputs whole (a settings section, a dataclass of
# options): more than this many parameters means a builder is unpacking what it should be given.
MAX_PARAMETERS = 7
# Signatures someone else dictates: tf-slim calls a normalizer_fn with its batch_norm's keywords,
# and Inception v3 its dropout with dropout's (the mask multiply adds its stateless seed).
PARAMETER_EXEMPT = {("inception/model/synced_batch_norm.py", "batch_norm"),
                    ("inception/model/network.py", "mask_dropout")}
# An entry point: its flags, their settings and a short main; what runs them lives with its
# role (inception/driver/entry.py for train.py), as flax's main.py keeps to its flags.
MAX_ENTRY_POINT_LINES = 130
# inception/'s packages by role, each importing only those before it (a reader meets no name
# from further down); docs/layout.md's package table lists them in this order with their roles.
PACKAGE_LAYERS = ("config", "inputs", "run", "parallel", "model", "step", "loop", "serving",
                  "validation", "distributed", "driver")
OTHER_CATCHES = ("OSError", "tf.errors.OpError", "KeyboardInterrupt")  # beside a UserError
FIRST_PARTY = ("common", "data", "inception", "tests", "bench", "tools")
APPLICATION = ("common", "data", "inception")
# Errors that never reach a user as such: the image converter's skip signal.
INTERNAL_ERRORS = {"UndecodableImageError"}
ENTRY_POINTS = ("inception/train.py", "inception/eval.py", "inception/export.py",
                "inception/classify.py", "inception/input_service.py", "data/builder_cli.py",
                "data/process_bounding_boxes.py")
# Programs whose flags all come from dataclass fields (common/field_flags.py).
FLAGS_FROM_FIELDS = ENTRY_POINTS[:5] + ("data/build_image_data.py", "data/build_imagenet_data.py",
                                        "data/process_bounding_boxes.py")


def source_root():
    """The repository this test file was checked out in (through Bazel's runfiles links), or
    None when it cannot be found (the check then skips, saying so)."""
    directory = os.path.dirname(os.path.realpath(__file__))
    while directory != os.path.dirname(directory):
        if os.path.exists(os.path.join(directory, "WORKSPACE")):
            return directory
        directory = os.path.dirname(directory)
    return None


def python_files(root, folders=FIRST_PARTY):
    """Every .py file of the first-party folders, relative to `root`."""
    found = []
    for folder in folders:
        for directory, _, names in os.walk(os.path.join(root, folder)):
            found.extend(os.path.relpath(os.path.join(directory, name), root)
                         for name in names if name.endswith(".py"))
    return sorted(found)


def parameter_count(arguments):
    """How many parameters a caller fills: self and cls left out, *args and **kwargs one each."""
    names = [arg.arg for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (arguments.vararg is not None) + (arguments.kwarg is not None)


class LayoutTest(unittest.TestCase):

    def setUp(self):
        self.root = source_root()
        if self.root is None:
            self.skipTest("the source tree is not reachable from this test's runfiles")

    def test_every_targets_deps_are_what_its_sources_import(self):
        self.assertEqual(build_deps.problems(self.root), [])

    def test_no_two_application_module_names_can_be_confused(self):
        names = sorted({os.path.basename(path)[:-3] for path in
                        python_files(self.root, ("inception",))} - {"__init__"})
        for index, name in enumerate(names):
            for other in names[index + 1:]:
                with self.subTest(pair=(name, other)):
                    self.assertFalse(other.startswith(name) or name[:5] == other[:5],
                                     f"{name} and {other}")

    def test_every_file_a_module_points_at_exists(self):
        # `<folder>/<name>.py` in a comment or docstring, read from the repository's root, the
        # module's own folder or its top folder, or inception/ or tests/ (how they are written).
        mention = re.compile(r"(?<![\w./-])((?:[a-z_]+/)+[a-z_0-9]+\.py)\b")
        for path in python_files(self.root):
            folder, top = os.path.dirname(path), path.split(os.sep)[0]
            with open(os.path.join(self.root, path), encoding="utf-8") as handle:
                mentioned = set(mention.findall(handle.read()))
            missing = [name for name in sorted(mentioned) if not any(
                os.path.exists(os.path.join(self.root, base, name))
                for base in ("", folder, top, "inception", "tests"))]
            with self.subTest(path=path):
                self.assertEqual(missing, [], "a file that moved or never existed")

    def test_every_constant_of_the_application_is_used(self):
        texts = {}
        for path in python_files(self.root):
            with open(os.path.join(self.root, path), encoding="utf-8") as handle:
                texts[path] = handle.read()
        words = collections.Counter(re.findall(r"\b[A-Z_][A-Z0-9_]*\b",
                                               "\n".join(texts.values())))
        for path in python_files(self.root, APPLICATION):
            constants = [target.id for node in ast.parse(texts[path]).body
                         if isinstance(node, ast.Assign) for target in node.targets
                         if isinstance(target, ast.Name) and target.id.isupper()]
            for name in constants:
                with self.subTest(path=path, constant=name):
                    self.assertGreater(words[name], 1, "defined and never used: remove it")

    def test_only_entry_points_sit_directly_in_inception(self):
        top = sorted(name for name in os.listdir(os.path.join(self.root, "inception"))
                     if name.endswith(".py"))
        self.assertEqual(top, ["__init__.py", "classify.py", "eval.py", "export.py",
                               "input_service.py", "train.py"])

    def test_each_package_imports_only_the_packages_below_it(self):
        packages = sorted(name for name in os.listdir(os.path.join(self.root, "inception"))
                          if os.path.isfile(os.path.join(self.root, "inception", name, "BUILD")))
        self.assertEqual(packages, sorted(PACKAGE_LAYERS), "a new package needs its layer")
        for path in python_files(self.root, ("inception",)):
            package = path.split(os.sep)[1]
            if package not in PACKAGE_LAYERS:
                continue  # an entry point: it may use any package
            below = PACKAGE_LAYERS[:PACKAGE_LAYERS.index(package) + 1]
            with open(os.path.join(self.root, path), encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            imported = {node.module.split(".")[1] for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and node.module
                        and node.module.startswith("inception.")}
            with self.subTest(path=path):
                self.assertEqual(sorted(imported - set(below)), [],
                                 f"{package} may import only {below} (PACKAGE_LAYERS)")

    def test_the_layout_page_lists_the_packages_in_their_layers(self):
        with open(os.path.join(self.root, "docs", "layout.md"), encoding="utf-8") as handle:
            listed = re.findall(r"^\| `([a-z_]+)/` \|", handle.read(), re.MULTILINE)
        self.assertEqual(tuple(name for name in listed if name in os.listdir(
            os.path.join(self.root, "inception"))), PACKAGE_LAYERS)

    def test_files_and_functions_stay_short_and_modules_say_what_they_own(self):
        for path in python_files(self.root):
            with open(os.path.join(self.root, path), encoding="utf-8") as handle:
                text = handle.read()
            with self.subTest(path=path):
                limit = (MAX_ENTRY_POINT_LINES if path in ENTRY_POINTS else
                         MAX_MODULE_LINES if path.split(os.sep)[0] in APPLICATION
                         else MAX_FILE_LINES)
                self.assertLessEqual(text.count("\n"), limit)
                tree = ast.parse(text, path)
                if not path.endswith("__init__.py"):
                    self.assertTrue(ast.get_docstring(tree), "no module docstring")
                for node in ast.walk(tree):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        length = node.end_lineno - node.lineno + 1
                        self.assertLessEqual(length, MAX_FUNCTION_LINES,
                                             f"{node.name} has {length} lines")

    def test_no_application_function_takes_more_than_seven_parameters(self):
        for path in python_files(self.root, APPLICATION):
            with open(os.path.join(self.root, path), encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            for node in ast.walk(tree):
                if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and (path, node.name) not in PARAMETER_EXEMPT):
                    with self.subTest(path=path, function=node.name):
                        self.assertLessEqual(parameter_count(node.args), MAX_PARAMETERS)

    def test_every_error_class_is_a_user_error_and_entry_points_catch_only_that(self):
        bases = {}
        for path in python_files(self.root, APPLICATION):
            with open(os.path.join(self.root, path), encoding="utf-8") as handle:
                for node in ast.walk(ast.parse(handle.read(), path)):
                    if isinstance(node, ast.ClassDef):
                        bases[node.name] = [ast.unparse(base).split(".")[-1]
                                            for base in node.bases]

        def is_user_error(name):
            return name == "UserError" or any(is_user_error(base)
                                               for base in bases.get(name, ()))
        for name in sorted(bases):
            if name.endswith("Error") and name not in INTERNAL_ERRORS | {"UserError"}:
                with self.subTest(error=name):
                    self.assertTrue(is_user_error(name), f"{name} derives from {bases[name]}")
        for path in ENTRY_POINTS + ("inception/driver/entry.py",):  # what train.py runs
            with open(os.path.join(self.root, path), encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            handlers = [node.type for node in ast.walk(tree)
                        if isinstance(node, ast.ExceptHandler) and node.type is not None]
            caught = [kind for handler in handlers
                      for kind in (handler.elts if isinstance(handler, ast.Tuple) else [handler])]
            with self.subTest(entry_point=path):
                # A user error, what a failed file or TensorFlow call raises (each entry
                # point turns those into one line); a call such as `except kinds()` hides what
                # it catches, so it is refused with everything else.
                self.assertEqual([ast.unparse(kind) for kind in caught
                                  if isinstance(kind, ast.Call) or not (
                                      is_user_error(ast.unparse(kind).split(".")[-1]) or
                                      ast.unparse(kind) in OTHER_CATCHES)], [])

    def test_every_flag_is_its_settings_field_with_its_help_declared_once(self):
        tables = ((list(settings_lib.SECTIONS.values()), help_texts.TRAIN_HELP),
                  ([settings_lib.EvalSettings], help_texts.EVAL_HELP),
                  ([cluster_lib.ClusterSettings], cluster_lib.CLUSTER_HELP),
                  ([plans.PlanFlags], plans.PLAN_HELP),
                  ([commands.RangeTestSettings], commands.RANGE_TEST_HELP),
                  ([commands.ExportSettings], commands.EXPORT_HELP),
                  ([commands.ClassifySettings], commands.CLASSIFY_HELP))
        for sections, help_table in tables:
            fields = {field.name: field for section in sections
                      for field in dataclasses.fields(section)
                      if not field.metadata.get("resolved") and field.name != "plan"}
            with self.subTest(sections=[section.__name__ for section in sections]):
                self.assertEqual(sorted(help_table), sorted(fields))
                values = flags.FlagValues()
                flag_table.define_flags(sections, help_table, values)
                for name, field in fields.items():
                    flag = values[rules.FLAG_NAMES.get(name, name)]
                    want = flag_table.flag_default(field, help_table[name])
                    self.assertEqual(flag.default, list(want) if isinstance(want, tuple)
                                     else want, name)
                    self.assertIn(field_flags.declared(help_table[name]).help, flag.help)

    def test_entry_points_define_no_flag_of_their_own(self):
        for path in FLAGS_FROM_FIELDS:
            with open(os.path.join(self.root, path), encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            defined = [ast.unparse(node.func) for node in ast.walk(tree)
                       if isinstance(node, ast.Call) and ast.unparse(node.func).startswith(
                           "flags.DEFINE_") and ast.unparse(node.func) != "flags.DEFINE_alias"]
            with self.subTest(entry_point=path):
                self.assertEqual(defined, [], "define them from a settings dataclass "
                                 "(config/flag_table.define_flags)")


if __name__ == "__main__":
    absltest.main()
