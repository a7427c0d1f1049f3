"""Makes tf-slim 1.1.0 (its last release, 2020) work on TensorFlow 2.21.

Import this module before `tf_slim` (every module of ours that uses tf-slim imports
`inception.compat.tf_slim`). Each workaround is a small, idempotent patch: three of a name that
moved in TensorFlow, one of a TensorFlow bug that tf-slim's dropout triggers on GPUs;
tests/compat_test.py shows that each one is needed.
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


def patch_dropout_without_select():
    """slim.dropout -> a multiply by a scaled 0/1 mask instead of TF's `SelectV2(keep, x, 0)`.

    Grappler's layout optimizer cannot permute that scalar 0 when the dropout input is 4-D
    (Inception's Logits/Dropout_1b), logs "layout failed ... SelectV2" and then skips the
    NHWC->NCHW conversion of the whole GPU graph (seen on an H200 with TF 2.21). Same
    semantics: in training each element is kept with probability keep_prob and scaled by
    1 / keep_prob; otherwise the input passes through.
    """
    import tf_slim  # pylint: disable=import-outside-toplevel
    from tf_slim.layers import layers as slim_layers  # pylint: disable=import-outside-toplevel
    if hasattr(slim_layers.dropout, "original"):  # already patched
        return
    mask_dropout = _make_mask_dropout()
    mask_dropout.original = slim_layers.dropout  # tests put it back to show the patch is needed
    for module in (slim_layers, tf_slim.layers, tf_slim):
        module.dropout = mask_dropout


def _make_mask_dropout():
    from tf_slim.layers import utils  # pylint: disable=import-outside-toplevel
    from tf_slim.ops import arg_scope  # pylint: disable=import-outside-toplevel

    @arg_scope.add_arg_scope
    def dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True,
                outputs_collections=None, scope=None, seed=None):
        """tf-slim's dropout (same arguments) built from a mask multiply."""
        with tf.compat.v1.variable_scope(scope, "Dropout", [inputs]) as variable_scope:
            inputs = tf.convert_to_tensor(inputs)

            def drop():
                shape = tf.shape(inputs) if noise_shape is None else noise_shape
                kept = tf.random.uniform(shape, seed=seed) < keep_prob
                return inputs * (tf.cast(kept, inputs.dtype) / tf.cast(keep_prob, inputs.dtype))

            outputs = utils.smart_cond(is_training, drop, lambda: tf.identity(inputs))
            return utils.collect_named_outputs(outputs_collections, variable_scope.name,
                                               outputs)

    return dropout


def apply_all():
    """Applies every workaround; safe to call more than once."""
    patch_ops_tensor()
    patch_legacy_tf_layers()
    patch_control_flow_cond()
    patch_dropout_without_select()


apply_all()

import tf_slim  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
