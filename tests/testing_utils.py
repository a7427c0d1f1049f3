"""Helpers shared by the tests: virtual CPU sessions, tiny models, tiny data, event files."""

import dataclasses
import functools
import glob
import os
import subprocess
import tempfile
import threading
from unittest import mock

import numpy as np
import tensorflow as tf
from tf_slim.ops import arg_scope

from data import demo_data
from inception.config import recipe
from inception.config import settings as settings_lib
from inception.inputs import pipeline
from inception.model import network
from inception.model import registry
from inception.parallel import grappler
from inception.parallel import gradients as gradients_lib
from inception.parallel import sharing
from inception.parallel import towers
from inception.step import step_graph

tf1 = tf.compat.v1


def temp_dir(prefix):
    """A fresh directory under Bazel's TEST_TMPDIR (or the system's temporary directory)."""
    return tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("TEST_TMPDIR"))


def read_only_directory(test, populate=None):
    """A directory on a read-only file system (a tmpfs mounted read-only, unmounted when
    `test` ends), after `populate(path)` wrote into it; skips `test`, saying why, where this
    machine cannot mount one (a permission check would not do: tests often run as root)."""
    path = temp_dir("read_only")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", path],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        test.skipTest("cannot mount a read-only file system here "
                      f"({mounted.stderr.strip() or mounted.returncode})")
    test.addCleanup(subprocess.run, ["umount", path], check=False)
    if populate is not None:
        populate(path)
    subprocess.run(["mount", "-o", "remount,ro", path], check=True)
    return path


def cpu_session_config(num_devices):
    """ConfigProto with `num_devices` virtual CPU devices and the product's Grappler options."""
    config = tf1.ConfigProto(allow_soft_placement=False, device_count={"CPU": num_devices})
    return grappler.lean_cpu_rewrites(config)


def tiny_demo_data(train=48, validation=20):
    """A small demo data set (same generator as the real one) in a temporary cache."""
    return demo_data.ensure_demo_data(cache_dir=temp_dir("demo_cache"),
                                      counts={"train": train, "validation": validation},
                                      log=lambda message: None)


class DemoData:
    """A small demo data set (tiny_demo_data) made on the first use of `path`, then shared by a
    test process's tests, which only read it: a test module's data, declared once."""

    def __init__(self, train, validation):
        self.counts, self._path = (train, validation), None
        self._lock = threading.Lock()  # a cluster test's tasks, on threads, ask at once

    @property
    def path(self):
        """The data set's directory (made now if it is not yet)."""
        with self._lock:
            if self._path is None:
                self._path = tiny_demo_data(*self.counts)
        return self._path


def small_conv_model_fn(num_classes=4, weight_decay=0.01, unused_variable=False):
    """model_fn(images, labels) -> {'cross_entropy': ...}: conv, pool, dense; no batch norm.

    Deterministic per example (no dropout, no batch statistics), so a mean over towers equals
    the single-device loss on the whole batch. With `unused_variable`, it also creates a
    variable that no loss uses.
    """
    def model_fn(images, labels):
        kernel = tf1.get_variable("net/conv/kernel", [3, 3, images.shape[-1], 8],
                                  initializer=tf1.glorot_uniform_initializer(seed=1),
                                  regularizer=_l2(weight_decay))
        bias = tf1.get_variable("net/conv/bias", [8], initializer=tf1.constant_initializer(0.1))
        net = tf.nn.relu(tf.nn.conv2d(images, kernel, 1, "SAME") + bias)
        net = tf.reduce_mean(net, axis=[1, 2])
        weights = tf1.get_variable("net/logits/weights", [8, num_classes],
                                   initializer=tf1.glorot_uniform_initializer(seed=2),
                                   regularizer=_l2(weight_decay))
        if unused_variable:
            tf1.get_variable("net/unused/weights", [3], initializer=tf1.ones_initializer())
        logits = tf.matmul(net, weights)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        return {"cross_entropy": loss}

    return model_fn


def _l2(weight_decay):
    if not weight_decay:
        return None
    return lambda weights: weight_decay * tf.nn.l2_loss(weights)


