"""One throughput measurement per process: `python -m bench.measure KIND 'JSON settings'`.

Each measurement runs in its own process (bench/throughput.py starts them one after the other),
so peak memory is the measurement's own and no TensorFlow state leaks between them. A
measurement discards its warm-up steps, then times `repeats` rounds of `steps` steps and
reports the median images/sec. The result is one JSON line on stdout.

Kinds: matmul_peak, ours, keras, pipeline.
"""

import json
import os
import resource
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.device_lock import held_since  # noqa: E402  pylint: disable=wrong-import-position
from bench.device_lock import hold_device  # noqa: E402  pylint: disable=wrong-import-position
from bench.report import KERAS_MODELS  # noqa: E402  pylint: disable=wrong-import-position
from inception.config import recipe  # noqa: E402  pylint: disable=wrong-import-position
from inception.driver import startup  # noqa: E402  pylint: disable=wrong-import-position

startup.allow_xla_on_cpu()  # for "xla": before TensorFlow reads its XLA flags

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf1 = tf.compat.v1
NUM_CLASSES = 1001


def peak_memory_mb():
    """This process's peak resident memory in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def timed_rounds(run_steps, warmup, steps, repeats):
    """Runs `run_steps(warmup)` once untimed, then `repeats` timed rounds of `steps`; returns
    the seconds of each round."""
    run_steps(warmup)
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_steps(steps)
        rounds.append(time.perf_counter() - start)
    return rounds


def images_per_sec(rounds, images_per_round):
    """Median images/sec over rounds, and every round's value."""
    values = [images_per_round / seconds for seconds in rounds]
    return statistics.median(values), values


def gpu_count():
    """Physical GPUs TensorFlow sees (0 on CPU-only machines)."""
    return len(tf.config.list_physical_devices("GPU"))


PEAK_DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}
KERAS_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def matmul_peak(settings):
    """Matrix-multiply throughput in GFLOP/s (the MFU denominator), on the first GPU if there
    is one, else on the CPU. `precision` fp32 (the default; on a GPU TensorFlow runs it on TF32
    tensor cores, as in training), bf16 or fp16: the peak of our mixed-precision step."""
    on_gpu = gpu_count() > 0
    precision = settings.get("precision", "fp32")
    size = settings.get("matmul_size", 8192 if on_gpu else 2048)
    steps = settings.get("matmul_steps", 10)
    with tf.Graph().as_default(), tf.device("/gpu:0" if on_gpu else "/cpu:0"):
        # Operands held in the measured precision: the peak is the multiply's, not a cast's.
        a, b = (tf1.Variable(tf.cast(tf.random.normal([size, size]), PEAK_DTYPES[precision]))
                for _ in range(2))
        product = tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32))
        hold_device(settings)
        with tf1.Session(config=_config(settings)) as session:
            session.run(tf1.global_variables_initializer())
            rounds = timed_rounds(lambda n: [session.run(product) for _ in range(n)], 3,
                                  steps, settings["repeats"])
    gflops = [2.0 * size ** 3 * steps / seconds / 1e9 for seconds in rounds]
    device = "gpu" if on_gpu else "cpu"
    if on_gpu and precision == "fp32" and \
            tf.config.experimental.tensor_float_32_execution_enabled():
        device = "gpu (tf32)"
    elif precision != "fp32":
        device = f"{device} ({precision})"
    return {"gflops": statistics.median(gflops), "rounds": gflops, "device": device}


