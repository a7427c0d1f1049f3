"""`bazel run //bench:throughput -- --output_json=PATH`: our trainer against Keras, side by side.

Runs, one after the other on this machine, each in its own process: the matmul peak, our
training step with N towers and with 1 tower, keras.applications.InceptionV3 with `fit`, and
the input pipeline alone (per core and with every core); where the machine has a faster
precision (bf16 CPUs, GPUs) also the peak, our step and Keras's `fit` in that precision. Same
image size, global batch and synthetic input for every training measurement. Writes the JSON
report and a PNG plot of images/sec by configuration. Run by hand; results go in the README.
"""

import functools
import json
import os
import platform
import subprocess
import sys
import tempfile

from inception import cli

cli.quiet_tensorflow()

from absl import app  # noqa: E402  pylint: disable=wrong-import-position
from absl import flags  # noqa: E402  pylint: disable=wrong-import-position

from inception import devices  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_string("output_json", "bench_results.json", "Where to write the report.")
flags.DEFINE_string("output_plot", "", "PNG plot path (default: the report's path, .png).")
flags.DEFINE_integer("image_size", 299, "Input height and width.")
flags.DEFINE_integer("batch_size", 16, "Global batch size of every training measurement.")
flags.DEFINE_integer("towers", 2, "Towers of the multi-tower measurement.")
flags.DEFINE_float("depth_multiplier", 1.0, "Our model's depth multiplier (Keras has none; "
                   "keep 1.0 for a fair comparison).")
flags.DEFINE_integer("warmup", 3, "Steps discarded before timing.")
flags.DEFINE_integer("steps", 3, "Steps per timed round.")
flags.DEFINE_integer("repeats", 5, "Timed rounds; the median is reported.")
flags.DEFINE_integer("pipeline_images", 256, "Distinct JPEGs the pipeline measurement cycles.")
flags.DEFINE_integer("timeout_secs", 1800, "Give up on one measurement after this long.")
flags.DEFINE_list("skip", [], "Measurements to leave out (matmul_peak, matmul_peak_bf16, "
                  "matmul_peak_fp16, ours, ours_1_tower, ours_bf16, ours_fp16, "
                  "ours_variables_on_gpu, ours_xla, keras, keras_bf16, keras_fp16, "
                  "pipeline_1_thread, pipeline); their keys are then null. The bf16 ones run "
                  "only on CPU-only machines whose CPU has bf16 instructions, the fp16 ones "
                  "and ours_variables_on_gpu only where there is a GPU.")
flags.DEFINE_integer("virtual_gpu_memory_mb", 20000, "Memory of each virtual GPU when there "
                     "are more --towers than GPUs (e.g. 2 towers on 1 GPU).")
flags.DEFINE_enum("keras_jit_compile", "auto", ["auto", "true", "false"],
                  "Keras's jit_compile (auto: XLA on GPUs, as Keras users get it).")
flags.DEFINE_bool("keep_going", False, "Record a failed measurement as null (its error goes "
                  "in the report's `errors`) and go on with the others.")


def gpu_names():
    """Names of the machine's NVIDIA GPUs (empty without nvidia-smi)."""
    try:
        completed = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                                    "--format=csv,noheader"], capture_output=True, text=True,
                                   check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in completed.stdout.splitlines() if line.strip()]


