"""What every entry point shares, TensorFlow or not: quiet TensorFlow start-up, user paths,
one-line errors, flag parsing."""

import contextlib
import datetime
import os
import sys
import tempfile
import textwrap
import warnings

from common import files
from common import signals


class UserError(Exception):
    """A mistake the user can fix (a flag, a file, the data, the machine, a run that diverged):
    the entry points print its message as one line. Every error class meant for users derives
    from it, and nothing else is caught there, so a bug stays a traceback.

    `retryable`: starting the same command again may get past it (a task of a cluster was
    lost); training then exits with its restart code, so that a scheduler restarts it.
    """
    retryable = False


# tf-slim's layers run on tf_keras (Keras 2) whatever `tf.keras` names; with `tf.keras` naming
# Keras 2 as well, importing TensorFlow skips loading Keras 3 (and matplotlib with it), about
# 0.6 s of every process. Keras 3 stays importable as `keras` (bench/measure.py compares with it).
LEGACY_KERAS_VARIABLE = "TF_USE_LEGACY_KERAS"


def quiet_tensorflow():
    """Hides TensorFlow's start-up chatter (C++ info lines, deprecation notices) and makes
    `tf.keras` Keras 2 (LEGACY_KERAS_VARIABLE) unless the environment says otherwise. Call first.

    TensorFlow's C++ logging writes to file descriptor 2 before any setting can stop it, so
    the import runs with that descriptor sent to a temporary file, which is shown only if the
    import fails; the GPU platform is initialized there too (on a machine without GPUs it
    logs "failed call to cuInit"). Loads TensorFlow only: tf-slim is the business of
    inception/driver/startup.py.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault(LEGACY_KERAS_VARIABLE, "1")
    warnings.filterwarnings("ignore", category=UserWarning, module="tensorflow")
    warnings.filterwarnings("ignore", category=UserWarning, module="tf_keras")
    with native_stderr_held_back():
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        tf.config.list_physical_devices("GPU")  # initializes CUDA once, here, quietly
    tf.get_logger().setLevel("ERROR")
    from absl import logging  # pylint: disable=import-outside-toplevel
    logging.set_verbosity(logging.ERROR)


@contextlib.contextmanager
def native_stderr_held_back():
    """Sends file descriptor 2 (where C++ code logs) to a temporary file for the `with` block;
    what was held back is written to stderr only when the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            sys.stderr.write(held.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def user_path(path):
    """`path` as the user meant it: `bazel run` starts us in the runfiles tree, so a relative
    path is taken relative to the directory the command was typed in."""
    if not path or files.is_url(path):
        return path
    path = os.path.expanduser(path)
    base = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())
    return os.path.normpath(os.path.join(base, path))


def program_command(program):
    """How the user starts `program` (train, eval, export, classify, input_service) the way
    this process was started: through bin/inception (the built programs without Bazel) or
    through `bin/bazel run`."""
    launcher = os.environ.get("INCEPTION_LAUNCHER")
    return f"{launcher} {program}" if launcher else f"bin/bazel run //inception:{program} --"


def timestamped(message):
    """`message` prefixed with the local time, as the training loop's and a cluster task's log
    lines are."""
    return f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S}: {message}"


def fail(message, code=1):
    """Prints `error: message` on one line to stderr and exits with `code`."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
    sys.exit(code)


def log(message):
    """Progress output of the entry points: stdout, flushed at once."""
    print(message, flush=True)


def parse_flags(argv):
    """absl flags parser for `app.run(main, flags_parser=cli.parse_flags)`: a bad flag or value
    becomes one line `error: ...` and exit status 2. It runs before anything slow, so it also
    makes Ctrl-C / SIGTERM one line in every later phase (common.signals.handle_signals)."""
    signals.handle_signals()
    from absl import flags  # pylint: disable=import-outside-toplevel
    if HELP_ARGUMENTS.intersection(argv[1:]):
        print_help(flags.FLAGS)
        sys.exit(0)
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        fail(f"{error} (see --help)", code=2)


HELP_ARGUMENTS = frozenset(("-h", "-?", "--help", "--helpshort", "--helpfull"))


def print_help(flag_values):
    """Prints the running program's help for its users: its module docstring, then each of its
    own flags (absl's `flag_values`) with its default and help. Written here because absl's
    --help groups the flags under the path of the file that defined them (a build cache's,
    under Bazel), adds absl's own, and exits with status 1."""
    print(textwrap.dedent(sys.modules["__main__"].__doc__ or "").strip() + "\n")
    print("Flags (every command's: docs/reference.md):")
    own = flag_values.get_key_flags_for_module(sys.argv[0])
    for flag in sorted(own, key=lambda flag: flag.name):
        default = shown_default(flag.default)
        print(f"  --{flag.name}" + (f" (default: {default})" if default else ""))
        print(textwrap.fill(flag.help, width=100, initial_indent=" " * 6,
                            subsequent_indent=" " * 6))


def shown_default(value):
    """A flag's default as a user types it ('' for none): true/false, a,b for lists."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return "" if value is None else str(value)


def duration(seconds):
    """`seconds` for a person: '12.3 s', '4 min 05 s', '2 h 03 min 04 s'."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min {secs:02d} s"
