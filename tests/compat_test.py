"""Each tf-slim workaround in inception/compat.py is needed: undo it and tf-slim fails.

Every case runs in a fresh interpreter, because the patches are process-wide and a tf-slim
code path, once loaded, stays loaded.
"""

import subprocess
import sys
import textwrap
import unittest

from tests import sharding

PRELUDE = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
from inception import compat
from inception.compat import tf_slim as slim
tf1 = tf.compat.v1
"""

UNDO = {
    "none": "",
    "ops_tensor": "from tensorflow.python.framework import ops\ndel ops.Tensor\n",
    "legacy_tf_layers": ("for name in [m for m in sys.modules if m.startswith("
                         "'tf_keras.legacy_tf_layers')]:\n    del sys.modules[name]\n"),
    "control_flow_cond": ("from tensorflow.python.ops import control_flow_ops\n"
                          "del control_flow_ops.cond\n"),
    "dropout_without_select": ("layers = sys.modules['tf_slim.layers.layers']\n"
                               "layers.dropout = slim.dropout = layers.dropout.original\n"),
}

EXERCISE = {
    # layers.utils.constant_value checks isinstance(value, ops.Tensor).
    "ops_tensor": """
with tf.Graph().as_default():
    from tf_slim.layers import utils
    print(utils.constant_value(tf.constant(True)))
""",
    # slim.batch_norm with UPDATE_OPS on a 4-D input takes the non-fused path.
    "legacy_tf_layers": """
with tf.Graph().as_default():
    out = slim.batch_norm(tf.zeros([2, 4, 4, 3]), is_training=True)
    print(out.shape)
""",
    # A tensor is_training in the fused batch norm goes through utils.smart_cond ->
    # control_flow_ops.cond.
    # Inception's Logits/Dropout_1b on a 4-D tensor: TF's dropout builds SelectV2(keep, x, 0),
    # which makes Grappler's GPU layout optimizer give up on the whole graph.
    "dropout_without_select": """
from tf_slim.nets import inception_v3
with tf.Graph().as_default() as graph:
    with slim.arg_scope(inception_v3.inception_v3_arg_scope()):
        inception_v3.inception_v3(tf.zeros([2, 75, 75, 3]), num_classes=5,
                                  depth_multiplier=0.1, create_aux_logits=False)
    selects = [op.name for op in graph.get_operations() if op.type == "SelectV2"]
    assert not selects, f"AssertionError: dropout builds {selects}"
    assert graph.get_operation_by_name("InceptionV3/Logits/Dropout_1b/mul")
""",
    "control_flow_cond": """
with tf.Graph().as_default():
    flag = tf1.placeholder(tf.bool, [])
    out = slim.batch_norm(tf.zeros([2, 4, 4, 3]), is_training=flag, fused=True,
                          updates_collections=None)
    print(out.shape)
""",
}


def run_case(undo, exercise):
    code = PRELUDE + UNDO[undo] + textwrap.dedent(EXERCISE[exercise])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=None, check=False)


class CompatTest(unittest.TestCase):

    def test_each_workaround_is_needed(self):
        for name in EXERCISE:
            with self.subTest(workaround=name):
                patched = run_case("none", name)
                self.assertEqual(patched.returncode, 0, patched.stderr[-2000:])
                unpatched = run_case(name, name)
                self.assertNotEqual(unpatched.returncode, 0,
                                    f"{name}: tf-slim worked without the workaround")
                self.assertRegex(unpatched.stderr, r"(AttributeError|ModuleNotFoundError|"
                                 r"ImportError|AssertionError: dropout builds)",
                                 unpatched.stderr[-2000:])

    def test_mask_dropout_keeps_and_scales_like_dropout(self):
        code = PRELUDE + textwrap.dedent("""
            import numpy as np
            with tf.Graph().as_default():
                x = tf.constant(np.random.RandomState(0).normal(size=(20000, 1, 1, 10)),
                                tf.float32)
                train = slim.dropout(x, keep_prob=0.8, seed=1)
                rows = slim.dropout(x, keep_prob=0.8, noise_shape=[20000, 1, 1, 1], seed=2)
                evaluate = slim.dropout(x, keep_prob=0.8, is_training=False)
                grad = tf.gradients(tf.reduce_sum(train), x)[0]
                with tf1.Session() as session:
                    x_, t, r, e, g = session.run([x, train, rows, evaluate, grad])
            kept = t != 0
            assert abs(kept.mean() - 0.8) < 0.01, kept.mean()
            np.testing.assert_allclose(t[kept], x_[kept] / 0.8, rtol=1e-6)
            np.testing.assert_allclose(g, kept / 0.8, rtol=1e-6)
            row_kept = (r != 0).any(axis=(1, 2, 3))
            np.testing.assert_allclose(r[row_kept], x_[row_kept] / 0.8, rtol=1e-6)
            assert (r[~row_kept] == 0).all() and abs(row_kept.mean() - 0.8) < 0.02
            np.testing.assert_array_equal(e, x_)
            print("ok")
        """)
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=300, check=False)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("ok", result.stdout)

    def test_apply_all_is_idempotent(self):
        code = PRELUDE + "compat.apply_all(); compat.apply_all(); print('ok')\n"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=300, check=False)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])


if __name__ == "__main__":
    sharding.main()
