"""The one line of a TensorFlow error message that says what went wrong.

TensorFlow wraps an op's failure in lines that say where ("Graph execution error:", "Detected
at node ...", the op's creation stack, "[[{{node ...}}]]") and often prefixes the cause with the
file it concerns ("<path>.tempstate123; No space left on device"); on a cluster gRPC adds lines
of its own. Every one-line error that quotes an exception takes its cause from here. Free of
TensorFlow.
"""

import re

_WHERE = re.compile(r"^(Graph execution error|Detected at node|Node:|File \"|\[\[|Hint:|"
                    r"\d+ root error\(s\) found|\d+ successful operations|"
                    r"\d+ derived errors ignored|\s*$|\s+File |\s+\[\[|"
                    # where on a cluster: gRPC's own lines around a remote task's error
                    r"Additional GRPC|([A-Z_]+: )?From /job|:\{|:UNKNOWN)")
_STATUS_PREFIX = re.compile(r"^\(\d+\) [A-Z_]+: ")  # "(0) INVALID_ARGUMENT: " of root errors
# "Error in user-defined function passed to X transformation with iterator: A::B: " (tf.data)
_DATASET_PREFIX = re.compile(r"^Error in user-defined function .*? with iterator: [\w:]+: ")
_ASSERTION = re.compile(r"assertion failed: \[(.*)\]")
_PATH_PREFIX = re.compile(r"^\S*/\S*; ")  # "<path>.tempstate123; No space left on device"


def root_cause(message, keep_path=False):
    """The cause in a few words: the last line that does not say where, without tf.data's
    prefix, an assertion's brackets or (unless `keep_path`) the file path in front of
    `path; cause`; the first line when nothing better is found."""
    lines = [line.strip() for line in str(message).splitlines()]
    causes = [line for line in lines if line and not _WHERE.match(line)]
    first_root = [line for line in causes if line.startswith("(0) ")]
    cause = (first_root or causes[-1:] or lines[:1] or [""])[0]
    cause = _DATASET_PREFIX.sub("", _STATUS_PREFIX.sub("", cause))
    asserted = _ASSERTION.search(cause)
    if asserted:
        cause = asserted.group(1).replace('\\"', '"')
    return cause if keep_path else _PATH_PREFIX.sub("", cause)


def cause_of(error):
    """The cause of the exception `error` in one line without its final period: root_cause of
    its message (a TensorFlow error's `message`, else its text), or its type's name when that
    says nothing."""
    cause = root_cause(getattr(error, "message", None) or str(error)).rstrip(".")
    return cause or type(error).__name__


def cannot_write(what, error, instead="a directory you can write"):
    """The one-line error of every place a command cannot write: "cannot write <what>
    (<cause>); pass <instead>." `what` names the path, so the cause leaves it out."""
    strerror = getattr(error, "strerror", None) if isinstance(error, OSError) else None
    return f"cannot write {what} ({strerror or cause_of(error)}); pass {instead}."


def file_error_cause(error):
    """What an OSError or a TensorFlow file-system error says, with the path it concerns, in
    one line (e.g. "/data/run/model.ckpt-5.index; Read-only file system")."""
    message = getattr(error, "message", None)
    if message is not None:
        return root_cause(message, keep_path=True)
    if getattr(error, "filename", None):
        return f"{error.filename}: {error.strerror or error}"
    return str(error)
