"""How the application's entry points start TensorFlow: XLA allowed on CPUs, then a quiet
start-up that also makes tf-slim work (common.cli has what every command shares)."""

import os
import sys

from common import cli as common_cli

CPU_XLA_FLAG = "--tf_xla_cpu_global_jit"


def allow_xla_on_cpu():
    """Adds the flag that lets XLA auto-cluster CPU ops (--xla) to TF_XLA_FLAGS.

    TensorFlow reads TF_XLA_FLAGS once per process, as early as when it first lists its
    devices, so this must come before that; quiet_tensorflow() calls it. The flag alone
    compiles nothing: only a session whose config asks for XLA (devices.apply_xla) clusters.
    """
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if CPU_XLA_FLAG not in flags.split():
        os.environ["TF_XLA_FLAGS"] = f"{flags} {CPU_XLA_FLAG}".strip()


def quiet_tensorflow():
    """common.cli.quiet_tensorflow() with XLA allowed on CPUs, then tf-slim made to work on
    this TensorFlow (model/slim_compat.py), its import as quiet as TensorFlow's. Call first."""
    allow_xla_on_cpu()  # before common's quiet_tensorflow lists the devices
    common_cli.quiet_tensorflow()
    with common_cli.native_stderr_held_back():
        from inception.model import slim_compat  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import


def file_errors():
    """The exception types of a failed file-system operation, for `except startup.file_errors()`:
    OSError, and TensorFlow's own once TensorFlow is loaded (its file systems raise those)."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return (OSError,)
    kinds = tf.errors
    return (OSError, kinds.PermissionDeniedError, kinds.NotFoundError,
            kinds.ResourceExhaustedError, kinds.FailedPreconditionError, kinds.UnimplementedError,
            kinds.AlreadyExistsError, kinds.DataLossError)
