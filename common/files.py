"""Writing files so that a reader never sees half of one."""

import contextlib
import os
import threading


def write_text_atomically(path, text):
    """Writes `text` to `path` under a temporary name in the same directory, then renames it
    into place, so readers see the old file or the new one, never half. A failed write (a full
    disk, a missing directory) removes the temporary file and raises the OSError."""
    # Same directory: os.replace is atomic only within one file system. The thread in the name
    # keeps two threads writing the same path from sharing a temporary file.
    temporary = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
