"""Test rules: CPU tests hide the machine's GPUs; GPU tests use them and skip visibly without."""

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
        env = dict({"CUDA_VISIBLE_DEVICES": ""}, **env),
        deps = deps,
        **kwargs
    )

def gpu_test(name, deps = [], tags = [], **kwargs):
    """A py_test that runs on the machine's GPUs and reports every test skipped where there is
    none. Exclusive: it takes GPU memory that a parallel test could want."""
    native.py_test(
        name = name,
        deps = deps,
        tags = tags + ["gpu", "exclusive"],
        **kwargs
    )
