"""Each tf-slim workaround in inception/model/slim_compat.py is needed: undo it and tf-slim fails.

Every case runs in a fresh interpreter, because the patches are process-wide and a tf-slim
code path, once loaded, stays loaded.
"""

import subprocess
import sys
import textwrap
import unittest

from absl.testing import absltest

PRELUDE = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
from inception.model import slim_compat
from inception.model.slim_compat import tf_slim as slim
tf1 = tf.compat.v1
"""

UNDO = {
    "none": "",
    "ops_tensor": "from tensorflow.python.framework import ops\ndel ops.Tensor\n",
    "legacy_tf_layers": ("for name in [m for m in sys.modules if m.startswith("
                         "'tf_keras.legacy_tf_layers')]:\n    del sys.modules[name]\n"),
    "control_flow_cond": ("from tensorflow.python.ops import control_flow_ops\n"
                          "del control_flow_ops.cond\n"),
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
                                 r"ImportError)",
                                 unpatched.stderr[-2000:])

    def test_apply_all_is_idempotent(self):
        code = PRELUDE + "slim_compat.apply_all(); slim_compat.apply_all(); print('ok')\n"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=300, check=False)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])


if __name__ == "__main__":
    absltest.main()
