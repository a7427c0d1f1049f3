"""How the application's entry points start TensorFlow: XLA allowed on CPUs, then a quiet
start-up that also makes tf-slim work (common.cli has what every command shares)."""

import os
import re

from common import cli as common_cli
from common import error_lines

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


# TensorFlow's error kinds that a file system raises (an OSError is one too); any other kind is
# the training's own failure and says so (stopped_line).
FILE_ERROR_KINDS = ("PermissionDeniedError", "AlreadyExistsError", "DataLossError")
_OUT_OF_MEMORY = re.compile(r"\bOOM\b|out of memory", re.IGNORECASE)
_DEVICE = re.compile(r"\bon (\S*device:\w+:\d+|\S*(?:GPU|CPU):\d+)")


def stopped_line(error):
    """The one line that ends training stopped by `error` (an OSError or a TensorFlow error
    that is no UserError): out of memory on which device and what to lower; a file system's
    error with its path; else the error itself. Each says the run resumes from its last
    checkpoint."""
    kind = type(error).__name__
    cause = error_lines.file_error_cause(error)
    resume = "rerun the same command to resume from the last checkpoint."
    if kind == "ResourceExhaustedError" and _OUT_OF_MEMORY.search(str(error)):
        device = _DEVICE.search(str(error))
        where = f" on {device.group(1)}" if device else ""
        return (f"training stopped: out of memory{where} ({error_lines.cause_of(error)}); "
                "lower --batch_size (or keep the batch with --accumulate_steps), or train in "
                f"--precision=bf16 (fp16 on older GPUs), then {resume}")
    if isinstance(error, OSError) or kind in FILE_ERROR_KINDS or "No space left" in cause:
        return (f"training stopped by a file-system error: {cause}; fix the directory "
                f"(space, permissions), then {resume}")
    return f"training stopped by TensorFlow's {kind}: {cause}; once it is fixed, {resume}"
