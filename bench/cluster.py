"""A cluster on 127.0.0.1, side by side: 2 workers x 2 virtual CPU towers training Inception v3
with an all-reduce between the workers (no parameter server) and with one parameter server and
SyncReplicasOptimizer. Seconds per step (median of the chief's steps) and peak resident memory
of every task.

    python3 -m bench.cluster --output_json=bench/results/cluster-cpu-2core.json

Run by hand from the repository root with the project's environment (`bin/bazel` makes it;
its python is ~/.cache/inception/venv-cpu-*/bin/python). Each task is a process of the real
entry point (`python -m inception.train`) on the demo data; the two configurations take turns,
round after round, so that a slow spell of a shared machine falls on both.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from common import machine
from common.loopback import free_ports
from data import demo_data

ALL_REDUCE = "all_reduce"
PARAMETER_SERVER = "parameter_server"
CONFIGURATIONS = (ALL_REDUCE, PARAMETER_SERVER)
WARM_UP_STEPS = 2  # the first steps build and tune kernels: not timed
STEP_LINE = re.compile(r": step (\d+), loss = [\d.na]+ \([\d.]+ examples/sec; ([\d.]+) sec/batch")


def run_cluster(configuration, data_dir, args):
    """Trains one cluster to `args.steps`; returns (chief's seconds per timed step, {task:
    peak MiB})."""
    num_ps = 1 if configuration == PARAMETER_SERVER else 0
    ports = free_ports(num_ps + 2)
    hosts = [f"127.0.0.1:{port}" for port in ports]
    cluster = [f"--worker_hosts={','.join(hosts[num_ps:])}"]
    if num_ps:
        cluster.append(f"--ps_hosts={hosts[0]}")
    training = [f"--data_dir={data_dir}", "--dataset=demo", f"--max_steps={args.steps}",
                f"--image_size={args.image_size}", f"--depth_multiplier={args.depth_multiplier}",
                f"--batch_size={args.batch_per_worker}", "--num_gpus=2",
                "--log_every_n_steps=1", "--eval_every_n_steps=0", "--save_interval_secs=0",
                "--save_checkpoint_steps=0", "--save_summaries_steps=0"]
    tasks = {f"ps{task}": ["--job_name=ps", f"--task_id={task}"] for task in range(num_ps)}
    with tempfile.TemporaryDirectory() as train_dir:
        for task in range(2):
            tasks[f"worker{task}"] = ["--job_name=worker", f"--task_id={task}",
                                      f"--train_dir={train_dir}"] + training
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONPATH=os.getcwd())
        logs, processes = {}, {}
        for name, flags in tasks.items():
            logs[name] = tempfile.TemporaryFile("w+")
            processes[name] = subprocess.Popen(
                [sys.executable, "-m", "inception.train", *flags, *cluster],
                stdout=logs[name], stderr=subprocess.STDOUT, env=env)
        peaks = {}
        for name, process in processes.items():
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            peaks[name] = usage.ru_maxrss / 1024.0
        outputs = {}
        for name, log in logs.items():
            log.seek(0)
            outputs[name] = log.read()
            log.close()
    for name, process in processes.items():
        if process.returncode != 0:
            raise RuntimeError(f"{configuration}: {name} ended with {process.returncode}:\n"
                               f"{outputs[name][-3000:]}")
    times = [float(seconds) for step, seconds in STEP_LINE.findall(outputs["worker0"])
             if int(step) > WARM_UP_STEPS]
    return times, peaks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_per_worker", type=int, default=8)
    parser.add_argument("--image_size", type=int, default=150)
    parser.add_argument("--depth_multiplier", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=12, help="steps per cluster run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    data_dir = demo_data.ensure_demo_data()
    times = {name: [] for name in CONFIGURATIONS}
    peaks = {name: {} for name in CONFIGURATIONS}
    for round_number in range(args.rounds):
        for name in CONFIGURATIONS:
            measured, task_peaks = run_cluster(name, data_dir, args)
            times[name].extend(measured)
            for task, peak in task_peaks.items():
                peaks[name][task] = max(peaks[name].get(task, 0.0), peak)
            print(f"round {round_number + 1}/{args.rounds} {name}: median "
                  f"{statistics.median(measured):.3f} s/step, peaks "
                  f"{', '.join(f'{task} {peak:.0f} MiB' for task, peak in task_peaks.items())}",
                  flush=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    totals = {name: sum(task_peaks.values()) for name, task_peaks in peaks.items()}
    for name in CONFIGURATIONS:
        print(f"{name}: {medians[name]:.3f} s/step "
              f"({medians[name] / medians[PARAMETER_SERVER]:.2f}x parameter_server), "
              f"peak {totals[name]:.0f} MiB over every task")
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as handle:
            json.dump({"median_seconds_per_step": medians,
                       "ratio_to_parameter_server": {
                           name: value / medians[PARAMETER_SERVER]
                           for name, value in medians.items()},
                       "peak_mib_per_task": peaks, "peak_mib_all_tasks": totals,
                       "timed_steps_per_configuration": len(times[PARAMETER_SERVER]),
                       "workers": 2, "towers_per_worker": 2,
                       "batch_per_worker": args.batch_per_worker, "image_size": args.image_size,
                       "depth_multiplier": args.depth_multiplier,
                       "machine": f"{os.uname().machine} {machine.cpu_summary()}",
                       "date": time.strftime("%Y-%m-%d")}, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
