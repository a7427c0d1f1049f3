"""Export and classify: the SavedModel agrees with the eval graph image by image, loads without
tf-slim or this project, never overwrites a version; bad input is one line; classify goes on
past a bad image."""

import io
import json
import os
import shutil
import subprocess
import sys
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image

from data import demo_data
from inception.config import commands
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.inputs import preprocessing
from inception.model import registry
from inception.run import checkpoint_io
from inception.run.directory import RunDirectory
from inception.run.directory import SETTINGS_FILE
from inception.serving import predictions
from inception.serving import tf_models
from inception.serving import saved_model
from inception.validation import scoring
from tests import testing_utils
from tests import tiny_eval

tf1 = tf.compat.v1
VALIDATION_IMAGES = 12

PLAIN_TENSORFLOW = """
import builtins, sys
real_import = builtins.__import__
def refuse_project_code(name, *args, **kwargs):
    if name.split(".")[0] in ("tf_slim", "inception", "data", "tests"):
        raise ImportError(name + " is not available here")
    return real_import(name, *args, **kwargs)
builtins.__import__ = refuse_project_code
import tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
with open(sys.argv[2], "rb") as handle:
    outputs = serve(image_bytes=tf.constant([handle.read()]))
print("TOP", int(outputs["classes"][0, 0]), outputs["label_texts"][0, 0].numpy().decode(),
      float(outputs["probabilities"][0, 0]))
"""


def eval_graph_logits(checkpoint_path, shards, settings):
    """(logits, images) of the evaluation job's own graph over all of `shards`, in one batch."""
    captured = {}

    def capture(images, model_settings):
        captured["images"] = images
        captured["logits"] = registry.inference_logits(images, model_settings)
        return captured["logits"]

    eval_graph = scoring.build_eval_graph(shards, settings, VALIDATION_IMAGES,
                                          logits_fn=capture)
    with tf1.Session(graph=eval_graph.graph) as session:
        eval_graph.saver.restore(session, checkpoint_path)
        session.run([eval_graph.local_initializer, eval_graph.input_initializer])
        return session.run([captured["logits"], captured["images"]])


def encoded(pixels, image_format):
    """`pixels` (uint8 [h, w, 3]) encoded as PNG, BMP, GIF..."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, image_format)
    return buffer.getvalue()


class TrainedRun:
    """A tiny model trained 3 steps on demo data (a checkpoint every step), exported once."""

    def __init__(self):
        self.data_dir = testing_utils.tiny_demo_data(train=24, validation=VALIDATION_IMAGES)
        self.train_dir = testing_utils.temp_dir("export_train")
        launch.train(settings_lib.train_settings(
            train_dir=self.train_dir, data_dir=self.data_dir, dataset="demo",
            eval_every_n_steps=0, max_steps=3,
            **testing_utils.tiny_model(), batch_size=4, num_towers=1,
            save_checkpoint_steps=1), log=lambda line: None)
        self.export_dir = os.path.join(testing_utils.temp_dir("export"), "models")
        self.version_dir = export(self.train_dir, self.export_dir)
        self.serve = tf.saved_model.load(self.version_dir).signatures
        self.shards = sorted(tf.io.gfile.glob(os.path.join(self.data_dir, "validation-*")))
        self.images_bytes = tiny_eval.validation_bytes(self.shards)

    def stored_model(self):
        """The model settings stored with the training run."""
        return RunDirectory(self.train_dir).read_settings().model

    def serving_outputs(self, images_bytes):
        """The serving signature's outputs as NumPy arrays."""
        return {name: value.numpy() for name, value in self.serve["serving_default"](
            image_bytes=tf.constant(images_bytes)).items()}


RUN = None


def setUpModule():
    global RUN  # pylint: disable=global-statement
    RUN = TrainedRun()


