"""Every export format of trained runs, side by side on their validation splits: top-1
agreement with the SavedModel, precision@1, file size and single-image latency (median) on this
CPU.

    python3 -m bench.deploy_formats --train_dirs=/tmp/inception_train,/tmp/mnist_run \
        --output_json=bench/results/deploy-formats-cpu-2core.json

Run by hand from the repository root with the project's environment (`bin/bazel` makes it;
its python is ~/.cache/inception/venv-cpu-*/bin/python), after training (the README's first
command trains the demo into /tmp/inception_train). It exports each run's newest checkpoint in
every format into a temporary directory and classifies the validation images one per call, each
format as //inception:classify runs it: the SavedModel through TensorFlow (its own
preprocessing in the graph), the TFLite files on LiteRT and the ONNX file on onnxruntime, with
the images prepared by serving/numpy_preprocessing.py (counted in their time).
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
from inception.config import commands
from inception.inputs import datasets
from inception.run.directory import RunDirectory
from inception.serving import model_files
from inception.serving import tf_models
from inception.serving import runtimes
from inception.serving import saved_model

FORMATS = ("saved_model", "tflite", "tflite_int8", "onnx")
LATENCY_IMAGES = 50  # single-image calls timed per format


def validation_examples(data_dir):
    """(encoded images, labels) of the validation shards of the run's data, in shard order."""
    shards = sorted(tf.io.gfile.glob(os.path.join(data_dir, "validation-*")))
    records = tf.data.TFRecordDataset(shards).map(lambda record: tf.io.parse_single_example(
        record, {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                 "image/class/label": tf.io.FixedLenFeature([], tf.int64)}))
    examples = [(r["image/encoded"].numpy(), int(r["image/class/label"])) for r in records]
    return [data for data, _ in examples], np.array([label for _, label in examples])


def format_size(version_dir, format_name):
    """Bytes of a format's files: the SavedModel's are the folder but the other model files."""
    if format_name != "saved_model":
        return os.path.getsize(os.path.join(version_dir, model_files.MODEL_FILES[format_name]))
    return sum(os.path.getsize(os.path.join(folder, name))
               for folder, _, names in os.walk(version_dir) for name in names
               if not name.endswith(model_files.MODEL_SUFFIXES))


def measure(version_dir, images_bytes, labels):
    """{format: {top-1 agreement, precision@1, MB, median ms per image}}."""
    quiet = lambda line: None  # noqa: E731
    predicts = {"saved_model": tf_models.open_model(version_dir, log=quiet)}
    for name in FORMATS[1:]:
        predicts[name] = runtimes.open_model_file(
            os.path.join(version_dir, model_files.MODEL_FILES[name]), log=quiet)
    top = {name: np.array([int(predict([data])["classes"][0][0]) for data in images_bytes])
           for name, predict in predicts.items()}
    latency = {name: [] for name in predicts}
    for data in images_bytes[:LATENCY_IMAGES]:
        for name, predict in predicts.items():  # in turns, so a slow spell falls on all
            started = time.perf_counter()
            predict([data])
            latency[name].append(time.perf_counter() - started)
    return {name: {"top1_agreement": round(float(np.mean(top[name] == top["saved_model"])), 4),
                   "precision_at_1": round(float(np.mean(top[name] == labels)), 4),
                   "megabytes": round(format_size(version_dir, name) / 1e6, 2),
                   "median_ms_per_image": round(1000 * statistics.median(latency[name]), 2)}
            for name in predicts}


def measure_run(train_dir):
    """The report of one training directory: its model, export and every format's figures."""
    stored = RunDirectory(train_dir).require_settings()
    export_dir = tempfile.mkdtemp(prefix="deploy_formats_")
    version_dir = saved_model.export_training_run(commands.ExportSettings(
        train_dir, export_dir=export_dir, formats=",".join(FORMATS)))
    images_bytes, labels = validation_examples(datasets.labels_dir(stored.data_dir))
    return {"train_dir": train_dir, "data_dir": stored.data_dir,
            "checkpoint_step": int(os.path.basename(version_dir)),
            "model": f"{stored.model.dataset}, {stored.model.image_size} px, depth "
                     f"x{stored.model.depth_multiplier:g}, {stored.model.num_classes - 1} "
                     "classes",
            "validation_images": len(labels),
            "formats": measure(version_dir, images_bytes, labels)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_dirs", default="/tmp/inception_train",
                        help="Comma-separated training directories, measured in turn.")
    parser.add_argument("--output_json", default="")
    args = parser.parse_args()
    report = {"machine": machine.cpu_summary(),
              "runs": [measure_run(train_dir) for train_dir in args.train_dirs.split(",")]}
    print(json.dumps(report, indent=2))
    if args.output_json:
        bench_report.write_json(report, args.output_json)


if __name__ == "__main__":
    main()
