"""Makes tf-slim 1.1.0 (its last release, 2020) work on TensorFlow 2.21.

Import this module before using `tf_slim` (every module of ours that uses tf-slim imports
`inception.model.slim_compat.tf_slim`). Each workaround is a small, idempotent patch of a name
that moved in TensorFlow; tests/model/slim_compat_test.py shows that each one is needed. (How
the model's dropout is built is a model choice: network.py.)
"""

import importlib
import sys

import tensorflow as tf
from tensorflow.python.framework import ops
from tensorflow.python.ops import control_flow_ops


def patch_ops_tensor():
    """`tensorflow.python.framework.ops.Tensor` is gone; tf-slim uses it in isinstance checks."""
    if not hasattr(ops, "Tensor"):
        ops.Tensor = tf.Tensor


def patch_legacy_tf_layers():
    """TF's `tensorflow.python.layers.normalization` lazy-imports `tf_keras.legacy_tf_layers`.

    tf-keras 2.21 keeps those modules under `tf_keras.src.legacy_tf_layers`; slim.batch_norm's
    non-fused path (the one inception_v3_arg_scope selects) fails without the old name.
    """
    old_name, new_name = "tf_keras.legacy_tf_layers", "tf_keras.src.legacy_tf_layers"
    try:
        importlib.import_module(old_name)
        return
    except ImportError:
        pass
    package = importlib.import_module(new_name)
    sys.modules[old_name] = package
    for submodule in ("base", "convolutional", "core", "normalization", "pooling"):
        module = importlib.import_module(f"{new_name}.{submodule}")
        sys.modules[f"{old_name}.{submodule}"] = module


def patch_control_flow_cond():
    """`control_flow_ops.cond` moved to `tensorflow.python.ops.cond`.

    tf-slim's `utils.smart_cond` calls it when `is_training` is a tensor (batch norm, dropout).
    """
    if not hasattr(control_flow_ops, "cond"):
        from tensorflow.python.ops import cond as cond_module  # pylint: disable=import-outside-toplevel
        control_flow_ops.cond = cond_module.cond


def apply_all():
    """Applies every workaround; safe to call more than once."""
    patch_ops_tensor()
    patch_legacy_tf_layers()
    patch_control_flow_cond()


apply_all()

import tf_slim  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
