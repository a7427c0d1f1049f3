"""Shared by the serving tests: a small trained demo run exported in every format, and running
an entry point as a process with TensorFlow unimportable."""

import os
import subprocess
import sys

from inception.config import commands
from inception.config import settings as settings_lib
from inception.driver import launch
from inception.serving import saved_model
from tests import testing_utils
from tests import tiny_eval

SIZE = testing_utils.SMALL_IMAGE
STEPS = 30  # enough for logits of a sane size: an int8 model of a 3-step one is noise
MODEL_FORMATS = ("tflite", "tflite_int8", "onnx")
# Runs a module as its binary runs (argv: the module, then its arguments), with
# `import tensorflow` failing.
WITHOUT_TENSORFLOW = """
import runpy, sys
sys.modules["tensorflow"] = None
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__")
"""


def trained_export(name, validation_images):
    """(version directory, encoded validation images in the eval order) of a STEPS-step run on
    a tiny demo data set, exported as a SavedModel and in every MODEL_FORMATS."""
    data_dir = testing_utils.tiny_demo_data(train=24, validation=validation_images)
    train_dir = testing_utils.temp_dir(f"{name}_train")
    launch.train(settings_lib.train_settings(
        train_dir=train_dir, data_dir=data_dir, dataset="demo", eval_every_n_steps=0,
        max_steps=STEPS, **testing_utils.tiny_model(), batch_size=4, num_towers=1,
        seed=1),
        log=lambda line: None)
    export_dir = os.path.join(testing_utils.temp_dir(f"{name}_export"), "models")
    version_dir = saved_model.export_training_run(
        commands.ExportSettings(train_dir, export_dir=export_dir,
                                formats=",".join(("saved_model",) + MODEL_FORMATS),
                                calibration_images=20), log=lambda line: None)
    shards = sorted(os.path.join(data_dir, entry) for entry in os.listdir(data_dir)
                    if entry.startswith("validation-"))
    return version_dir, tiny_eval.validation_bytes(shards)


def run_module(module, *arguments, without_tensorflow=False, timeout=300):
    """The completed process of `python -m module arguments` (with `import tensorflow` failing
    when `without_tensorflow`), on this process's import path."""
    start = [sys.executable, "-c", WITHOUT_TENSORFLOW] if without_tensorflow else \
        [sys.executable, "-m"]
    return subprocess.run(start + [module, *arguments], capture_output=True, text=True,
                          timeout=timeout, check=False,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
