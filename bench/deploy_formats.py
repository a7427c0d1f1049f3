"""Every export format of one trained run, side by side on its validation split: top-1 agreement
with the SavedModel, precision@1, file size and single-image latency (median) on this CPU.

    python3 -m bench.deploy_formats --train_dir=/tmp/inception_train \
        --output_json=bench/results/deploy-formats-cpu-2core.json

Run by hand from the repository root with the project's environment (`bin/bazel` makes it;
its python is ~/.cache/inception/venv-cpu-*/bin/python), after training (the README's first
command trains the demo into /tmp/inception_train). It exports the run's newest checkpoint in
every format into a temporary directory. The SavedModel takes the encoded images (its own
preprocessing); the TFLite models take them prepared by serving/numpy_preprocessing.py, as a
deployment without TensorFlow would. TFLite runs on TensorFlow's interpreter here.
"""

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
import tensorflow as tf

from bench import report as bench_report
from common import machine
from inception.inputs import datasets
from inception.run.directory import RunDirectory
from inception.serving import lite
from inception.serving import numpy_preprocessing
from inception.serving import saved_model

FORMATS = ("saved_model", "tflite", "tflite_int8")
LATENCY_IMAGES = 50  # single-image calls timed per format


def validation_examples(data_dir):
    """(encoded images, labels) of the validation shards of the run's data, in shard order."""
    shards = sorted(tf.io.gfile.glob(os.path.join(data_dir, "validation-*")))
    records = tf.data.TFRecordDataset(shards).map(lambda record: tf.io.parse_single_example(
        record, {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                 "image/class/label": tf.io.FixedLenFeature([], tf.int64)}))
    examples = [(r["image/encoded"].numpy(), int(r["image/class/label"])) for r in records]
    return [data for data, _ in examples], np.array([label for _, label in examples])


def tflite_runner(path):
    """callable(float32 image [size, size, 3]) -> logits of the TFLite model at `path`."""
    interpreter = tf.lite.Interpreter(model_path=path)
    interpreter.allocate_tensors()
    image_input = interpreter.get_input_details()[0]["index"]
    logits_output = interpreter.get_output_details()[0]["index"]

    def run(image):
        interpreter.set_tensor(image_input, image[np.newaxis])
        interpreter.invoke()
        return interpreter.get_tensor(logits_output)[0]
    return run


def measure(version_dir, images_bytes, labels, size):
    """{format: {top-1 agreement, precision@1, MB, median ms per image}}."""
    serve = tf.saved_model.load(version_dir).signatures[saved_model.SERVING_SIGNATURE]
    runners = {"saved_model": lambda data: serve(
        image_bytes=tf.constant([data]))["logits"].numpy()[0]}
    for name, file_name in (("tflite", lite.TFLITE_FILE), ("tflite_int8", lite.TFLITE_INT8_FILE)):
        run = tflite_runner(os.path.join(version_dir, file_name))
        runners[name] = lambda data, run=run: run(numpy_preprocessing.eval_image(data, size))
    sizes = {"saved_model": sum(os.path.getsize(os.path.join(folder, name))
                                for folder, _, names in os.walk(version_dir)
                                for name in names if not name.endswith(".tflite")),
             "tflite": os.path.getsize(os.path.join(version_dir, lite.TFLITE_FILE)),
             "tflite_int8": os.path.getsize(os.path.join(version_dir, lite.TFLITE_INT8_FILE))}
    top = {name: np.array([int(np.argmax(run(data))) for data in images_bytes])
           for name, run in runners.items()}
    latency = {name: [] for name in runners}
    for data in images_bytes[:LATENCY_IMAGES]:
        for name, run in runners.items():  # in turns, so a slow spell falls on all
            started = time.perf_counter()
            run(data)
            latency[name].append(time.perf_counter() - started)
    return {name: {"top1_agreement": round(float(np.mean(top[name] == top["saved_model"])), 4),
                   "precision_at_1": round(float(np.mean(top[name] == labels)), 4),
                   "megabytes": round(sizes[name] / 1e6, 2),
                   "median_ms_per_image": round(1000 * statistics.median(latency[name]), 2)}
            for name in runners}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_dir", default="/tmp/inception_train")
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    stored = RunDirectory(args.train_dir).require_settings()
    export_dir = tempfile.mkdtemp(prefix="deploy_formats_")
    version_dir = saved_model.export_training_run(args.train_dir, export_dir, formats=FORMATS)
    images_bytes, labels = validation_examples(datasets.labels_dir(stored.data_dir))
    report = {"machine": machine.cpu_summary(), "train_dir": args.train_dir,
              "checkpoint_step": int(os.path.basename(version_dir)),
              "model": f"{stored.model.dataset}, {stored.model.image_size} px, depth "
                       f"x{stored.model.depth_multiplier:g}",
              "validation_images": len(labels),
              "formats": measure(version_dir, images_bytes, labels, stored.model.image_size)}
    print(json.dumps(report, indent=2))
    if args.output_json:
        bench_report.write_json(report, args.output_json)


if __name__ == "__main__":
    main()
