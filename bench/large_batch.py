"""Large global batches: momentum (linear scaling and warm-up, Goyal et al.), LARS and LAMB
(each with its own base rate, the sqrt rule, a warm-up in epochs and polynomial decay), each
run to a target precision@1 (--target_accuracy) on a user's folder of images, with the global
batch made by accumulation. Prints and records the epochs and the wall time each took.

    python3 tools/package_datasets.py /tmp/own_data     # MNIST-5k (see there)
    python3 -m bench.large_batch --data_dir=/tmp/own_data/mnist_5k --seeds=1,2 \
        --output_json=bench/results/large-batch-cpu-2core.json

Run by hand from the repository root of a clean checkout (it runs `bin/bazel run
//inception:train` itself, bench/train_command.py). Every run validates every
--eval_every_n_steps updates and stops at the first validation reaching --target; one that
does not within --epochs says so. Each result is added to the JSON as soon as its run ends.
"""

import argparse
import json
import os
import platform
import re
import tempfile
import time

from bench import train_command
from common import machine

OPTIMIZERS = {
    "momentum": ["--optimizer=momentum", "--initial_learning_rate=0.0125",
                 "--learning_rate_scaling=linear", "--learning_rate_schedule=cosine"],
    "lars": ["--optimizer=lars", "--learning_rate_schedule=polynomial"],
    "lamb": ["--optimizer=lamb", "--learning_rate_schedule=polynomial"],
}
REACHED = re.compile(r"reached precision@1 [0-9.]+ at step (\d+) after (.+?) \(wall time")
LAST = re.compile(r"Validation at step (\d+): precision @ 1 = ([0-9.]+)")
RATE = re.compile(r"learning rate ([0-9.e+-]+):")
EPOCH_STEPS = re.compile(r"= (\d+) steps \((\d+) training examples, (\d+) per update\)")


def seconds_of(text):
    """Seconds of a duration as cli.duration writes it ('4 min 05 s', '12.3 s')."""
    units = {"h": 3600, "min": 60, "s": 1}
    parts = text.split()
    return sum(float(value) * units[unit] for value, unit in zip(parts[::2], parts[1::2]))


def run_one(args, optimizer, seed):
    """The record of one run of `optimizer` at `seed`."""
    train_dir = tempfile.mkdtemp(prefix=f"large_batch_{optimizer}_")
    flags = [f"--data_dir={args.data_dir}", f"--train_dir={train_dir}", f"--seed={seed}",
             f"--num_gpus={args.towers}", f"--batch_size={args.batch // args.accumulate}",
             f"--accumulate_steps={args.accumulate}", f"--image_size={args.image_size}",
             f"--depth_multiplier={args.depth_multiplier}", f"--num_epochs={args.epochs}",
             f"--warmup_epochs={args.warmup_epochs}",
             f"--eval_every_n_steps={args.eval_every_n_steps}",
             f"--target_accuracy={args.target}", "--save_checkpoint_steps=1000000",
             *OPTIMIZERS[optimizer]]
    output, seconds = train_command.run(flags)
    last = LAST.findall(output)
    if not last:
        train_command.fail(flags, output)
    examples = EPOCH_STEPS.search(output)
    per_epoch = int(examples.group(2)) / int(examples.group(3)) if examples else None
    reached = REACHED.search(output)
    record = {"optimizer": optimizer, "seed": seed, "flags": flags[2:],
              "learning_rate": float(RATE.search(output).group(1)),
              "last_step": int(last[-1][0]), "last_precision_at_1": float(last[-1][1]),
              "run_seconds": round(seconds, 1), "reached": reached is not None}
    if reached:
        step = int(reached.group(1))
        record.update(step_reached=step, wall_seconds=seconds_of(reached.group(2)),
                      epochs=round(step / per_epoch, 2) if per_epoch else None)
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--batch", type=int, default=1024, help="examples per update")
    parser.add_argument("--accumulate", type=int, default=8, help="micro-batches per update")
    parser.add_argument("--towers", type=int, default=2)
    parser.add_argument("--image_size", type=int, default=75)
    parser.add_argument("--depth_multiplier", type=float, default=0.25)
    parser.add_argument("--epochs", type=float, default=60.0)
    parser.add_argument("--warmup_epochs", type=float, default=2)
    parser.add_argument("--eval_every_n_steps", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--output_json", required=True)
    args = parser.parse_args()
    train_command.build()
    runs = []
    if os.path.exists(args.output_json):
        with open(args.output_json, encoding="utf-8") as handle:
            runs = json.load(handle)["runs"]
    for seed in [int(value) for value in args.seeds.split(",")]:
        for optimizer in args.optimizers.split(","):
            record = dict(run_one(args, optimizer, seed), batch=args.batch, target=args.target,
                          date=time.strftime("%Y-%m-%d"),
                          machine=f"{platform.machine()} {machine.cpu_summary()}")
            runs.append(record)
            print(json.dumps(record), flush=True)
            with open(args.output_json, "w", encoding="utf-8") as handle:
                json.dump({"runs": runs}, handle, indent=2)
                handle.write("\n")


if __name__ == "__main__":
    main()