@functools.lru_cache(maxsize=None)
def machine_details():
    """CPU model, core count, GPUs, Python and TensorFlow versions."""
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = subprocess.run([sys.executable, "-c", "import tensorflow as tf, keras; "
                               "print(tf.__version__, keras.__version__)"],
                              capture_output=True, text=True, check=False,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout.split()
    return {"cpu": model, "cores": os.cpu_count(), "gpus": gpu_names(),
            "python": platform.python_version(),
            "tensorflow": versions[0] if versions else "?",
            "keras": versions[1] if len(versions) > 1 else "?"}


def measure(kind, settings, log):
    """Runs bench.measure KIND in a fresh process; returns its result dict."""
    log(f"measuring {kind} {json.dumps({k: v for k, v in settings.items() if k != 'work_dir'})}")
    command = [sys.executable, "-m", "bench.measure", kind, json.dumps(settings)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False,
                               timeout=FLAGS.timeout_secs)
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            log(f"  -> {summarize(result)}")
            return result
    raise RuntimeError(f"measurement {kind} failed (exit {completed.returncode}): "
                       + last_error(completed.stderr))


def last_error(stderr):
    """A failed measurement's exception line and the two lines after it (TensorFlow puts the
    root cause there and appends the failing op's creation stack, so the last line of stderr
    is not the error); else the last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    starts = [index for index, line in enumerate(lines)
              if line.split(":", 1)[0].endswith(("Error", "Exception"))]
    text = " ".join(lines[starts[0]:starts[0] + 3]) if starts else (lines or ["no output"])[-1]
    return text[:600]


def summarize(result):
    """One short line for the log."""
    if "gflops" in result:
        return f"{result['gflops']:.1f} GFLOP/s"
    return f"{result['images_per_sec']:.2f} images/sec, peak {result['peak_memory_mb']:.0f} MB"


def measure_or_record(kind, settings, log, errors, name):
    """measure(), or with --keep_going None and the error kept in `errors[name]`."""
    try:
        return measure(kind, settings, log)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        if not FLAGS.keep_going:
            raise
        log(f"  -> FAILED: {error}")
        errors[name] = str(error)
        return None


BF16_CPU_ONLY = ("matmul_peak_bf16", "ours_bf16", "keras_bf16")
GPU_ONLY = ("matmul_peak_fp16", "ours_fp16", "keras_fp16", "ours_variables_on_gpu")


def run_all(log, save_partial=lambda report: None):
    """Every measurement of the report, in one run; returns the report dict.

    After each measurement `save_partial` gets the report so far (`complete` false, pending
    measurements null), so a run stopped early still leaves what it measured.
    """
    common = {"image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size,
              "warmup": FLAGS.warmup, "steps": FLAGS.steps, "repeats": FLAGS.repeats,
              "work_dir": tempfile.mkdtemp(prefix="inception_bench_")}
    plan = measurement_plan()
    skip = set(FLAGS.skip)
    has_gpu = bool(machine_details()["gpus"])
    if has_gpu or not devices.cpu_supports_bf16():
        skip.update(BF16_CPU_ONLY)
    if not has_gpu:
        skip.update(GPU_ONLY)
    errors = {}
    results = {name: None for name in plan}
    for name, (kind, extra) in plan.items():
        if name in skip:
            continue
        results[name] = measure_or_record(kind, {**common, **extra}, log, errors, name)
        save_partial({**build_report(results), "errors": errors, "complete": False})
    return {**build_report(results), "errors": errors, "complete": True}


def measurement_plan():
    """{name: (bench.measure kind, its settings)} of every measurement, in running order."""
    ours = {"towers": FLAGS.towers, "depth_multiplier": FLAGS.depth_multiplier,
            "virtual_gpu_memory_mb": FLAGS.virtual_gpu_memory_mb}
    keras = {"jit_compile": {"auto": "auto", "true": True,
                             "false": False}[FLAGS.keras_jit_compile]}
    return {
        "matmul_peak": ("matmul_peak", {}),
        "matmul_peak_bf16": ("matmul_peak", {"precision": "bf16"}),
        "matmul_peak_fp16": ("matmul_peak", {"precision": "fp16"}),
        "ours": ("ours", ours),
        "ours_1_tower": ("ours", {**ours, "towers": 1}),
        "ours_bf16": ("ours", {**ours, "precision": "bf16"}),
        "ours_fp16": ("ours", {**ours, "precision": "fp16"}),
        # The original keeps variables on the CPU; on one GPU that costs a weight copy and a
        # host-side update per step. Measured side by side to decide the default.
        "ours_variables_on_gpu": ("ours", {**ours, "variable_device": "/gpu:0"}),
        "ours_xla": ("ours", {**ours, "xla": True}),
        "keras": ("keras", keras),
        # Keras with its own mixed-precision policy: the same-precision comparison.
        "keras_bf16": ("keras", {**keras, "precision": "bf16"}),
        "keras_fp16": ("keras", {**keras, "precision": "fp16"}),
        "pipeline_1_thread": ("pipeline", {"threads": 1,
                                           "pipeline_images": FLAGS.pipeline_images}),
        "pipeline": ("pipeline", {"threads": 0, "pipeline_images": FLAGS.pipeline_images}),
    }


def write_json(report, path):
    """Writes `report` to `path` atomically (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = path + ".partial"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
    os.replace(temporary, path)


def _ratio(numerator, denominator):
    return numerator / denominator if numerator and denominator else None


def build_report(results):
    """The report's keys from the raw measurements (None where a measurement was skipped)."""
    def rate(name):
        return results[name]["images_per_sec"] if results.get(name) else None

    def peak(name):
        return results[name]["gflops"] if results.get(name) else None

    ours = rate("ours")
    flops = results["ours"]["train_flops_per_image"] if results.get("ours") else None

    def mfu(images_per_sec, peak_gflops):
        return _ratio(images_per_sec * flops / 1e9 if images_per_sec and flops else None,
                      peak_gflops)
    report = {
        "ours_images_per_sec": ours,
        "ours_1_tower_images_per_sec": rate("ours_1_tower"),
        "keras_images_per_sec": rate("keras"),
        "speedup_vs_keras": _ratio(ours, rate("keras")),
        "ours_bf16_images_per_sec": rate("ours_bf16"),
        "speedup_vs_keras_bf16": _ratio(rate("ours_bf16"), rate("keras")),
        "keras_bf16_images_per_sec": rate("keras_bf16"),
        "speedup_bf16_vs_keras_bf16": _ratio(rate("ours_bf16"), rate("keras_bf16")),
        "ours_fp16_images_per_sec": rate("ours_fp16"),
        "speedup_vs_keras_fp16": _ratio(rate("ours_fp16"), rate("keras")),
        "keras_fp16_images_per_sec": rate("keras_fp16"),
        "speedup_fp16_vs_keras_fp16": _ratio(rate("ours_fp16"), rate("keras_fp16")),
        "ours_variables_on_gpu_images_per_sec": rate("ours_variables_on_gpu"),
        "ours_xla_images_per_sec": rate("ours_xla"),
        "train_gflops_per_image": flops / 1e9 if flops else None,
        "matmul_peak_gflops": peak("matmul_peak"),
        "matmul_peak_device": results["matmul_peak"]["device"] if results.get("matmul_peak")
        else None,
        "mfu": mfu(ours, peak("matmul_peak")),
        "matmul_peak_bf16_gflops": peak("matmul_peak_bf16"),
        "mfu_bf16": mfu(rate("ours_bf16"), peak("matmul_peak_bf16")),
        "matmul_peak_fp16_gflops": peak("matmul_peak_fp16"),
        "mfu_fp16": mfu(rate("ours_fp16"), peak("matmul_peak_fp16")),
        "tower_overhead": (1.0 - ours / rate("ours_1_tower")) if ours and rate("ours_1_tower")
        else None,
        "pipeline_images_per_sec": rate("pipeline"),
        "pipeline_images_per_sec_per_core": rate("pipeline_1_thread"),
        "pipeline_headroom": _ratio(rate("pipeline"), ours),
        "peak_memory_mb": {name: result["peak_memory_mb"] for name, result in results.items()
                           if result},
        "gpu_peak_memory_mb": {name: result["gpu_peak_memory_mb"]
                               for name, result in results.items()
                               if result and "gpu_peak_memory_mb" in result},
        "placement": results["ours"]["placement"] if results.get("ours") else None,
        "settings": {"image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size,
                     "towers": FLAGS.towers, "depth_multiplier": FLAGS.depth_multiplier,
                     "warmup_steps_discarded": FLAGS.warmup, "steps_per_round": FLAGS.steps,
                     "rounds": FLAGS.repeats, "statistic": "median"},
        "rounds": {name: result.get("rounds") for name, result in results.items() if result},
        "machine": dict(machine_details()),
    }
    return report


SUMMARY_KEYS = ("ours_images_per_sec", "keras_images_per_sec", "speedup_vs_keras", "mfu",
                "ours_bf16_images_per_sec", "keras_bf16_images_per_sec", "speedup_vs_keras_bf16",
                "speedup_bf16_vs_keras_bf16", "mfu_bf16", "ours_fp16_images_per_sec",
                "keras_fp16_images_per_sec", "speedup_vs_keras_fp16",
                "speedup_fp16_vs_keras_fp16", "mfu_fp16", "ours_variables_on_gpu_images_per_sec",
                "ours_xla_images_per_sec", "tower_overhead", "pipeline_headroom")


def write_plot(report, path):
    """A bar chart of images/sec by configuration."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    bars = [(f"ours, {report['settings']['towers']} towers", report["ours_images_per_sec"],
             "#1f77b4"),
            ("ours, 1 tower", report["ours_1_tower_images_per_sec"], "#6baed6"),
            ("ours, bf16", report["ours_bf16_images_per_sec"], "#08306b"),
            ("ours, fp16", report["ours_fp16_images_per_sec"], "#08306b"),
            ("ours, variables on GPU", report["ours_variables_on_gpu_images_per_sec"],
             "#6baed6"),
            ("ours, XLA", report["ours_xla_images_per_sec"], "#6baed6"),
            ("Keras fit", report["keras_images_per_sec"], "#ff7f0e"),
            ("Keras fit, mixed_bfloat16", report["keras_bf16_images_per_sec"], "#a63603"),
            ("Keras fit, mixed_float16", report["keras_fp16_images_per_sec"], "#a63603"),
            ("input pipeline", report["pipeline_images_per_sec"], "#2ca02c")]
    bars = [(name, value, colour) for name, value, colour in bars if value]
    figure, axes = plt.subplots(figsize=(7, 3.5))
    axes.barh([name for name, _, _ in bars], [value for _, value, _ in bars],
              color=[colour for _, _, colour in bars])
    axes.set_xscale("log")
    axes.set_xlabel("images/sec (log scale)")
    settings = report["settings"]
    where = (report["machine"]["gpus"][0].split(",")[0] if report["machine"]["gpus"]
             else f"{report['machine']['cores']} cores")
    axes.set_title(f"Inception v3, {settings['image_size']} px, batch {settings['batch_size']}, "
                   f"{where}")
    for index, (_, value, _) in enumerate(bars):
        axes.text(value, index, f" {value:.1f}", va="center")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}")
    for name in ("warmup", "steps", "repeats", "batch_size", "towers"):
        if FLAGS[name].value < 1:
            cli.fail(f"--{name}={FLAGS[name].value} must be at least 1.")
    unknown = sorted(set(FLAGS.skip) - set(measurement_plan()))
    if unknown:
        cli.fail(f"--skip={','.join(unknown)}: no such measurement; use some of "
                 f"{', '.join(measurement_plan())}.")
    output = cli.user_path(FLAGS.output_json)
    plot = cli.user_path(FLAGS.output_plot) or os.path.splitext(output)[0] + ".png"
    saved = []

    def save_partial(partial):
        write_json(partial, output)
        saved.append(output)

    try:
        report = run_all(cli.log, save_partial)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        cli.fail(f"{error} (the measurements before it are in {output})" if saved else error)
    write_json(report, output)
    write_plot(report, plot)
    for key in SUMMARY_KEYS:
        value = report[key]
        cli.log(f"{key:>36}: " + ("skipped" if value is None else f"{value:.3f}"))
    for name, error in report["errors"].items():
        cli.log(f"{name:>36}: FAILED ({error})")
    cli.log(f"report: {output}  plot: {plot}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
