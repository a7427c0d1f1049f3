"""Input at scale, side by side on one machine (README, "Input made elsewhere"):

1. the input alone, images/sec at 299 px (ImageNet-sized JPEGs decoded, the original
   distortions, batches of 32): the local pipeline on one thread and on every core, and the
   tf.data service with 1 and 2 worker processes on loopback, each worker pinned to a core
   of its own (the client that receives the batches is not pinned);
2. the demo training run (`bin/bazel run //inception:train`, built once first) with its real
   input, with --synthetic_input, and from the service with 1 and 2 worker processes: the
   median sec/batch of the log intervals after the first, and the input wait each loss line
   reports; and the real input with a loss line every step, whose traced steps against the
   others say what the trace costs. The recorded result was measured when one step in 10 was
   traced; inception/loop/feed_wait.py now traces one in 100 (TRACE_GAP_STEPS), so a rerun's
   60-step runs trace only their first and last logged steps.
Rounds alternate between the configurations of each part.

    python3 -m bench.input_at_scale --output_json=bench/results/input-at-scale-cpu-2core.json

Run by hand from the repository root with the project's Python (the one `bin/bazel` set up),
on an otherwise idle machine with at least 2 cores; about 15 minutes on 2 cores.
"""

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from bench import report as bench_report
from bench import train_command
from common import machine

IMAGE_SIZE, BATCH, NUM_CLASSES = 299, 32, 1001
WARMUP_BATCHES, TIMED_BATCHES = 4, 12
TRAIN_STEPS = 60
LINE = re.compile(r": step (\d+), loss = \S+ \(\S+ examples/sec; ([\d.]+) sec/batch"
                  r"(?:; input wait (\d+)%)?\)")
# What an 8-GPU H200 host would have to feed, for the sums on paper: the estimate of
# what one H200 trains in bf16 (Inception v3 images a second, low and high).
H200_IMAGES_PER_SEC = (3000, 4000)
GPUS = 8


def worker_processes(count, dispatcher_address):
    """`count` processes of //inception:input_service's workers joining the dispatcher at
    `dispatcher_address`, process i pinned to core i."""
    processes = []
    for index in range(count):
        core = index % os.cpu_count()
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "inception.input_service",
             f"--dispatcher={dispatcher_address}", "--num_workers=1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda core=core: os.sched_setaffinity(0, {core})))
    return processes


@contextlib.contextmanager
def services(worker_counts):
    """{worker count: grpc address} of one dispatcher (in this process) per count, each with
    that many worker processes, all registered; stopped on exit."""
    from inception.inputs import service  # pylint: disable=import-outside-toplevel
    dispatchers, processes, addresses = [], [], {}
    try:
        for count in worker_counts:
            dispatcher = service.start_dispatcher(0)
            dispatchers.append(dispatcher)
            address = dispatcher.target.split("://")[1]
            processes += worker_processes(count, address)
            deadline = time.time() + 120
            while service.registered_workers(dispatcher) < count:
                if time.time() > deadline:
                    sys.exit(f"error: {count} service worker(s) did not register in 120 s")
                time.sleep(0.5)
            addresses[count] = dispatcher.target
        yield addresses
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # seen once here after the training runs
                process.kill()
        for dispatcher in dispatchers:
            dispatcher.stop()


