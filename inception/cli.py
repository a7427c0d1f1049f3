"""What the entry points share: quiet TensorFlow start-up, user paths, one-line errors."""

import os
import sys
import warnings


def quiet_tensorflow():
    """Hides TensorFlow's start-up chatter (C++ info lines, deprecation notices). Call first."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    warnings.filterwarnings("ignore", category=UserWarning, module="tensorflow")
    warnings.filterwarnings("ignore", category=UserWarning, module="tf_keras")
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.get_logger().setLevel("ERROR")
    from absl import logging  # pylint: disable=import-outside-toplevel
    logging.set_verbosity(logging.ERROR)


def user_path(path):
    """`path` as the user meant it: `bazel run` starts us in the runfiles tree, so a relative
    path is taken relative to the directory the command was typed in."""
    if not path:
        return path
    path = os.path.expanduser(path)
    base = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())
    return os.path.normpath(os.path.join(base, path))


def fail(message, code=1):
    """Prints `error: message` on one line to stderr and exits with `code`."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
    sys.exit(code)


def log(message):
    """Progress output of the entry points: stdout, flushed at once."""
    print(message, flush=True)


def parse_flags(argv):
    """absl flags parser for `app.run(main, flags_parser=cli.parse_flags)`: a bad flag or value
    becomes one line `error: ...` and exit status 2."""
    from absl import flags  # pylint: disable=import-outside-toplevel
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        fail(f"{error} (see --help)", code=2)
