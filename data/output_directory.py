"""The builders' output directory: what may be built there, and the leftovers of killed builds.

A data set is the shards of every split plus labels.txt, and training and evaluation trust
that they number the labels alike. So a build refuses a directory whose labels.txt, or whose
shards of the other splits, name the labels differently from this build, and never mixes two
data sets. A killed build leaves its half-written `<shard>.partial-<host>-<pid>` files; the next
build on that machine removes those whose writer is gone.
"""

import math
import os
import re
import socket

from data import tfrecord_format
from data.errors import BuildError

# How many records of each other split's shards are read to learn their label names: spread
# evenly over its shards, whose records were shuffled, so they sample every label (a small data
# set is read whole). A whole other data set shows in the first record; one renamed label out
# of 1000 is caught with 98% odds, for reading about 0.5 GB of a 140 GB ImageNet training set.
LABEL_CHECK_RECORDS = 4096

_PARTIAL_PATTERN = re.compile(r"^[a-z]+-\d{5}-of-\d{5}\.partial-(?:(?P<host>[\w.-]+)-)?"
                              r"(?P<pid>\d+)$", re.ASCII)
_MIXED_ADVICE = "use another --output_directory, or remove every shard there and labels.txt."


def temporary_shard_path(final_path):
    """Where a shard is written before it is whole; the name never matches a shard's pattern.

    It names this machine and process, so a later build can tell whether its writer is gone.
    """
    return f"{final_path}.partial-{_host()}-{os.getpid()}"


def check_output_directory(output_dir, splits, label_names):
    """Raises BuildError if `output_dir` holds shards of `splits`, or labels.txt or shards of
    other splits that name the labels differently from `label_names` (label i is
    label_names[i - 1]); reads only, writes nothing."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise BuildError(f"--output_directory={output_dir} is a file; pass a directory.")
    for split in splits:
        existing = tfrecord_format.list_shards(output_dir, split)
        if existing:
            raise BuildError(
                f"{output_dir} already contains {len(existing)} {split} shard(s) (e.g. "
                f"{os.path.basename(existing[0])}); use another --output_directory or delete "
                "them first.")
    labels_path = os.path.join(output_dir, tfrecord_format.LABELS_FILE)
    if os.path.exists(labels_path) and (
            tfrecord_format.read_labels_file(labels_path) != list(label_names)):
        raise BuildError(f"{labels_path} already exists and lists other labels; "
                         f"{_MIXED_ADVICE}")
    for split in sorted(_shard_splits(output_dir) - set(splits)):
        _check_split_labels(output_dir, split, label_names)


def record_label_names(shard_paths, max_records=LABEL_CHECK_RECORDS):
    """Yields (shard path, label, name) of up to `max_records` records spread evenly over
    `shard_paths` (the first ones of each shard); name is the synset where the record has one
    (ImageNet, whose labels.txt lists synsets), else its class text. Raises BuildError for a
    shard that cannot be read."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from google.protobuf import message  # pylint: disable=import-outside-toplevel
    per_shard = max(1, math.ceil(max_records / max(1, len(shard_paths))))
    for path in shard_paths:
        try:
            named = [_label_and_name(serialized.numpy())
                     for serialized in tf.data.TFRecordDataset(path).take(per_shard)]
        except (tf.errors.OpError, message.DecodeError) as error:
            raise BuildError(f"cannot read the labels in {path} ({type(error).__name__}); "
                             f"{_MIXED_ADVICE}") from None
        for label, name in named:
            yield path, label, name


def remove_stale_partial_files(output_dir):
    """Removes the partial shards in `output_dir` that builds on this machine left when they
    were killed (their process is gone); returns (removed, kept) counts of partial shards.

    Kept: those of running builds, and those of other machines (whose processes we cannot
    see). Files that only resemble our names are never touched.
    """
    if not os.path.isdir(output_dir):
        return 0, 0
    removed = kept = 0
    for name in sorted(os.listdir(output_dir)):
        match = _PARTIAL_PATTERN.match(name)
        if not match:
            continue
        host, pid = match.group("host"), int(match.group("pid"))
        ours = host is None or host == _host()  # no host: written before names carried one
        if ours and not process_running(pid):
            try:
                os.remove(os.path.join(output_dir, name))
            except FileNotFoundError:
                continue  # another build cleaned it at the same moment
            removed += 1
        else:
            kept += 1
    return removed, kept


def describe_cleanup(output_dir, removed, kept):
    """The one log line about partial shards of other builds in `output_dir`, or None."""
    if not removed and not kept:
        return None
    line = (f"removed {removed} partial shard file(s) left in {output_dir} by builds that "
            "were killed")
    if kept:
        line += (f"; kept {kept} of builds still running or on other machines (delete those "
                 "by hand once no build writes there)")
    return line


def _check_split_labels(output_dir, split, label_names):
    mismatch = _first_mismatch(output_dir, split, label_names)
    if mismatch is None:
        return
    path, label, name = mismatch
    ours = (f"this build's label {label} is {label_names[label - 1]!r}"
            if 1 <= label <= len(label_names) else
            f"this build has labels 1 to {len(label_names)}")
    raise BuildError(f"{output_dir} holds {split} shards of another data set "
                     f"({os.path.basename(path)} has label {label} = {name!r}, {ours}); "
                     f"{_MIXED_ADVICE}")


def _first_mismatch(output_dir, split, label_names):
    """(shard path, label, name) of the first record read that names its label differently
    from `label_names`, or None."""
    for path, label, name in record_label_names(tfrecord_format.list_shards(output_dir, split)):
        if not (1 <= label <= len(label_names) and label_names[label - 1] == name):
            return path, label, name
    return None


def _label_and_name(serialized):
    """(label, name) of a serialized Example; 0 and "" for what it lacks."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    feature = tf.train.Example.FromString(serialized).features.feature
    labels = feature["image/class/label"].int64_list.value
    synsets = feature["image/class/synset"].bytes_list.value
    texts = feature["image/class/text"].bytes_list.value
    name = synsets[0] if synsets and synsets[0] else texts[0] if texts else b""
    return (labels[0] if labels else 0), name.decode("utf-8", "replace")


def _shard_splits(output_dir):
    """The splits that have shards in `output_dir`."""
    if not os.path.isdir(output_dir):
        return set()
    matches = (tfrecord_format.SHARD_PATTERN.match(name) for name in os.listdir(output_dir))
    return {match.group("split") for match in matches if match}


def _host():
    """This machine's name as it appears in partial file names (letters, digits, . _ -)."""
    return re.sub(r"[^\w.-]", "_", socket.gethostname(), flags=re.ASCII) or "localhost"


def process_running(pid):
    """Whether process `pid` exists on this machine (it may belong to another user)."""
    if pid <= 0:
        return True  # not a process id a build could have had: leave the file alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process, or an impossible id: not ours to judge
    return True
