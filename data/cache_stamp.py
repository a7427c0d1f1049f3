"""Where an image folder's cached shards live, and the stamp that says what they were built from.

The cache is `<cache>/image-folders/<folder name>-<hash>/`: `<cache>` is the project's cache
directory (demo_data.default_cache_dir), the hash covers the absolute folder path and the
validation fraction (0 for train/ + validation/). Beside the shards and labels.txt, its
FINGERPRINT_FILE (the stamp) records the folder, the fraction and a fingerprint of every image
file's relative path, size and mtime_ns (from stat: no image is read); folder_cache reuses the
shards while the stamp matches. The stamps also say which fractions a folder was cached with,
for the runs that know only the folder (recorded_fraction).
"""

import hashlib
import json
import os
import re

from common import files
from data import demo_data
from data import image_folders
from data import shard_writer
from data.errors import BuildError

CACHE_SUBDIR = "image-folders"
FINGERPRINT_FILE = "folder_fingerprint.json"
CACHE_VERSION = 1
# The `.tmp-<pid>` / `.old-<pid>` suffix of a cache directory a build is writing or replacing.
LEFTOVER = re.compile(r"\.(?:tmp|old)-(?P<pid>\d+)$")


def cache_root():
    """The directory of every image folder's cache, inside the project's cache directory."""
    return os.path.join(demo_data.default_cache_dir(), CACHE_SUBDIR)


def cache_path(folder, validation_fraction):
    """`<cache_root>/<folder name>-<12 hex digits of the folder's absolute path and fraction>`."""
    folder = os.path.abspath(folder)
    text = f"{folder}\n{float(validation_fraction)!r}"
    key = hashlib.sha256(text.encode("utf-8", "surrogateescape"))
    name = re.sub(r"[^\w.-]", "_", os.path.basename(folder), flags=re.ASCII).strip(".")
    return os.path.join(cache_root(), f"{name or 'folder'}-{key.hexdigest()[:12]}")


def fingerprint(folder, roots):
    """({split or "": number of image files}, sha256 hex of every label folder's and image
    file's path relative to `folder`, size and mtime_ns) of the label folders under `roots`
    (folder_cache.folder_layout's); only stats, never reads, the files."""
    digest = hashlib.sha256()
    counts = {}
    for split, root in roots:
        counts[split] = 0
        for label in image_folders.sub_folders(root):
            paths, _ = shard_writer.list_folder(os.path.join(root, label))
            entries = [os.path.relpath(os.path.join(root, label), folder) + os.sep]
            for path in paths:
                stat = os.stat(path)
                entries.append(f"{os.path.relpath(path, folder)}\0{stat.st_size}\0"
                               f"{stat.st_mtime_ns}")
            digest.update("".join(f"{entry}\n" for entry in entries).encode(
                "utf-8", "surrogateescape"))
            counts[split] += len(paths)
    return counts, digest.hexdigest()


def read_stamp(directory):
    """The FINGERPRINT_FILE of `directory` as a dict, or None when it is missing or damaged."""
    try:
        with open(os.path.join(directory, FINGERPRINT_FILE), encoding="utf-8") as handle:
            stamp = json.load(handle)
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def write_stamp(directory, stamp):
    """Writes the dict `stamp` as the FINGERPRINT_FILE of `directory`, atomically."""
    files.write_text_atomically(os.path.join(directory, FINGERPRINT_FILE),
                                json.dumps(stamp, indent=2, sort_keys=True) + "\n")


def recorded_fractions(folder):
    """Sorted validation fractions (> 0) of the complete caches of the absolute `folder`."""
    root = cache_root()
    prefix = os.path.basename(cache_path(folder, 0.0))[:-12]
    fractions = set()
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        if not name.startswith(prefix) or LEFTOVER.search(name):
            continue
        stamp = read_stamp(os.path.join(root, name)) or {}
        fraction = stamp.get("validation_fraction")
        if (stamp.get("folder") == folder and isinstance(fraction, float) and fraction > 0
                and cache_path(folder, fraction) == os.path.join(root, name)):
            fractions.add(fraction)
    return sorted(fractions)


def recorded_fraction(folder, root):
    """The validation fraction of the absolute `folder`'s one cache, for a folder of label
    folders given without one (`root`: where its label folders are, `folder` or its train/);
    BuildError saying what to pass when it has no cache or several."""
    fractions = recorded_fractions(folder)
    if len(fractions) == 1:
        return fractions[0]
    if not fractions and root != folder:
        raise BuildError(
            f"{folder} has a train/ but no validation/ folder; pass --validation_fraction=0.2 "
            "to hold out a fifth of each label's training images for validation, or add "
            "validation/<label>/<image> files.")
    if not fractions:
        raise BuildError(
            f"{folder} holds label folders but no train/ and validation/ sub-folders; pass "
            "--validation_fraction=0.2 to hold out a fifth of each label's images for "
            "validation, or make train/ and validation/ sub-folders of label folders.")
    listed = ", ".join(f"{fraction:g}" for fraction in fractions)
    raise BuildError(f"{folder} has shards cached for validation fractions {listed} (in "
                     f"{cache_root()}); pass --validation_fraction=<the one to use>, or "
                     "--data_dir=<that cache's directory>.")
