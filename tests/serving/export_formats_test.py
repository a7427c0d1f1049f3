"""Export with --formats=saved_model,tflite,tflite_int8,onnx: the float TFLite and ONNX models
beside the SavedModel give its logits, and with the preprocessing written without TensorFlow
its top-1 on the demo's validation images; the int8 one, calibrated on the run's training
images, agrees on top-1 within its measured bound; a converter that fails names the op, and
bad --formats values and a missing calibration set are one line. (classify_formats_test.py
runs the files on their own runtimes.)"""

import json
import os
import subprocess
import sys
import unittest

import numpy as np
import onnxruntime
import tensorflow as tf
from absl.testing import absltest

from common import image_limits

from inception.config import settings as settings_lib
from inception.serving import converted
from inception.serving import model_files
from inception.serving import numpy_preprocessing
from inception.serving import saved_model
from tests import testing_utils
from tests.serving import exported_models

SIZE = exported_models.SIZE
RUN = None
tf1 = tf.compat.v1


def setUpModule():
    global RUN  # pylint: disable=global-statement
    version_dir, images_bytes = exported_models.trained_export("export_formats", 60)
    RUN = {"version_dir": version_dir, "images_bytes": images_bytes}


def model_path(format_name):
    """The model file of `format_name` in the test's export."""
    return os.path.join(RUN["version_dir"], model_files.MODEL_FILES[format_name])


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


class ExportedModelsTest(unittest.TestCase):

    def test_the_version_folder_holds_the_model_its_inputs_and_labels(self):
        names = set(os.listdir(RUN["version_dir"]))
        self.assertLessEqual({"saved_model.pb", "variables", "model.tflite", "model_int8.tflite",
                              "model.onnx", "model_inputs.json", "labels.txt"}, names)
        with open(os.path.join(RUN["version_dir"], model_files.INPUTS_FILE),
                  encoding="utf-8") as file:
            inputs = json.load(file)
        self.assertEqual(inputs["input"]["shape"], ["batch", SIZE, SIZE, 3])
        self.assertEqual(inputs["preprocessing"]["central_fraction"], 0.875)
        with open(os.path.join(RUN["version_dir"], model_files.LABELS_FILE),
                  encoding="utf-8") as file:
            labels = file.read().splitlines()
        self.assertEqual(labels[0], "background")
        self.assertEqual(len(labels), inputs["output"]["classes"])
        self.assertEqual(model_files.read(model_path("onnx")), model_files.ModelInputs(
            SIZE, tuple(labels), top_k=5, max_pixels=image_limits.MAX_IMAGE_PIXELS))

    def test_its_logits_are_the_saved_models_on_the_same_images(self):
        images = np.stack([numpy_preprocessing.eval_image(data, SIZE)
                           for data in RUN["images_bytes"]])
        serve = tf.saved_model.load(RUN["version_dir"]).signatures["predict_images"]
        expected = serve(images=tf.constant(images))["logits"].numpy()
        got = tflite_logits(model_path("tflite"), images)
        # The same float32 graph, TFLite's kernels summing in another order than TensorFlow's:
        # measured 7e-7 of the largest logit (this 3-step model's logits reach 4e4), and 1e-6
        # of it on a trained demo model; hence 1e-5 of the largest logit.
        np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())

    def test_served_without_tensorflow_preprocessing_it_agrees_on_top_1(self):
        serve = tf.saved_model.load(RUN["version_dir"]).signatures["serving_default"]
        expected = serve(image_bytes=tf.constant(RUN["images_bytes"]))["classes"].numpy()[:, 0]
        images = np.stack([numpy_preprocessing.eval_image(data, SIZE)
                           for data in RUN["images_bytes"]])
        got = tflite_logits(model_path("tflite"), images)
        np.testing.assert_array_equal(np.argmax(got, axis=1), expected)

    def test_the_onnx_models_logits_are_the_saved_models(self):
        images = np.stack([numpy_preprocessing.eval_image(data, SIZE)
                           for data in RUN["images_bytes"]])
        serve = tf.saved_model.load(RUN["version_dir"]).signatures["predict_images"]
        expected = serve(images=tf.constant(images))["logits"].numpy()
        session = onnxruntime.InferenceSession(model_path("onnx"),
                                               providers=["CPUExecutionProvider"])
        self.assertEqual([node.name for node in session.get_inputs()], ["images"])
        self.assertEqual([node.name for node in session.get_outputs()], ["logits"])
        got = session.run(None, {"images": images})[0]  # all 60 in one batch
        # The same float32 graph with the weights frozen, onnxruntime's kernels summing in
        # their own order: measured 9e-7 of the largest logit on a trained demo model; as for
        # TFLite, 1e-5 of the largest logit.
        np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())
        np.testing.assert_array_equal(np.argmax(got, axis=1), np.argmax(expected, axis=1))

    def test_the_int8_model_is_a_quarter_of_the_size_and_agrees_on_top_1(self):
        float_path = model_path("tflite")
        int8_path = model_path("tflite_int8")
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
        images = converted.calibration_images(data_dir, 32, num_labels=5, count=10)
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
        with self.assertRaises(model_files.ConversionError) as raised:
            converted.calibration_images(empty, 32, num_labels=5)
        self.assertIn(f"{empty} holds none (train-*)", str(raised.exception))
        self.assertNotIn("\n", str(raised.exception))


def unconvertible_logits(images, settings):
    """A tiny model ending in an op that neither TFLite nor ONNX holds (BesselI0e)."""
    weights = tf1.get_variable("tiny/weights", [3, settings.num_classes],
                               initializer=tf1.glorot_uniform_initializer(seed=3))
    return tf.math.bessel_i0e(tf.matmul(tf.reduce_mean(images, axis=[1, 2]), weights))


class ConverterFailureTest(unittest.TestCase):

    def test_the_op_a_converter_cannot_hold_is_named_and_nothing_is_published(self):
        model = settings_lib.ModelSettings(num_classes=4, image_size=16, depth_multiplier=1.0,
                                           dataset="demo")
        serving_graph = saved_model.build_serving_graph(model, logits_fn=unconvertible_logits)
        checkpoint_path = os.path.join(testing_utils.temp_dir("unconvertible"), "model.ckpt-7")
        with tf1.Session(graph=serving_graph.graph) as session:
            session.run(tf1.variables_initializer(serving_graph.graph.get_collection(
                tf1.GraphKeys.GLOBAL_VARIABLES)))
            serving_graph.saver.save(session, checkpoint_path, write_meta_graph=False)
        expected = {"tflite": "TFLite has no built-in kernel for the TensorFlow op BesselI0e",
                    "onnx": "tf2onnx could not convert the TensorFlow op BesselI0e"}
        for format_name, cause in expected.items():
            export_dir = testing_utils.temp_dir("unconvertible_export")
            with self.assertRaises(model_files.ConversionError) as raised:
                saved_model.export_saved_model(
                    checkpoint_path, settings_lib.TrainSettings(model=model), (), export_dir,
                    saved_model.VersionContents(formats=("saved_model", format_name)),
                    logits_fn=unconvertible_logits)
            self.assertIn(cause, str(raised.exception))
            self.assertIn(f"export without {format_name} in --formats", str(raised.exception))
            self.assertNotIn("\n", str(raised.exception))
            self.assertEqual(os.listdir(export_dir), [])  # no version, no partial one


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
            "saved_model, tflite, tflite_int8, onnx."])

    def test_formats_without_the_saved_model_are_refused(self):
        done = self.run_export("--formats=tflite")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--formats must include saved_model", done.stderr)


if __name__ == "__main__":
    absltest.main()