def input_rate(shards, threads=0, address=None):
    """Images/sec of the training input alone: TIMED_BATCHES batches after WARMUP_BATCHES,
    made here (`threads`: 0 every core) or by the service at `address`."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from inception.inputs import pipeline  # pylint: disable=import-outside-toplevel
    from inception.inputs import service  # pylint: disable=import-outside-toplevel
    tf1 = tf.compat.v1
    source = None if address is None else service.ServiceInput(
        address, f"bench-{uuid.uuid4().hex[:8]}")
    with tf.Graph().as_default():
        batch = pipeline.build_train_input(
            pipeline.TrainStream(shards, BATCH, IMAGE_SIZE, NUM_CLASSES, seed=1,
                                 threads=threads), service=source)
        with tf1.Session() as session:
            session.run([tf1.local_variables_initializer(), batch.initializer])
            for _ in range(WARMUP_BATCHES):
                session.run(batch.images.op)
            started = time.perf_counter()
            for _ in range(TIMED_BATCHES):
                session.run(batch.images.op)
            return BATCH * TIMED_BATCHES / (time.perf_counter() - started)


def input_alone(addresses, work_dir, rounds):
    """{configuration: images/sec of each round}, rounds alternating."""
    from bench import measure  # pylint: disable=import-outside-toplevel
    shards = measure.jpeg_shards(256, work_dir)
    configurations = {"local, 1 thread": dict(threads=1), "local, every core": {},
                      **{f"service, {count} worker process(es)": dict(address=address)
                         for count, address in addresses.items()}}
    rates = {name: [] for name in configurations}
    for index in range(rounds):
        for name, arguments in configurations.items():
            rates[name].append(input_rate(shards, **arguments))
            print(f"input alone, round {index + 1}, {name}: {rates[name][-1]:.1f} images/s",
                  flush=True)
    return rates


def training_run(train_dir, extra):
    """{sec_per_batch: median of the intervals after the first 10 steps; input_wait: their
    median input wait in percent (None: never reported); traced_step / other_step: the median
    sec/batch of the one-step intervals whose step was traced (it reports an input wait) and
    of the others, None unless a line comes every step} of one demo run."""
    output, _ = train_command.run([f"--train_dir={train_dir}", f"--max_steps={TRAIN_STEPS}",
                                   "--eval_every_n_steps=0", "--seed=1", *extra])
    lines = [(int(step), float(seconds), wait) for step, seconds, wait in LINE.findall(output)
             if int(step) > 10]
    waits = [int(wait) for _, _, wait in lines if wait]
    run = {"sec_per_batch": statistics.median(seconds for _, seconds, _ in lines),
           "input_wait": statistics.median(waits) if waits else None,
           "traced_step": None, "other_step": None}
    if "--log_every_n_steps=1" in extra:
        run["traced_step"] = statistics.median(seconds for _, seconds, wait in lines if wait)
        run["other_step"] = statistics.median(seconds for _, seconds, wait in lines if not wait)
    return run


def training(addresses, scratch, rounds):
    """{configuration: [training_run's result, one per round]}, rounds alternating."""
    train_command.build()
    configurations = {"real input": [], "--synthetic_input": ["--synthetic_input"],
                      **{f"service, {count} worker process(es)": [f"--input_service={address}"]
                         for count, address in addresses.items()},
                      "real input, a line every step": ["--log_every_n_steps=1"]}
    runs = {name: [] for name in configurations}
    for index in range(rounds):
        for number, (name, extra) in enumerate(configurations.items()):
            runs[name].append(training_run(
                os.path.join(scratch, f"run_{index}_{number}"), extra))
            print(f"training, round {index + 1}, {name}: {runs[name][-1]}", flush=True)
    return runs


def on_paper(per_core):
    """What an 8-GPU H200 host needs at `per_core` images/sec per input core."""
    demand = [GPUS * rate for rate in H200_IMAGES_PER_SEC]
    return {"images_per_sec_per_core": per_core, "demand_images_per_sec": demand,
            "cores_needed": [round(need / per_core) for need in demand],
            "share_fed": {f"{cores} cores": [round(cores * per_core / need, 3) for need in demand]
                          for cores in (16, 96)}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each configuration")
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="input_at_scale_")
    try:
        with services((1, 2)) as addresses:
            alone = input_alone(addresses, scratch, args.rounds)
            trained = training(addresses, scratch, args.rounds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in alone.items()}
    report = {"input_alone_images_per_sec": alone, "input_alone_medians": medians,
              "training_runs": trained,
              "training_sec_per_batch_medians": {
                  name: statistics.median(run["sec_per_batch"] for run in runs)
                  for name, runs in trained.items()},
              "on_paper_local": on_paper(medians["local, 1 thread"]),
              "on_paper_service": on_paper(medians["service, 1 worker process(es)"]),
              "settings": {"image_size": IMAGE_SIZE, "batch": BATCH, "rounds": args.rounds,
                           "train_steps": TRAIN_STEPS},
              "machine": machine.cpu_summary()}
    print(report)
    if args.output_json:
        bench_report.write_json(report, args.output_json)


if __name__ == "__main__":
    main()