def ours(settings):
    """Our training step (towers, averaging, EMA, batch-norm updates) on synthetic input.

    Settings as the trainer's flags and defaults: `precision`, `variable_update` (auto,
    parameter_server or replicated), `variable_device` (auto, cpu or gpu), `xla`,
    `prefetch_inputs` (default: on for GPU towers, as in training).

    Towers go where training puts them: one per GPU (GPUs split into virtual devices of
    `virtual_gpu_memory_mb` when there are more towers than GPUs), else virtual CPU devices.
    """
    from inception.config import settings as settings_lib  # pylint: disable=import-outside-toplevel
    from inception.inputs import datasets  # pylint: disable=import-outside-toplevel
    from inception.model import network  # pylint: disable=import-outside-toplevel
    from inception.model import registry  # pylint: disable=import-outside-toplevel
    from inception.parallel import sharing  # pylint: disable=import-outside-toplevel
    from inception.step import step_graph  # pylint: disable=import-outside-toplevel
    batch, size = settings["batch_size"], settings["image_size"]
    placement = _placement(settings)
    prefetch_inputs = settings.get("prefetch_inputs", placement.prefetch_inputs)
    model_settings = settings_lib.ModelSettings(NUM_CLASSES, size, settings["depth_multiplier"],
                                                "synthetic", settings.get("model"))
    imagenet = settings_lib.with_defaults(settings_lib.OptimizationSettings(),
                                          recipe.IMAGENET_DEFAULTS)
    graph = tf.Graph()
    with graph.as_default():
        input_batch = synthetic_input(batch, size)
        built = step_graph.build_train_graph(
            input_batch,
            lambda decay: registry.make_model_fn(
                model_settings, decay, network.TowerOptions(placement.compute_dtype)),
            imagenet, sharing.on_one_machine(placement),
            datasets.KNOWN_DATASETS["imagenet"].examples["train"],
            step_graph.StepOptions(initial_loss_scale=placement.initial_loss_scale,
                                   prefetch_inputs=prefetch_inputs))
        train_op = built.stages[0].train_op
        flops_per_image = count_flops(graph) / batch
        init = (tf1.global_variables_initializer(), tf1.local_variables_initializer(),
                input_batch.initializer)
    hold_device(settings)
    with tf1.Session(graph=graph, config=placement.session_config()) as session:
        session.run(init)
        if built.fill_copies is not None:
            session.run(built.fill_copies)
        if built.input_fill is not None:
            session.run(built.input_fill)
        rounds = timed_rounds(lambda n: [session.run(train_op) for _ in range(n)],
                              settings["warmup"], settings["steps"], settings["repeats"])
        trace = (step_profile(session, train_op, settings["profile_dir"])
                 if settings.get("profile_dir") else None)
    median, values = images_per_sec(rounds, batch * settings["steps"])
    result = {"images_per_sec": median, "rounds": values,
              "train_flops_per_image": flops_per_image,
              "placement": placement.towers.describe(),
              "variable_device": placement.variable_device,
              "variable_update": placement.variable_update,
              "prefetch_inputs": prefetch_inputs}
    if trace:
        result["profile"] = trace
    return result


def _placement(settings):
    """The Placement of the benchmark's `settings`, resolved as a training run resolves it:
    before the graph, which creates the devices."""
    from inception.config import settings as settings_lib  # pylint: disable=import-outside-toplevel
    from inception.parallel import devices  # pylint: disable=import-outside-toplevel
    return devices.resolve_placement(settings_lib.DeviceSettings(
        num_towers=settings["towers"], precision=settings.get("precision", "fp32"),
        virtual_gpu_memory_mb=settings.get("virtual_gpu_memory_mb", 0),
        variable_update=settings.get("variable_update", "auto"),
        variable_device=settings.get("variable_device", "auto"), xla=settings.get("xla", False),
        intra_op_threads=settings.get("intra_op_threads", 0),
        inter_op_threads=settings.get("inter_op_threads", 0)))