def random_batch(batch_size, size=8, channels=3, num_classes=4, seed=0):
    """float32 images [B, size, size, channels] in [-1, 1] and int32 labels [B]."""
    rng = np.random.RandomState(seed)
    images = rng.uniform(-1, 1, size=(batch_size, size, size, channels)).astype(np.float32)
    labels = rng.randint(0, num_classes, size=batch_size).astype(np.int32)
    return images, labels


def read_scalars(log_dir):
    """{tag: [(step, value), ...]} of every scalar in the event files under `log_dir`."""
    scalars = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for event in tf1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def synthetic_input(batch_size):
    """An InputBatch of random 8x8 images and labels in [0, 4), forever."""
    images, labels = random_batch(64)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(
        batch_size, drop_remainder=True)
    iterator = tf1.data.make_initializable_iterator(dataset)
    image_batch, label_batch = iterator.get_next()
    return pipeline.InputBatch(images=image_batch, labels=label_batch,
                               corrupt_records=tf.constant(0, tf.int64),
                               initializer=iterator.initializer)


def numbered_batches(transform, batch_size=8):
    """An InputBatch of random 8x8 images and labels in [0, 4), forever; each batch passes
    through `transform(images, labels, number)` with its 1-based number (faults tied to the
    data, not to the step: a rollback skips them)."""
    images, labels = random_batch(64)

    def batch(index):
        rows = (index * batch_size + tf.range(batch_size, dtype=tf.int64)) % 64
        return transform(tf.gather(images, rows), tf.gather(labels, rows), index + 1)
    iterator = tf1.data.make_initializable_iterator(tf.data.Dataset.range(10**6).map(batch))
    image_batch, label_batch = iterator.get_next()
    image_batch.set_shape([batch_size, 8, 8, 3])
    label_batch.set_shape([batch_size])
    return pipeline.InputBatch(
        images=image_batch, labels=label_batch, corrupt_records=tf.constant(0, tf.int64),
        initializer=iterator.initializer)


def run_towers(images, labels, model_fn, devices, config, var_scopes=None):
    """Builds one tower per device on (images, labels) split evenly; returns (mean_loss,
    {variable: averaged gradient}, info) after one run from the initial weights.

    info: variable names, their devices, skipped variables, the towers' total-loss op names and
    every op's device.
    """
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(0)
        inputs = towers.split_batch((tf.constant(images), tf.constant(labels)), len(devices))
        tower_list = towers.build_towers(model_fn, inputs, devices, on_host(devices))
        regularization = towers.regularization_loss()
        totals = towers.tower_total_losses(tower_list, regularization)
        mean_loss = towers.mean_over_towers(totals)
        var_list = tf1.trainable_variables()
        if var_scopes:
            var_list = towers.variables_in_scopes(var_scopes)
        gradients = gradients_lib.build_gradients(tower_list, var_list, regularization)
        fetch = {variable.op.name: grad for grad, variable in gradients.grads_and_vars}
        info = {
            "variables": [v.op.name for v in tf1.global_variables()],
            "variable_devices": {v.op.name: v.device for v in tf1.global_variables()},
            "skipped": gradients.skipped,
            "tower_losses_ops": [t.op.name for t in totals],
            "op_devices": {op.name: op.device for op in graph.get_operations()},
        }
        with tf1.Session(config=config) as session:
            session.run(tf1.global_variables_initializer())
            loss_value, grad_values = session.run([mean_loss, fetch])
    return loss_value, grad_values, info


@arg_scope.add_arg_scope
def no_dropout(inputs, *args, **kwargs):
    """slim.dropout's signature, passing the input through: two graphs compared step for step
    would otherwise drop different units (their random ops are seeded differently)."""
    del args, kwargs
    return tf.identity(inputs)


def optimization(**values):
    """settings.OptimizationSettings with `values`, the rest ImageNet's defaults (the
    original's: RMSProp, rate 0.1 decaying every 30 epochs, no warm-up)."""
    return settings_lib.with_defaults(settings_lib.OptimizationSettings(**values),
                                      recipe.IMAGENET_DEFAULTS)


# The tests' Inception v3: a tenth of the channels, the smallest input (or with the aux head).
TINY_DEPTH, SMALL_IMAGE, AUX_HEAD_IMAGE = 0.1, 75, 107


def tiny_model(aux_head=False):
    """The tiny network's settings, as train_settings' (or ModelSettings') keywords."""
    return dict(image_size=AUX_HEAD_IMAGE if aux_head else SMALL_IMAGE, depth_multiplier=TINY_DEPTH)