class ExportTest(unittest.TestCase):

    def setUp(self):
        for name in ("train_dir", "export_dir", "version_dir", "serve", "shards",
                     "images_bytes", "serving_outputs", "stored_model"):
            setattr(self, name, getattr(RUN, name))

    def test_version_is_the_global_step_and_carries_the_settings(self):
        self.assertEqual(self.version_dir, os.path.join(self.export_dir, "3"))
        self.assertEqual(os.listdir(self.export_dir), ["3"])  # no partial directory left
        with open(os.path.join(self.version_dir, "assets.extra", "model_settings.json"),
                  encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["image_size"], 75)

    def test_top1_equals_the_eval_graph_for_every_image(self):
        self.assertEqual(len(self.images_bytes), VALIDATION_IMAGES)
        eval_logits, _ = eval_graph_logits(os.path.join(self.train_dir, "model.ckpt-3"),
                                           self.shards, self.stored_model())
        outputs = self.serving_outputs(self.images_bytes)
        # The top class ranks the labels, never the background (logit 0), which this barely
        # trained model ranks first for every image.
        np.testing.assert_array_equal(outputs["classes"][:, 0],
                                      np.argmax(eval_logits[:, 1:], axis=1) + 1)
        # The same ops on the same weights in two graphs that Grappler fuses differently:
        # float32 rounding through the network (relative 1e-6 to 1e-5); a different
        # preprocessing or weight would move logits by 1e-2 and more.
        np.testing.assert_allclose(outputs["logits"], eval_logits, rtol=1e-4, atol=1e-5)
        # A model that predicts one class for everything would agree trivially.
        self.assertGreater(np.ptp(eval_logits, axis=0).max(), 0.0)

    def test_outputs_are_consistent_and_never_the_background(self):
        outputs = self.serving_outputs(self.images_bytes[:3])
        self.assertEqual(outputs["classes"].shape, (3, 5))  # the 5 labels, in some order
        self.assertEqual(outputs["classes"].dtype, np.int64)
        self.assertEqual(sorted(outputs["classes"][0]), [1, 2, 3, 4, 5])
        logits = outputs["logits"]
        self.assertEqual(logits.shape, (3, 6))  # the model's outputs, background included
        labels = logits[:, 1:]  # the softmax is over the labels
        softmax = np.exp(labels - labels.max(1, keepdims=True))
        softmax /= softmax.sum(1, keepdims=True)
        # TensorFlow's float32 softmax against NumPy's on the same logits: a few ulps, and
        # TensorFlow's CPU kernels flush denormals (below 1.2e-38) to zero where NumPy keeps
        # them (seen: 3.7e-42 against 0), hence the absolute floor.
        np.testing.assert_allclose(outputs["probabilities"],
                                   -np.sort(-softmax, axis=1)[:, :5], rtol=1e-5, atol=1e-30)
        names = ("background",) + demo_data.CLASS_NAMES
        self.assertEqual([[names[c] for c in row] for row in outputs["classes"]],
                         [[t.decode() for t in row] for row in outputs["label_texts"]])

    def test_both_signatures_agree(self):
        _, eval_images = eval_graph_logits(os.path.join(self.train_dir, "model.ckpt-3"),
                                           self.shards, self.stored_model())
        from_images = self.serve["predict_images"](images=tf.constant(eval_images))
        from_bytes = self.serving_outputs(self.images_bytes)
        # As above: one graph, two signatures, fused differently.
        np.testing.assert_allclose(from_images["logits"].numpy(), from_bytes["logits"],
                                   rtol=1e-4, atol=1e-5)

    def test_png_bmp_and_gif_are_classified(self):
        pixels = tf.io.decode_jpeg(self.images_bytes[0]).numpy()
        outputs = self.serving_outputs([encoded(pixels, "PNG"), encoded(pixels, "BMP"),
                                        encoded(pixels, "GIF")])
        np.testing.assert_allclose(outputs["logits"][0], outputs["logits"][1])  # both lossless
        self.assertTrue(np.all(np.isfinite(outputs["logits"])))

    def test_the_central_crop_is_tensorflows(self):
        for height, width in [(75, 75), (100, 37), (17, 333)]:
            pixels = np.random.default_rng(height).integers(0, 255, (height, width, 3), np.uint8)
            cropped = preprocessing.decode_central_crop(tf.constant(encoded(pixels, "PNG")))
            np.testing.assert_array_equal(cropped.numpy(),
                                          tf.image.central_crop(pixels, 0.875).numpy())

    def test_loads_in_plain_tensorflow_without_project_code(self):
        image_path = os.path.join(testing_utils.temp_dir("plain"), "image.jpg")
        with open(image_path, "wb") as handle:
            handle.write(self.images_bytes[0])
        completed = subprocess.run(
            [sys.executable, "-I", "-c", PLAIN_TENSORFLOW, self.version_dir, image_path],
            capture_output=True, text=True, timeout=240, check=False,
            cwd=testing_utils.temp_dir("plain_cwd"))
        self.assertEqual(completed.returncode, 0, completed.stderr[-2000:])
        top = [line.split() for line in completed.stdout.splitlines() if line.startswith("TOP")]
        expected = self.serving_outputs(self.images_bytes[:1])
        self.assertEqual(int(top[0][1]), expected["classes"][0, 0])
        self.assertEqual(top[0][2], expected["label_texts"][0, 0].decode())

    def test_saved_model_cli_shows_both_signatures(self):
        cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
        if not os.path.exists(cli):
            self.skipTest(f"no saved_model_cli beside {sys.executable}")
        completed = subprocess.run([cli, "show", "--dir", self.version_dir, "--all"],
                                   capture_output=True, text=True, timeout=240, check=False)
        self.assertEqual(completed.returncode, 0, completed.stderr[-2000:])
        self.assertIn("signature_def['serving_default']", completed.stdout)
        self.assertIn("signature_def['predict_images']", completed.stdout)
        self.assertIn("inputs['image_bytes'] tensor_info:", completed.stdout)

    def test_exporting_again_never_overwrites_a_version(self):
        before = os.path.getmtime(os.path.join(self.version_dir, "saved_model.pb"))
        with self.assertRaisesRegex(saved_model.ExportError, "exists already"):
            export(self.train_dir, self.export_dir)
        self.assertEqual(os.path.getmtime(os.path.join(self.version_dir, "saved_model.pb")),
                         before)
        older = export(self.train_dir, self.export_dir,
                       checkpoint_path=os.path.join(self.train_dir, "model.ckpt-2"))
        self.assertEqual(sorted(os.listdir(self.export_dir)), ["2", "3"])
        self.assertEqual(tf_models.saved_model_version(self.export_dir), self.version_dir)
        shutil.rmtree(older)

    def test_bad_sources_are_one_line_and_write_nothing(self):
        target = os.path.join(testing_utils.temp_dir("bad_export"), "out")
        empty_run = testing_utils.temp_dir("no_checkpoint")
        shutil.copy(os.path.join(self.train_dir, SETTINGS_FILE), empty_run)
        a_file = os.path.join(empty_run, SETTINGS_FILE)
        cases = [(testing_utils.temp_dir("no_settings"), target, checkpoint_io.CheckpointError,
                  "has no model_settings.json"),
                 (empty_run, target, checkpoint_io.CheckpointError, "no checkpoint in"),
                 (self.train_dir, a_file, saved_model.ExportError, "is a file")]
        for source, export_dir, kind, message in cases:
            with self.assertRaisesRegex(kind, message):
                export(source, export_dir)
            self.assertFalse(os.path.exists(target))
        with self.assertRaisesRegex(tf_models.ModelSourceError, "neither an export"):
            tf_models.open_model(testing_utils.temp_dir("nothing"), log=lambda line: None)