def step_profile(session, train_op, profile_dir, top=12):
    """Runs one traced step; writes its Chrome trace (timeline) to `profile_dir` and returns
    where the time went: total op time per device and the op types that took most of it."""
    from tensorflow.python.client import timeline  # pylint: disable=import-outside-toplevel
    metadata = tf1.RunMetadata()
    session.run(train_op, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                run_metadata=metadata)
    os.makedirs(profile_dir, exist_ok=True)
    path = os.path.join(profile_dir, f"step_trace_{os.getpid()}.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(timeline.Timeline(metadata.step_stats).generate_chrome_trace_format())
    per_device, per_op = {}, {}
    for device in metadata.step_stats.dev_stats:
        for stats in device.node_stats:
            micros = stats.all_end_rel_micros
            per_device[device.device] = per_device.get(device.device, 0) + micros
            op_type = stats.timeline_label.split("=")[-1].split("(")[0].strip() or \
                stats.node_name
            key = f"{device.device.rsplit('/', 1)[-1]} {op_type}"
            per_op[key] = per_op.get(key, 0) + micros
    slowest = sorted(per_op.items(), key=lambda item: -item[1])[:top]
    return {"trace": path, "device_busy_ms": {name: value / 1000.0
                                              for name, value in per_device.items()},
            "top_ops_ms": {name: value / 1000.0 for name, value in slowest}}


def synthetic_input(batch, size):
    """An InputBatch repeating one random batch held in memory (no decoding cost)."""
    from inception.inputs import pipeline  # pylint: disable=import-outside-toplevel
    rng = np.random.RandomState(0)
    images = rng.uniform(-1, 1, size=(batch, size, size, 3)).astype(np.float32)
    labels = rng.randint(1, NUM_CLASSES, size=batch).astype(np.int32)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()
    iterator = tf1.data.make_initializable_iterator(dataset)
    image_batch, label_batch = iterator.get_next()
    return pipeline.InputBatch(images=image_batch, labels=label_batch,
                               corrupt_records=tf.constant(0, tf.int64),
                               initializer=iterator.initializer)


def count_flops(graph):
    """Floating-point operations of one run of every op in `graph` (forward and backward),
    from TensorFlow's per-op statistics (convolutions, matmuls and their gradients dominate)."""
    options = tf1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    return tf1.profiler.profile(graph, options=options).total_float_ops


def keras(settings):
    """The keras.applications counterpart of our `model` (KERAS_MODELS: InceptionV3 by
    default) trained with `fit` on the same synthetic batch.

    `precision` bf16 / fp16 sets Keras's own mixed-precision policy (mixed_bfloat16 /
    mixed_float16, the latter with Keras's automatic loss scaling): the same-precision
    comparison for our --precision step.
    """
    # Keras 3 (what tf.keras is unless TF_USE_LEGACY_KERAS makes it Keras 2: common/cli.py)
    import keras as keras3  # pylint: disable=import-outside-toplevel
    batch, size = settings["batch_size"], settings["image_size"]
    hold_device(settings)  # Keras builds its model on the GPU at once
    tf.config.threading.set_intra_op_parallelism_threads(settings.get("intra_op_threads", 0))
    keras3.mixed_precision.set_global_policy(KERAS_POLICIES[settings.get("precision", "fp32")])
    application = getattr(keras3.applications,
                          KERAS_MODELS[settings.get("model") or recipe.DEFAULT_NETWORK])
    model = application(weights=None, input_shape=(size, size, 3), classes=NUM_CLASSES)
    # jit_compile "auto" is what a Keras user gets: XLA on GPUs, none on CPUs.
    model.compile(optimizer=keras3.optimizers.RMSprop(0.1, rho=0.9, momentum=0.9,
                                                      epsilon=1.0),
                  loss=keras3.losses.SparseCategoricalCrossentropy(from_logits=False),
                  jit_compile=settings.get("jit_compile", "auto"))
    rng = np.random.RandomState(0)
    images = rng.uniform(-1, 1, size=(batch, size, size, 3)).astype(np.float32)
    labels = rng.randint(1, NUM_CLASSES, size=batch).astype(np.int32)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()
    # One `fit` over every step, timed at batch ends: repeated short `fit` calls would add
    # Keras's per-call set-up to the steps (it doubled some rounds here).
    ends = []
    timer = keras3.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch_index, logs: ends.append(time.perf_counter()))
    total = settings["warmup"] + settings["steps"] * settings["repeats"]
    model.fit(dataset, steps_per_epoch=total, epochs=1, verbose=0, callbacks=[timer])
    marks = ends[settings["warmup"] - 1::settings["steps"]]
    rounds = [later - earlier for earlier, later in zip(marks, marks[1:])]
    median, values = images_per_sec(rounds, batch * settings["steps"])
    return {"images_per_sec": median, "rounds": values}


