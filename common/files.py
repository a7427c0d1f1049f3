"""Paths on any file system TensorFlow reaches: telling a URL path from a local one, reading
text, and writing it so that a reader never sees half of a file."""

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
    # Same directory: a rename is atomic only within one file system. The thread in the name
    # keeps two threads writing the same path from sharing a temporary file.
    temporary = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    opener, rename, remove, remove_errors = _file_operations(path)
    try:
        with opener(temporary) as handle:
            handle.write(text)
        rename(temporary, path)
    except BaseException:
        with contextlib.suppress(*remove_errors):
            remove(temporary)
        raise


def _file_operations(path):
    """(open for writing text, rename over, remove, errors remove may raise) for `path`:
    tf.io.gfile for a URL, plain os otherwise (the bounding-box job stays TensorFlow-free)."""
    if not is_url(path):
        return (lambda name: open(name, "w", encoding="utf-8"), os.replace, os.remove,
                (OSError,))
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return (lambda name: tf.io.gfile.GFile(name, "w"),
            lambda source, target: tf.io.gfile.rename(source, target, overwrite=True),
            tf.io.gfile.remove, (tf.errors.OpError,))


def ensure_writable_directory(path):
    """Creates the directory `path` if missing and checks that a file can be written in it (a
    probe file, removed at once), so a tool fails before its long work, not after. Raises
    OSError (a tf.errors.OpError for a URL path) when it cannot."""
    probe = os.path.join(path, f".write-test-{os.getpid()}-{threading.get_ident()}")
    if is_url(path):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        tf.io.gfile.makedirs(path)
        with tf.io.gfile.GFile(probe, "w") as handle:
            handle.write("")
        tf.io.gfile.remove(probe)
        return
    os.makedirs(path, exist_ok=True)
    with open(probe, "w", encoding="utf-8"):
        pass
    os.remove(probe)
