"""Test rules: CPU tests hide the machine's GPUs; GPU tests use them and skip visibly without."""

# tf.keras as the programs have it (common/cli.py's LEGACY_KERAS_VARIABLE), set before a test
# file imports TensorFlow: importing it then skips Keras 3, about 0.6 s of every test process.
LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}

def cpu_test(name, deps = [], env = {}, **kwargs):
    """A py_test on virtual CPU devices. The machine's GPUs are hidden from it (an empty
    CUDA_VISIBLE_DEVICES), so it runs the same on machines with and without GPUs. Its file
    ends with `absltest.main()`, which takes Bazel's `shard_count` shards: a slow file runs as
    several processes side by side. One that imports TensorFlow is at least `medium`: the
    import alone takes 5 to 30 s on a busy 2-core machine, and a `small` test's 60 s then times
    out a test that passed (scoring_test ran its tests in 27 s and timed out at 60). `env` adds
    to the test's environment."""
    native.py_test(
        name = name,
        env = dict(dict({"CUDA_VISIBLE_DEVICES": ""}, **LEGACY_KERAS), **env),
        deps = deps,
        **kwargs
    )

def gpu_test(name, deps = [], tags = [], **kwargs):
    """A py_test that runs on the machine's GPUs and reports every test skipped where there is
    none. Exclusive: it takes GPU memory that a parallel test could want."""
    native.py_test(
        name = name,
        deps = deps,
        env = LEGACY_KERAS,
        tags = tags + ["gpu", "exclusive"],
        **kwargs
    )
