"""--deterministic in the process: TensorFlow's op determinism for the run's length, and the one
line for an op that has none."""

import contextlib

import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from common import error_lines
from inception.config import settings as settings_lib


@contextlib.contextmanager
def op_determinism(enabled):
    """TensorFlow's op determinism while the block runs (when `enabled`): every op then gives
    the same result for the same input on the same machine, or fails naming itself (on a GPU,
    an op without a deterministic kernel). Process-wide, so it is set back after the run
    (through TensorFlow's own module: the public API can only enable it)."""
    was_enabled = tf_config.is_op_determinism_enabled()
    if enabled and not was_enabled:
        tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:
        if enabled and not was_enabled:
            tf_config.disable_op_determinism()


def explain_determinism(error):
    """A SettingsError for an op that has no deterministic kernel here, else None."""
    message = getattr(error, "message", str(error))
    if not isinstance(error, tf.errors.UnimplementedError) or "eterminis" not in message:
        return None
    return settings_lib.SettingsError(
        f"--deterministic: {error_lines.root_cause(message)}; drop --deterministic to train "
        "with this op, or train on the CPU.")
