"""Checks that every Bazel Python target's deps are exactly what its sources import.

`bazel run //tools:build_deps` (or `python3 tools/build_deps.py` from the repository root)
prints one line per target whose deps differ from its imports and exits 1; nothing printed,
exit 0, when all match. The BUILD files are read with stand-ins for the few rules they use,
the sources with Python's own parser. A first-party module a source imports (`common.cli`,
`inception.driver.launch`), or runs by name as a program (`-m inception.train` in a test, written
as the string "inception.train"), must be provided by a dep; a dep whose modules nothing
imports is reported too (a stale dep hides the real structure). Third-party packages come from
the virtual environment and are not checked. Written here because Bazel's own tooling for
this (Gazelle's Python plugin) needs a network download and a Go toolchain.
"""

import ast
import dataclasses
import glob
import os
import re
import sys

FIRST_PARTY = ("common", "data", "inception", "tests", "bench", "tools")
RULES = ("py_library", "py_binary", "py_test", "cpu_test", "gpu_test")
_MODULE_STRING = re.compile(r"^(?:%s)(?:\.[a-z_][a-z0-9_]*)+$" % "|".join(FIRST_PARTY))


@dataclasses.dataclass
class Target:
    """One Python target: its label, source files and declared deps (labels)."""
    label: str
    srcs: list
    deps: list


def read_targets(root):
    """Every Python target of every BUILD file under `root`."""
    targets = []
    for build in sorted(glob.glob(os.path.join(root, "**", "BUILD"), recursive=True)):
        package = os.path.relpath(os.path.dirname(build), root).replace(os.sep, "/")
        package = "" if package == "." else package
        if package.startswith(("third_party", "bazel-")):
            continue
        targets.extend(_targets_of(build, package, root))
    return targets


def _targets_of(build, package, root):
    found = []

    def rule(name, srcs=(), deps=(), **_):
        found.append(Target(f"//{package}:{name}",
                            [os.path.join(package, src) for src in srcs],
                            [_absolute(dep, package) for dep in deps]))

    def glob_files(include, exclude=()):
        base = os.path.join(root, package)
        chosen = {os.path.relpath(path, base) for pattern in include
                  for path in glob.glob(os.path.join(base, pattern))}
        chosen -= {os.path.relpath(path, base) for pattern in exclude
                   for path in glob.glob(os.path.join(base, pattern))}
        return sorted(chosen)

    names = {rule_name: rule for rule_name in RULES}
    names.update(glob=glob_files, load=lambda *args, **kwargs: None,
                 package=lambda **kwargs: None, exports_files=lambda *args, **kwargs: None)
    with open(build, encoding="utf-8") as handle:
        exec(compile(handle.read(), build, "exec"), names)  # pylint: disable=exec-used
    return found


def _absolute(dep, package):
    if dep.startswith(":"):
        return f"//{package}{dep}"
    if dep.startswith("//") and ":" not in dep:
        return f"{dep}:{dep.rsplit('/', 1)[-1]}"
    return dep


def imported_modules(path):
    """First-party modules that the source file `path` imports or names as a program."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_STRING.match(node.value):
                modules.add(node.value)
            elif "\nimport " in node.value or "\nfrom " in node.value:
                modules.update(_script_imports(node.value))
    # Importing a.b.c imports the packages a and a.b too: their __init__.py must be there.
    with_parents = {".".join(module.split(".")[:length]) for module in modules
                    for length in range(1, module.count(".") + 2)}
    return {module for module in with_parents if module.split(".")[0] in FIRST_PARTY}


def _script_imports(text):
    # A Python script embedded in a test (run in a subprocess) imports modules too.
    try:
        tree = ast.parse(re.sub(r"\{[^{}\n]*\}", "0", text))
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def providers(targets):
    """{source file's module name: label of the target that lists it}."""
    index = {}
    for target in targets:
        for src in target.srcs:
            if src.endswith(".py"):
                module = src[:-3].replace("/", ".")
                module = module[:-len(".__init__")] if module.endswith(".__init__") else module
                index.setdefault(module, target.label)
    return index


def required_deps(target, index, root):
    """Labels the target must depend on: the providers of what its sources import (code
    outside tests/ may name a test module, e.g. as a flag's default, without depending on it:
    test code is testonly)."""
    needed = set()
    for src in target.srcs:
        if not src.endswith(".py"):
            continue
        for module in imported_modules(os.path.join(root, src)):
            if module.startswith("tests") and not src.startswith("tests/"):
                continue
            label = index.get(module)
            if label is not None and label != target.label:
                needed.add(label)
    return needed


def problems(root):
    """One line per target whose declared deps differ from its imports."""
    targets = read_targets(root)
    index = providers(targets)
    lines = []
    for target in targets:
        needed = required_deps(target, index, root)
        declared = set(target.deps)
        missing, unused = sorted(needed - declared), sorted(declared - needed)
        if missing or unused:
            lines.append(f"{target.label}: " + "; ".join(
                part for part in (f"missing {', '.join(missing)}" if missing else "",
                                  f"unused {', '.join(unused)}" if unused else "") if part))
    return lines


def main():
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY", os.getcwd())
    lines = problems(root)
    for line in lines:
        print(line)
    sys.exit(1 if lines else 0)


if __name__ == "__main__":
    main()
