"""Writing files so that a reader never sees half of one."""

import contextlib
import os
import threading


def is_url(path):
    """True for a path of a file system TensorFlow reaches by URL (`gs://...`, `s3://...`)."""
    return "://" in path


def read_text(path):
    """The text of the file at `path` (through tf.io.gfile for a URL path)."""
    if is_url(path):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        with tf.io.gfile.GFile(path) as handle:
            return handle.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def write_text_atomically(path, text):
    """Writes `text` to `path` under a temporary name in the same directory, then renames it
    into place, so readers see the old file or the new one, never half. A failed write (a full
    disk, a missing directory) removes the temporary file and raises the OSError (a
    tf.errors.OpError for a URL path, written through tf.io.gfile)."""
    if is_url(path):
        _write_through_gfile(path, text)
        return
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


def _write_through_gfile(path, text):
    # TensorFlow only for URL paths: local writers (the bounding-box job) stay TensorFlow-free.
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    temporary = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with tf.io.gfile.GFile(temporary, "w") as handle:
            handle.write(text)
        tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(tf.errors.OpError):
            tf.io.gfile.remove(temporary)
        raise