class CopiedRunExportTest(unittest.TestCase):
    """A copied training directory exports its own weights, not the original's."""

    def test_a_copy_exports_its_own_weights_tensor_by_tensor(self):
        copy = os.path.join(testing_utils.temp_dir("copied_run"), "run")
        shutil.copytree(RUN.train_dir, copy)
        # Its `checkpoint` file as older runs wrote it: absolute paths into the original.
        originals = [os.path.join(RUN.train_dir, f"model.ckpt-{step}") for step in (1, 2, 3)]
        tf1.train.update_checkpoint_state(copy, originals[-1], originals)
        changed = scaled_weights(os.path.join(copy, "model.ckpt-3"), factor=2.0)
        version = export(copy, os.path.join(testing_utils.temp_dir("copy_export"), "models"))
        exported = saved_model_variables(version)
        average = "/ExponentialMovingAverage"
        self.assertTrue(any(name + average in changed for name in exported))
        for name, value in exported.items():  # trainable weights come from their averages
            np.testing.assert_array_equal(value, changed.get(name + average, changed.get(name)),
                                          err_msg=name)
        # Moved, with the original path gone: still its own.
        moved = os.path.join(testing_utils.temp_dir("moved_run"), "run")
        shutil.move(copy, moved)
        self.assertEqual(RunDirectory(moved).newest_usable(log=self.fail),
                         os.path.join(moved, "model.ckpt-3"))

    def test_an_export_to_a_read_only_place_is_one_line_before_any_work(self):
        target = os.path.join(testing_utils.read_only_directory(self), "models")
        with self.assertRaisesRegex(saved_model.ExportError,
                                    f"^cannot write in --export_dir={target} .*Read-only file "
                                    "system.*; pass a directory you can write.$"):
            export(RUN.train_dir, target)


def export(train_dir, export_dir, **options):
    """saved_model.export_training_run of `train_dir` into `export_dir` (commands.ExportSettings
    `options`), quietly."""
    return saved_model.export_training_run(
        commands.ExportSettings(train_dir, export_dir=export_dir, **options),
        log=lambda line: None)


