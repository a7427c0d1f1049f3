"""Timing Inception v3's training step, one configuration per process, configurations taking
turns round after round (so that a slow spell of a shared machine falls on all of them): the
machinery of the side-by-side benchmarks replicated.py and sync_batch_norm.py.

A benchmark's module runs itself as the child (`--only=<configuration>`), which measures with
`step_times` and prints `report(...)`; the parent collects them with `take_turns`.
"""

import json
import os
import statistics
import subprocess
import sys
import time

RESULT = "RESULT"  # what precedes a child's JSON result on its stdout


def step_times(devices, batch, image_size, depth_multiplier, steps, all_reduce=None,
               batch_norm_groups=None, num_classes=10):
    """Seconds of each of `steps` timed training steps (after two untimed ones) of Inception v3
    (RMSProp, random images of `num_classes` labels) on towers on `devices` ('/cpu:i' are
    virtual CPU devices), in this process; replicated with `all_reduce` (an
    all_reduce.AllReduceSpec) and batch norm synchronized over `batch_norm_groups` when
    given."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from inception.config import recipe  # pylint: disable=import-outside-toplevel
    from inception.config import settings  # pylint: disable=import-outside-toplevel
    from inception.inputs import pipeline  # pylint: disable=import-outside-toplevel
    from inception.model import network  # pylint: disable=import-outside-toplevel
    from inception.parallel import sharing  # pylint: disable=import-outside-toplevel
    from inception.step import step_graph  # pylint: disable=import-outside-toplevel

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    model = settings.ModelSettings(num_classes=num_classes, image_size=image_size,
                                   depth_multiplier=depth_multiplier, dataset="synthetic")
    optimization = settings.with_defaults(settings.OptimizationSettings(optimizer="rmsprop"),
                                          recipe.OWN_DATA_DEFAULTS)
    images = tf.random.uniform([batch, image_size, image_size, 3], -1.0, 1.0, seed=1)
    labels = tf.random.uniform([batch], 0, num_classes, tf.int32, seed=2)
    built = step_graph.build_train_graph(
        pipeline.InputBatch(images, labels, tf.constant(0, tf.int64), tf.no_op()),
        lambda decay: network.make_model_fn(
            model, decay, network.TowerOptions(batch_norm_groups=batch_norm_groups)),
        optimization, sharing.for_devices(devices, all_reduce), 10_000)
    config = tf1.ConfigProto()
    config.device_count["CPU"] = max(2, sum(device.startswith("/cpu") for device in devices))
    times = []
    with tf1.Session(config=config) as session:
        session.run(tf1.global_variables_initializer())
        if built.fill_copies is not None:
            session.run(built.fill_copies)
        for step in range(steps + 2):
            start = time.perf_counter()
            session.run(built.stages[0].train_op)
            if step >= 2:
                times.append(time.perf_counter() - start)
    return times


def report(result):
    """Prints a child's `result` (JSON-able) for `take_turns`' parent."""
    print(RESULT + json.dumps(result))


def run_child(module, argv, configuration, hide_gpus=True):
    """The result `module` (e.g. 'bench.replicated'), run with `argv` and
    --only=`configuration` in a fresh process, reported (GPUs hidden when `hide_gpus`)."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run([sys.executable, "-m", module, *argv, f"--only={configuration}"],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.split(RESULT)[-1])


def take_turns(configurations, measure, rounds):
    """{configuration: [its step times of every round]}: `measure(configuration)` -> (step
    times, a few words or '') for each configuration in turn, `rounds` times; one line each."""
    times = {name: [] for name in configurations}
    for round_number in range(rounds):
        for name in configurations:
            measured, words = measure(name)
            times[name].extend(measured)
            print(f"round {round_number + 1}/{rounds} {name}: median "
                  f"{statistics.median(measured):.3f} s/step{words}", flush=True)
    return times
