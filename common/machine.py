"""Facts about this machine without TensorFlow: the CPU (/proc/cpuinfo) and the NVIDIA GPUs
(nvidia-smi)."""

import os
import subprocess

CPUINFO = "/proc/cpuinfo"
NVIDIA_SMI_TIMEOUT_SECS = 60


def cpuinfo_value(key, cpuinfo_path=CPUINFO):
    """The value of the first `key : value` line of a cpuinfo file (the first CPU's); None when
    the key is absent or the file cannot be read."""
    try:
        with open(cpuinfo_path, encoding="utf-8") as handle:
            for line in handle:
                name, colon, value = line.partition(":")
                if colon and name.strip() == key:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_flags(cpuinfo_path=CPUINFO):
    """The CPU's flags, e.g. {"avx2", "avx512_bf16", ...}; empty when cpuinfo cannot be read."""
    return set((cpuinfo_value("flags", cpuinfo_path) or "").split())


def cpu_model(cpuinfo_path=CPUINFO):
    """The CPU's model name, e.g. "Intel(R) Xeon(R) ..."; None when cpuinfo does not say."""
    return cpuinfo_value("model name", cpuinfo_path)


def cpu_summary(cpuinfo_path=CPUINFO):
    """The CPU as benchmark results name it: model, its widest vector extensions and the core
    count, e.g. "Intel(R) Xeon(R) ... (amx_bf16, avx512_fp16), 2 cores"."""
    flags = cpu_flags(cpuinfo_path)
    extensions = [flag for flag in ("amx_bf16", "avx512_fp16", "avx512f", "avx2")
                  if flag in flags][:2]
    return (f"{cpu_model(cpuinfo_path) or 'CPU'} ({', '.join(extensions)}), "
            f"{os.cpu_count()} cores")


def nvidia_gpus():
    """[(name, memory)] of the machine's NVIDIA GPUs as nvidia-smi reports them, e.g.
    [("NVIDIA H200", "143771 MiB")]; empty when nvidia-smi is missing, fails or hangs."""
    try:
        completed = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, check=False, timeout=NVIDIA_SMI_TIMEOUT_SECS)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if completed.returncode != 0:  # e.g. no driver: the message is on stdout, not a GPU
        return []
    return [_name_and_memory(line) for line in completed.stdout.splitlines() if line.strip()]


def _name_and_memory(line):
    name, comma, memory = line.rpartition(",")
    return (name.strip(), memory.strip()) if comma else (line.strip(), "")
