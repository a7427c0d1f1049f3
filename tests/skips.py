"""Visible skips of tests whose hardware this machine lacks (or an ISA cap hides)."""

from inception.parallel import hardware


def skip_without_cpu_bf16(test):
    """Skips `test`, saying why, where oneDNN may not use this CPU's bf16 instructions: under an
    ISA cap TensorFlow still trusts the CPU's flags and sends bf16 ops to oneDNN, which aborts;
    without bf16 instructions the CPU would only emulate them."""
    if hardware.cpu_supports_bf16():
        return
    test.skipTest(f"ONEDNN_MAX_CPU_ISA={hardware.onednn_isa_cap()} keeps oneDNN from this "
                  "CPU's bf16 instructions" if hardware.cpu_supports_bf16(environ={})
                  else "this CPU has no bf16 instructions")
