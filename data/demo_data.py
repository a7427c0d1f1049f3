"""The embedded demo data set: small labelled shape images, generated deterministically.

Each image shows one shape (the class) at a random position, size, rotation and colour on a
noisy, cluttered background, so a model must learn shapes rather than a colour or one pixel.
The images are JPEG-encoded into TFRecord shards in the original Inception format, with a
bounding box around the shape and a `labels.txt`. `ensure_demo_data` makes the set once and
caches it; a cache directory is renamed into place only when complete.
"""

import io
import math
import os
import shutil

import numpy as np
from PIL import Image
from PIL import ImageDraw

from data import tfrecord_format

CLASS_NAMES = ("circle", "square", "triangle", "cross", "ring")
DEFAULT_COUNTS = {"train": 1200, "validation": 300}
DEFAULT_SHARDS = {"train": 4, "validation": 2}
DEMO_VERSION = 1
_SPLIT_SEEDS = {"train": 1_000_003, "validation": 2_000_003}


def default_cache_dir():
    """Where cached data lives: $INCEPTION_CACHE_DIR, else ~/.cache/inception."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("INCEPTION_CACHE_DIR") or os.path.join(base, "inception")


def ensure_demo_data(cache_dir=None, counts=None, log=print):
    """Returns the directory of the demo shards, generating them on first use.

    Args:
      cache_dir: parent directory of the cache; `default_cache_dir()` when None.
      counts: {"train": n, "validation": m} images per split; DEFAULT_COUNTS when None.
      log: called with one progress line when the set is generated.
    """
    counts = dict(counts or DEFAULT_COUNTS)
    cache_dir = cache_dir or default_cache_dir()
    suffix = "" if counts == DEFAULT_COUNTS else f"-{counts['train']}-{counts['validation']}"
    target = os.path.join(cache_dir, f"demo-v{DEMO_VERSION}{suffix}")
    if os.path.isdir(target):
        return target
    os.makedirs(cache_dir, exist_ok=True)
    log(f"Generating the demo data set ({sum(counts.values())} images) in {target} (one time)...")
    temporary = f"{target}.tmp-{os.getpid()}"
    shutil.rmtree(temporary, ignore_errors=True)
    os.makedirs(temporary)
    try:
        write_demo_data(temporary, counts)
        try:
            os.rename(temporary, target)
        except OSError:
            if not os.path.isdir(target):  # another process may have finished first
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return target


def write_demo_data(output_dir, counts):
    """Writes the shards of every split in `counts` and `labels.txt` into `output_dir`."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    for split, count in counts.items():
        records = [make_record(split, index) for index in range(count)]
        num_shards = min(DEFAULT_SHARDS.get(split, 1), max(1, count))
        for shard in range(num_shards):
            path = os.path.join(output_dir, tfrecord_format.shard_name(split, shard, num_shards))
            with tf.io.TFRecordWriter(path) as writer:
                for record in records[shard::num_shards]:
                    writer.write(tfrecord_format.make_example(record).SerializeToString())
    tfrecord_format.write_labels_file(
        os.path.join(output_dir, tfrecord_format.LABELS_FILE), CLASS_NAMES)


def make_record(split, index):
    """The deterministic `ImageRecord` number `index` of `split` (classes take turns)."""
    rng = np.random.RandomState((_SPLIT_SEEDS[split] + 7919 * index) % (2**32))
    class_index = index % len(CLASS_NAMES)
    image, box = render_shape_image(CLASS_NAMES[class_index], rng)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return tfrecord_format.ImageRecord(
        encoded_jpeg=buffer.getvalue(), label=class_index + 1, text=CLASS_NAMES[class_index],
        height=image.height, width=image.width, filename=f"{split}_{index:05d}.jpg",
        synset=f"demo{class_index + 1:02d}", boxes=(box,))


def render_shape_image(shape, rng):
    """Draws `shape` on a cluttered background; returns the PIL image and its bounding box."""
    width, height = (int(v) for v in rng.randint(112, 161, size=2))
    background = rng.randint(150, 256, size=3)
    pixels = background + rng.normal(0.0, 10.0, size=(height, width, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    _draw_clutter(draw, width, height, rng)
    colour = _contrasting_colour(background, rng)
    radius = rng.uniform(0.22, 0.38) * min(width, height)
    cx = rng.uniform(radius + 2, width - radius - 2)
    cy = rng.uniform(radius + 2, height - radius - 2)
    angle = rng.uniform(0.0, 2.0 * math.pi)
    _draw_shape(draw, shape, cx, cy, radius, angle, colour)
    box = tfrecord_format.BoundingBox(
        xmin=max(0.0, (cx - radius) / width), ymin=max(0.0, (cy - radius) / height),
        xmax=min(1.0, (cx + radius) / width), ymax=min(1.0, (cy + radius) / height))
    return image, box


def _draw_clutter(draw, width, height, rng):
    for _ in range(rng.randint(0, 4)):
        x0, x1 = rng.randint(0, width, size=2)
        y0, y1 = rng.randint(0, height, size=2)
        colour = tuple(int(c) for c in rng.randint(0, 256, size=3))
        draw.line([(int(x0), int(y0)), (int(x1), int(y1))], fill=colour,
                  width=int(rng.randint(1, 3)))


def _contrasting_colour(background, rng):
    """A dark colour: shapes are always darker than the (light) background."""
    del background
    return tuple(int(c) for c in rng.randint(0, 110, size=3))


def _rotated(points, cx, cy, angle):
    cos, sin = math.cos(angle), math.sin(angle)
    return [(cx + x * cos - y * sin, cy + x * sin + y * cos) for x, y in points]


def _draw_shape(draw, shape, cx, cy, radius, angle, colour):
    if shape == "circle":
        draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], fill=colour)
    elif shape == "ring":
        width = max(3, int(radius * 0.3))
        draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], outline=colour,
                     width=width)
    elif shape == "square":
        half = radius / math.sqrt(2.0)
        corners = [(-half, -half), (half, -half), (half, half), (-half, half)]
        draw.polygon(_rotated(corners, cx, cy, angle), fill=colour)
    elif shape == "triangle":
        corners = [(radius * math.cos(a), radius * math.sin(a))
                   for a in (0.0, 2.0 * math.pi / 3.0, 4.0 * math.pi / 3.0)]
        draw.polygon(_rotated(corners, cx, cy, angle), fill=colour)
    elif shape == "cross":
        arm = radius * 0.3
        for corners in ([(-radius, -arm), (radius, -arm), (radius, arm), (-radius, arm)],
                        [(-arm, -radius), (arm, -radius), (arm, radius), (-arm, radius)]):
            draw.polygon(_rotated(corners, cx, cy, angle), fill=colour)
    else:
        raise ValueError(f"unknown demo shape {shape!r}; expected one of {CLASS_NAMES}")
