"""Export with --formats=saved_model,tflite,tflite_int8: the float TFLite model beside the
SavedModel gives its logits, and with the preprocessing written without TensorFlow its top-1 on
the demo's validation images; the int8 one, calibrated on the run's training images, agrees on
top-1 within its measured bound; bad --formats values and a missing calibration set are one
line."""

import json
import os
import subprocess
import sys
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import settings as settings_lib
from inception.driver import launch
from inception.serving import lite
from inception.serving import numpy_preprocessing
from inception.serving import saved_model
from tests import testing_utils

SIZE = 75
STEPS = 30  # enough for logits of a sane size: an int8 model of a 3-step one is noise
RUN = None


def setUpModule():
    global RUN  # pylint: disable=global-statement
    data_dir = testing_utils.tiny_demo_data(train=24, validation=60)
    train_dir = testing_utils.temp_dir("tflite_train")
    launch.train(settings_lib.train_settings(
        train_dir=train_dir, data_dir=data_dir, dataset="demo", eval_every_n_steps=0,
        max_steps=STEPS, image_size=SIZE, depth_multiplier=0.1, batch_size=4, num_towers=1,
        seed=1),
        log=lambda line: None)
    export_dir = os.path.join(testing_utils.temp_dir("tflite_export"), "models")
    version_dir = saved_model.export_training_run(
        train_dir, export_dir, log=lambda line: None,
        formats=("saved_model", "tflite", "tflite_int8"), calibration_count=20)
    shards = sorted(tf.io.gfile.glob(os.path.join(data_dir, "validation-*")))
    RUN = {"version_dir": version_dir, "images_bytes": testing_utils.validation_bytes(shards)}


def tflite_logits(model_path, images):
    """Logits of the TFLite model for each image (float32 [size, size, 3]), one at a time (its
    input holds one image). TensorFlow's interpreter here; classify will run LiteRT's."""
    interpreter = tf.lite.Interpreter(model_path=model_path)
    interpreter.allocate_tensors()
    image_input = interpreter.get_input_details()[0]
    logits_output = interpreter.get_output_details()[0]
    results = []
    for image in images:
        interpreter.set_tensor(image_input["index"], image[np.newaxis])
        interpreter.invoke()
        results.append(interpreter.get_tensor(logits_output["index"])[0])
    return np.stack(results)