def pipeline(settings):
    """The training input pipeline alone: real JPEG decoding and the original distortions.

    With `threads` = 1 the pipeline gets a private one-thread pool (images/sec per core);
    0 lets tf.data use every core.
    """
    from inception.inputs import pipeline  # pylint: disable=import-outside-toplevel
    shards = jpeg_shards(settings.get("pipeline_images", 256), settings["work_dir"])
    batch = settings["batch_size"]
    with tf.Graph().as_default():
        input_batch = pipeline.build_train_input(pipeline.TrainStream(
            shards, batch, settings["image_size"], NUM_CLASSES, seed=1,
            threads=settings.get("threads", 0)))
        hold_device(settings)
        with tf1.Session(config=_config(settings)) as session:
            session.run([tf1.local_variables_initializer(), input_batch.initializer])
            rounds = timed_rounds(
                lambda n: [session.run(input_batch.images.op) for _ in range(n)],
                settings["warmup"], settings["steps"], settings["repeats"])
    median, values = images_per_sec(rounds, batch * settings["steps"])
    return {"images_per_sec": median, "rounds": values}


def jpeg_shards(count, work_dir):
    """Shards of `count` ImageNet-sized JPEGs (about 500x375, smooth random content)."""
    import io  # pylint: disable=import-outside-toplevel

    from PIL import Image  # pylint: disable=import-outside-toplevel

    from data import tfrecord_format  # pylint: disable=import-outside-toplevel
    path = os.path.join(work_dir, tfrecord_format.shard_name("train", 0, 1))
    if os.path.exists(path):
        return [path]
    rng = np.random.RandomState(0)
    temporary = path + ".partial"
    with tf.io.TFRecordWriter(temporary) as writer:
        for index in range(count):
            height, width = int(rng.randint(333, 400)), int(rng.randint(450, 500))
            coarse = rng.randint(0, 256, size=(height // 16 + 1, width // 16 + 1, 3))
            image = Image.fromarray(coarse.astype(np.uint8)).resize((width, height),
                                                                    Image.BICUBIC)
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=90)
            record = tfrecord_format.ImageRecord(
                encoded_jpeg=buffer.getvalue(), label=index % 1000 + 1, text="x",
                height=height, width=width, filename=f"{index}.jpg")
            writer.write(tfrecord_format.make_example(record).SerializeToString())
    os.replace(temporary, path)
    return [path]


def gpu_peak_memory_mb():
    """Peak bytes TensorFlow's allocators held on all GPUs in this process, in MB (None
    without GPUs)."""
    if not gpu_count():
        return None
    peaks = []
    # Optional detail: asking the eager context after a Session made the devices can fail
    # (e.g. with virtual GPUs); the measurement stands without it.
    try:
        for device in tf.config.list_logical_devices("GPU"):
            peaks.append(tf.config.experimental.get_memory_info(device.name)["peak"])
    except Exception:  # pylint: disable=broad-except
        return None
    return sum(peaks) / 2 ** 20 if peaks else None


def _config(settings):
    return tf1.ConfigProto(intra_op_parallelism_threads=settings.get("intra_op_threads", 0),
                           inter_op_parallelism_threads=settings.get("inter_op_threads", 0))


MEASUREMENTS = {"matmul_peak": matmul_peak, "ours": ours, "keras": keras, "pipeline": pipeline}


def main(argv):
    """Runs the measurement argv[1] with the JSON settings argv[2]; prints one JSON line."""
    kind, settings = argv[1], json.loads(argv[2])
    settings.setdefault("work_dir", tempfile.gettempdir())
    result = MEASUREMENTS[kind](settings)
    result["peak_memory_mb"] = peak_memory_mb()
    gpu_peak = gpu_peak_memory_mb()
    if gpu_peak is not None:
        result["gpu_peak_memory_mb"] = gpu_peak
    if held_since() is not None:
        result["device_held"] = [held_since(), time.time()]
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv)