def tiny_flags(aux_head=False):
    """The tiny network's settings as train.py's flags."""
    return [f"--{name}={value}" for name, value in tiny_model(aux_head).items()]


TINY_INCEPTION = settings_lib.ModelSettings(num_classes=5, **tiny_model(), dataset="synthetic")


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One training step of tiny_inception_step: the op types that ran (by device type too),
    the towers' losses, each trainable variable's update, the dtypes of the float variables and
    of the convolution and batch-norm ops, every float variable's device (the int64 step counters
    have none: TensorFlow keeps them on the host), the data formats of the
    convolutions as they ran (after Grappler, by device type), the loss scale (fp16)."""
    ran: set
    ran_on: dict
    losses: np.ndarray
    updates: dict
    variable_dtypes: set
    op_dtypes: dict
    variable_devices: dict
    conv_formats: dict
    loss_scale: float = None


def tiny_inception_step(devices, config, steps=1, **options):
    """The StepResult of step `steps` of tiny_inception_steps(devices, config, ..., **options)."""
    return tiny_inception_steps(devices, config, (steps,), **options)[0]


def tiny_inception_steps(devices, config, at_steps, batch=16, compute_dtype=None,
                         loss_scale=None, variable_device="/cpu:0", prefetch_inputs=False,
                         checkpoint=None, settings=TINY_INCEPTION, images=None, all_reduce=None):
    """Training steps of a tiny Inception v3 (towers on `devices`, batch norm, moving averages;
    no dropout) on a fixed random batch, from the weights of `checkpoint` (a path) or seeded
    initial ones; replicated variables with `all_reduce` (an all_reduce.AllReduceSpec), up to
    the last of `at_steps` in one session; returns the StepResults of steps `at_steps`
    (1-based, increasing)."""
    with tf.Graph().as_default() as graph:
        tf1.set_random_seed(3)
        generated, labels = random_batch(batch, size=settings.image_size)
        dataset = tf.data.Dataset.from_tensors(
            (generated if images is None else images, labels)).repeat()
        iterator = tf1.data.make_initializable_iterator(dataset)
        image_batch, label_batch = iterator.get_next()
        input_batch = pipeline.InputBatch(
            images=image_batch, labels=label_batch, corrupt_records=tf.constant(0, tf.int64),
            initializer=iterator.initializer)
        with mock.patch.object(network, "mask_dropout", no_dropout):
            built = step_graph.build_train_graph(
                input_batch, functools.partial(registry.make_model_fn, settings, options=(
                    network.TowerOptions(compute_dtype=compute_dtype))),
                optimization(initial_learning_rate=0.01),
                sharing_of(devices, all_reduce, variable_device), 64,
                step_graph.StepOptions(initial_loss_scale=loss_scale,
                                       prefetch_inputs=prefetch_inputs))
        restorer = tf1.train.Saver(tf1.trainable_variables()) if checkpoint else None
        with tf1.Session(config=config) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            if restorer:
                restorer.restore(session, checkpoint)
            if built.fill_copies is not None:
                session.run(built.fill_copies)
            if built.input_fill is not None:
                session.run(built.input_fill)
            return _recorded_steps(session, graph, built.stages[0], at_steps)


def _recorded_steps(session, graph, stage, at_steps):
    """Runs `stage` up to step max(at_steps), tracing the steps `at_steps`; their StepResults."""
    variables = tf1.trainable_variables()
    scale = [v for v in tf1.global_variables() if v.op.name == "loss_scale/scale"]
    results = []
    for step in range(1, max(at_steps) + 1):
        if step not in at_steps:
            session.run(stage.train_op)
            continue
        before, metadata = session.run(variables), tf1.RunMetadata()
        _, losses = session.run(
            [stage.train_op, stage.tower_losses],
            options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE,
                                   output_partition_graphs=True),
            run_metadata=metadata)
        conv_formats, ran_on = _what_ran(metadata)
        results.append(StepResult(
            ran=set().union(*ran_on.values()), ran_on=ran_on, losses=losses,
            updates={v.op.name: after - old
                     for v, old, after in zip(variables, before, session.run(variables))},
            variable_dtypes={v.dtype.base_dtype for v in graph.get_collection("variables")
                             if v.dtype.is_floating},
            op_dtypes={op.type: op.get_attr("T") for op in graph.get_operations()
                       if op.type in ("Conv2D", "Conv2DBackpropFilter", "FusedBatchNormV3")},
            variable_devices={v.op.name: v.device for v in graph.get_collection("variables")
                              if v.dtype.is_floating},
            conv_formats=conv_formats,
            loss_scale=float(session.run(scale[0])) if scale else None))
    return results


def _what_ran(metadata):
    """({device kind: convolution data formats}, {device kind: op types that ran}) of a
    traced step."""
    conv_formats = {}
    for partition in metadata.partition_graphs:
        for node in partition.node:
            if node.op == "Conv2D":
                kind = "GPU" if "gpu" in node.device.lower() else "CPU"
                conv_formats.setdefault(kind, set()).add(node.attr["data_format"].s.decode())
    ran_on = {}
    for device in metadata.step_stats.dev_stats:
        kind = "GPU" if "gpu" in device.device.lower() else "CPU"
        for stats in device.node_stats:
            ran_on.setdefault(kind, set()).add(
                stats.timeline_label.split("=")[-1].split("(")[0].strip())
    return conv_formats, ran_on


def save_initial_weights(devices, config, settings=TINY_INCEPTION):
    """A checkpoint of the seeded initial trainable weights (fp32 graph) of the network of
    `settings`; returns its path, for comparing graphs built differently on the same weights."""
    with tf.Graph().as_default():
        tf1.set_random_seed(3)
        with tf.device(devices[0]):
            registry.network_named(settings.network).logits(
                tf.zeros([2, settings.image_size, settings.image_size, 3]), settings, True)
        saver = tf1.train.Saver(tf1.trainable_variables())
        with tf1.Session(config=config) as session:
            session.run(tf1.global_variables_initializer())
            return saver.save(session, os.path.join(temp_dir("weights"), "initial"))


def assert_finite_checkpoint(test, path):
    """Every float tensor of the checkpoint at `path` is finite."""
    reader = tf.train.load_checkpoint(path)
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        if np.issubdtype(np.asarray(value).dtype, np.floating):
            test.assertTrue(np.all(np.isfinite(value)), name)


def build_small_train_graph(plan=None, make_model_fn=None, all_reduce=None):
    """step_graph.build_train_graph (in the default graph) of the small conv model, or of
    `make_model_fn(batch_norm_decay)`'s, on 2 virtual CPU towers: synthetic_input batches of 8,
    64 examples an epoch, training plan `plan` (None: one stage), rate 0.01; replicated
    variables with `all_reduce` (an all_reduce.AllReduceSpec)."""
    return step_graph.build_train_graph(synthetic_input(8),
                                        make_model_fn or (lambda decay: small_conv_model_fn()),
                                        optimization(initial_learning_rate=0.01, plan=plan),
                                        sharing_of(["/cpu:0", "/cpu:1"], all_reduce), 64)


def sharing_of(devices, all_reduce=None, variable_device="/cpu:0"):
    """The sharing.VariableSharing of towers on `devices`: replicated with `all_reduce` (an
    all_reduce.AllReduceSpec; across workers when its num_workers > 1), else every variable on
    `variable_device`."""
    return sharing.for_devices(devices, all_reduce, variable_device)


def on_host(devices):
    """towers.build_towers' tower_scope for towers on `devices` reading every variable from the
    host (sharing.OneDevice's)."""
    return sharing.OneDevice(devices).tower_scope


def train_small_model(train_dir, max_steps, save_checkpoint_steps=2, log=None, all_reduce=None,
                      **loop_settings):
    """Trains the small conv model on 2 virtual CPU towers with the real loop (replicated
    variables with `all_reduce`); returns its TrainResult (checkpoints every
    `save_checkpoint_steps` steps, no summaries)."""
    from inception.loop import session_loop  # pylint: disable=import-outside-toplevel

    settings = settings_lib.LoopSettings(train_dir=train_dir, max_steps=max_steps,
                                         save_summaries_steps=0,
                                         save_checkpoint_steps=save_checkpoint_steps,
                                         **loop_settings)
    return session_loop.run_training(
        functools.partial(build_small_train_graph, all_reduce=all_reduce),
        cpu_session_config(2), settings, log=log or (lambda line: None))