class TfliteExportTest(unittest.TestCase):

    def test_the_version_folder_holds_the_model_its_inputs_and_labels(self):
        names = set(os.listdir(RUN["version_dir"]))
        self.assertLessEqual({"saved_model.pb", "variables", lite.TFLITE_FILE,
                              lite.TFLITE_INT8_FILE, lite.INPUTS_FILE, lite.LABELS_FILE}, names)
        with open(os.path.join(RUN["version_dir"], lite.INPUTS_FILE), encoding="utf-8") as file:
            inputs = json.load(file)
        self.assertEqual(inputs["input"]["shape"], [1, SIZE, SIZE, 3])
        self.assertEqual(inputs["preprocessing"]["central_fraction"], 0.875)
        with open(os.path.join(RUN["version_dir"], lite.LABELS_FILE), encoding="utf-8") as file:
            labels = file.read().splitlines()
        self.assertEqual(labels[0], "background")
        self.assertEqual(len(labels), inputs["output"]["classes"])

    def test_its_logits_are_the_saved_models_on_the_same_images(self):
        images = np.stack([numpy_preprocessing.eval_image(data, SIZE)
                           for data in RUN["images_bytes"]])
        serve = tf.saved_model.load(RUN["version_dir"]).signatures["predict_images"]
        expected = serve(images=tf.constant(images))["logits"].numpy()
        got = tflite_logits(os.path.join(RUN["version_dir"], lite.TFLITE_FILE), images)
        # The same float32 graph, TFLite's kernels summing in another order than TensorFlow's:
        # measured 7e-7 of the largest logit (this 3-step model's logits reach 4e4), and 1e-6
        # of it on a trained demo model; hence 1e-5 of the largest logit.
        np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())

    def test_served_without_tensorflow_preprocessing_it_agrees_on_top_1(self):
        serve = tf.saved_model.load(RUN["version_dir"]).signatures["serving_default"]
        expected = serve(image_bytes=tf.constant(RUN["images_bytes"]))["classes"].numpy()[:, 0]
        images = np.stack([numpy_preprocessing.eval_image(data, SIZE)
                           for data in RUN["images_bytes"]])
        got = tflite_logits(os.path.join(RUN["version_dir"], lite.TFLITE_FILE), images)
        np.testing.assert_array_equal(np.argmax(got, axis=1), expected)


    def test_the_int8_model_is_a_quarter_of_the_size_and_agrees_on_top_1(self):
        float_path = os.path.join(RUN["version_dir"], lite.TFLITE_FILE)
        int8_path = os.path.join(RUN["version_dir"], lite.TFLITE_INT8_FILE)
        # A quarter of the weights' bytes, plus per-channel scales and the graph, which weigh
        # more in a model this small (measured 0.35 of the float model).
        self.assertLess(os.path.getsize(int8_path), 0.4 * os.path.getsize(float_path))
        images = np.stack([numpy_preprocessing.eval_image(data, SIZE)
                           for data in RUN["images_bytes"]])
        float_top = np.argmax(tflite_logits(float_path, images), axis=1)
        int8_top = np.argmax(tflite_logits(int8_path, images), axis=1)
        # Measured 0.90 (54 of 60) for this 30-step model of depth 0.1, whose two best logits
        # are often close; 0.8 leaves room for other CPUs' rounding.
        self.assertGreaterEqual(float(np.mean(float_top == int8_top)), 0.8)


class CalibrationTest(unittest.TestCase):

    def test_images_are_spread_over_the_labels(self):
        data_dir = testing_utils.tiny_demo_data(train=24, validation=4)
        images = lite.calibration_images(data_dir, 32, num_labels=5, count=10)
        self.assertEqual(images.shape, (10, 32, 32, 3))
        self.assertEqual(images.dtype, np.float32)
        # Each chosen image is found among all training images, whose labels say the spread.
        records = tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(
            os.path.join(data_dir, "train-*")))).map(lambda record: tf.io.parse_single_example(
                record, {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                         "image/class/label": tf.io.FixedLenFeature([], tf.int64)}))
        every = [(numpy_preprocessing.eval_image(r["image/encoded"].numpy(), 32),
                  int(r["image/class/label"])) for r in records]
        labels = [next(label for image, label in every if np.array_equal(image, chosen))
                  for chosen in images]
        self.assertEqual(sorted(labels), [1, 1, 2, 2, 3, 3, 4, 4, 5, 5])

    def test_a_missing_calibration_set_is_one_line(self):
        empty = testing_utils.temp_dir("no_shards")
        with self.assertRaises(lite.ConversionError) as raised:
            lite.calibration_images(empty, 32, num_labels=5)
        self.assertIn(f"{empty} holds none (train-*)", str(raised.exception))
        self.assertNotIn("\n", str(raised.exception))


class FormatsFlagTest(unittest.TestCase):

    def run_export(self, *flags):
        return subprocess.run([sys.executable, "-m", "inception.export",
                               "--export_dir=" + testing_utils.temp_dir("formats"), *flags],
                              capture_output=True, text=True, check=False,
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))

    def test_an_unknown_format_is_one_line_and_exit_2(self):
        done = self.run_export("--formats=saved_model,onnx_typo")
        self.assertEqual(done.returncode, 2)
        self.assertEqual(done.stderr.strip().splitlines(), [
            "error: unknown --formats value 'onnx_typo'; use a comma-separated list of "
            "saved_model, tflite, tflite_int8."])

    def test_formats_without_the_saved_model_are_refused(self):
        done = self.run_export("--formats=tflite")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--formats must include saved_model", done.stderr)


if __name__ == "__main__":
    absltest.main()
