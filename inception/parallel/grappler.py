"""Which of Grappler's graph optimizations a session runs (TensorFlow optimizes each new set of
fetches of a session before its first run: the first step, the first without summaries, each
evaluation, all pay it again)."""


def lean_cpu_rewrites(config):
    """Turns off in `config` the Grappler work that costs CPU towers seconds at each new set of
    fetches (the first step, the first without summaries, each evaluation) and changes nothing
    there: a second pass of every optimizer, the memory optimizer (swaps to the host and
    recomputes, for GPUs short of memory), conditional code motion, implementation selection
    and loop hoisting (this graph has no loops or alternative implementations). On a 2-core
    AMD EPYC, a 6-step run of a tiny 2-tower Inception spent 5.0 s optimizing instead of 11.8 s
    (Grappler's own log), and wrote bit-identical checkpoints. GPU sessions keep TensorFlow's
    defaults until measured there: on a GPU the layout pass and the memory optimizer may earn
    their time. Returns `config`."""
    rewrite = config.graph_options.rewrite_options
    rewrite.meta_optimizer_iterations = rewrite.ONE
    rewrite.memory_optimization = rewrite.NO_MEM_OPT
    rewrite.experimental_conditional_code_motion = rewrite.OFF
    rewrite.implementation_selector = rewrite.OFF
    rewrite.loop_optimization = rewrite.OFF
    return config