def scaled_weights(prefix, factor):
    """Rewrites the checkpoint at `prefix` with every float tensor times `factor`; returns its
    new {name: value}."""
    reader = tf1.train.NewCheckpointReader(prefix)
    values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    with tf.Graph().as_default():
        variables = [tf1.Variable(value * factor if value.dtype.kind == "f" else value,
                                  name=name) for name, value in values.items()]
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            tf1.train.Saver({v.op.name: v for v in variables}).save(
                session, prefix, write_meta_graph=False, write_state=False)
    return {name: value * factor if value.dtype.kind == "f" else value
            for name, value in values.items()}


def saved_model_variables(version_dir):
    """{variable name: value} of an exported SavedModel's variables."""
    reader = tf1.train.NewCheckpointReader(os.path.join(version_dir, "variables", "variables"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


class ClassifyTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.source = RUN
        cls.folder = testing_utils.temp_dir("images")
        for index, data in enumerate(RUN.images_bytes[:4]):
            with open(os.path.join(cls.folder, f"image{index}.jpg"), "wb") as handle:
                handle.write(data)
        with open(os.path.join(cls.folder, "image1b.jpg"), "w", encoding="utf-8") as handle:
            handle.write("not an image")

    def test_a_bad_image_is_reported_and_the_rest_classified(self):
        files, missing = predictions.image_files([self.folder, "/no/such/file.jpg"])
        self.assertEqual(missing, ["/no/such/file.jpg"])
        predict = tf_models.open_model(self.source.export_dir, log=lambda line: None)
        results = list(predictions.classify_files(predict, files, batch_size=3))
        self.assertEqual([os.path.basename(p.path) for p in results],
                         ["image0.jpg", "image1.jpg", "image1b.jpg", "image2.jpg", "image3.jpg"])
        self.assertIn("not a readable JPEG, PNG, GIF or BMP image", results[2].error)
        expected = RUN.serving_outputs(RUN.images_bytes[:4])
        good = [p for p in results if not p.error]
        self.assertEqual([p.classes[0] for p in good], list(expected["classes"][:, 0]))

    def test_a_training_directory_classifies_like_its_export(self):
        files, _ = predictions.image_files([self.folder])
        files = [path for path in files if "1b" not in path]
        from_export = predictions.classify_files(
            tf_models.open_model(self.source.export_dir, log=lambda line: None), files)
        from_checkpoint = predictions.classify_files(
            tf_models.open_model(self.source.train_dir, log=lambda line: None), files)
        for exported, in_memory in zip(from_export, from_checkpoint):
            self.assertEqual(exported.classes, in_memory.classes)
            # A SavedModel against the same graph in memory: float32 rounding (see above).
            np.testing.assert_allclose(exported.probabilities, in_memory.probabilities,
                                       rtol=1e-4)

    def classify(self, output_json):
        """The classify binary on the test folder with the export; the completed process."""
        return subprocess.run(
            [sys.executable, "-m", "inception.classify", f"--model={self.source.export_dir}",
             f"--output_json={output_json}", self.folder],
            capture_output=True, text=True, timeout=240, check=False,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))

    def test_the_binary_prints_blocks_writes_json_and_exits_1(self):
        output_json = os.path.join(testing_utils.temp_dir("json"), "out.jsonl")
        completed = self.classify(output_json)
        self.assertEqual(completed.returncode, 1, completed.stderr[-2000:])
        self.assertIn("1 of 5 images could not be classified", completed.stderr)
        self.assertIn("image1b.jpg\n  error: not a readable", completed.stdout)
        with open(output_json, encoding="utf-8") as handle:
            lines = [json.loads(line) for line in handle]
        self.assertEqual(len(lines), 5)
        self.assertEqual(len(lines[0]["top_k"]), 5)
        self.assertIn(lines[0]["top_k"][0]["label"], demo_data.CLASS_NAMES)
        self.assertEqual(sorted(entry["label"] for entry in lines[0]["top_k"]),
                         sorted(demo_data.CLASS_NAMES))  # the background is never shown

    def test_an_output_json_that_cannot_be_written_is_one_line_before_the_model_loads(self):
        output_json = os.path.join(testing_utils.temp_dir("json"), "no", "such", "out.jsonl")
        completed = self.classify(output_json)
        self.assertEqual(completed.returncode, 1, completed.stderr[-2000:])
        self.assertEqual(completed.stderr.strip().splitlines()[-1],
                         f"error: cannot write --output_json={output_json} (No such file or "
                         "directory); pass a file in a directory you can write.")
        self.assertNotIn("loading the SavedModel", completed.stdout)


if __name__ == "__main__":
    absltest.main()
