"""`bazel run //bench:throughput -- --output_json=PATH`: our trainer and its peers, side by side.

Runs, one after the other on this machine, each in its own process: the matmul peak, our
training step (with N towers and with 1 tower; on GPUs also two towers on each GPU split into
virtual GPUs, the variables on the other device, and the inputs not staged),
keras.applications.InceptionV3 with `fit`, and the input pipeline alone (per core and with
every core); in each faster precision the machine has (bf16 on CPUs with bf16 instructions and
on GPUs of compute capability 8.0+, fp16 on GPUs) also the peak, our step and Keras's `fit` in
that precision; and PyTorch's torchvision inception_v3 in bf16 where torch can be imported.
Same image size, global batch and synthetic input for every training measurement. Writes the
JSON report and a PNG plot of images/sec by configuration. Run by hand; results go in the
README.
"""

import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from common import cli
from common import machine
from inception.driver import startup

startup.quiet_tensorflow()

from absl import app  # noqa: E402  pylint: disable=wrong-import-position
from absl import flags  # noqa: E402  pylint: disable=wrong-import-position

from bench import report  # noqa: E402  pylint: disable=wrong-import-position
from inception.config import recipe  # noqa: E402  pylint: disable=wrong-import-position
from inception.parallel import devices  # noqa: E402  pylint: disable=wrong-import-position
from inception.parallel import hardware  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_string("output_json", "bench_results.json", "Where to write the report.")
flags.DEFINE_string("output_plot", "", "PNG plot path (default: the report's path, .png).")
flags.DEFINE_enum("model", recipe.DEFAULT_NETWORK, sorted(report.KERAS_MODELS), "Our network "
                  "(training's --model) and its keras.applications counterpart.")
flags.DEFINE_integer("image_size", 299, "Input height and width.")
flags.DEFINE_integer("batch_size", 16, "Global batch size of every training measurement.")
flags.DEFINE_integer("towers", None, "Towers of our measurements (default: one per GPU, or 2 "
                     "virtual CPU devices without GPUs).")
flags.DEFINE_float("depth_multiplier", 1.0, "Our model's depth multiplier (Keras has none; "
                   "keep 1.0 for a fair comparison).")
flags.DEFINE_integer("warmup", 3, "Steps discarded before timing.")
flags.DEFINE_integer("steps", 3, "Steps per timed round.")
flags.DEFINE_integer("repeats", 5, "Timed rounds; the median is reported.")
flags.DEFINE_integer("pipeline_images", 256, "Distinct JPEGs the pipeline measurement cycles.")
flags.DEFINE_integer("timeout_secs", 1800, "Give up on one measurement after this long.")
flags.DEFINE_list("skip", [], "Measurements to leave out (an unknown name is refused with "
                  "the list of names); their keys are then null. The bf16 "
                  "ones run only where bf16 is fast (CPUs with bf16 instructions, GPUs of compute "
                  "capability 8.0+), the fp16 ones and the GPU variants only where there is a "
                  "GPU, torch_bf16 only where torch can be imported.")
flags.DEFINE_integer("virtual_gpu_memory_mb", 0, "Memory of each virtual GPU when a GPU is "
                     "split (ours_split_gpu, or more --towers than GPUs); 0: 45% of the GPU's "
                     "memory.")
flags.DEFINE_float("deadline_secs", 0, "Start no measurement after this many seconds (0: no "
                   "limit); those left are null and named in the report's `not_measured`.")
flags.DEFINE_enum("overlap", "auto", ["auto", "on", "off"], "Start each measurement's process "
                  "(imports, graph building) while the one before runs, their timed parts kept "
                  "apart by a lock (auto: on GPU machines; on a CPU the set-up would slow the "
                  "timed CPU work beside it).")
flags.DEFINE_string("profile_dir", "", "Also trace one step of `ours` and write its Chrome "
                    "trace (timeline) here; the report's `profile` says where the time went.")
flags.DEFINE_enum("keras_jit_compile", "auto", ["auto", "true", "false"],
                  "Keras's jit_compile (auto: XLA on GPUs, as Keras users get it).")
flags.DEFINE_bool("keep_going", False, "Record a failed measurement as null (its error goes "
                  "in the report's `errors`) and go on with the others.")


def gpu_names():
    """The machine's NVIDIA GPUs as `name, memory` lines, e.g. "NVIDIA H200, 143771 MiB"
    (empty without nvidia-smi)."""
    return [f"{name}, {memory}" if memory else name for name, memory in machine.nvidia_gpus()]


@functools.lru_cache(maxsize=None)
def machine_details():
    """CPU model, core count, GPUs, Python and TensorFlow versions."""
    model = machine.cpu_model() or platform.processor() or "unknown"
    versions = subprocess.run([sys.executable, "-c", "import tensorflow as tf, keras; "
                               "print(tf.__version__, keras.__version__)"],
                              capture_output=True, text=True, check=False,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout.split()
    return {"cpu": model, "cores": os.cpu_count(), "gpus": gpu_names(),
            "python": platform.python_version(),
            "tensorflow": versions[0] if versions else "?",
            "keras": versions[1] if len(versions) > 1 else "?"}


MODULES = {"torch": "bench.torch_peer"}  # kinds measured outside bench.measure


class Measurement:
    """One measurement in its own process: bench.measure KIND, or a peer's module."""

    def __init__(self, name, kind, settings, log):
        self.name, self.kind, self.log = name, kind, log
        log(f"measuring {name}: {kind} "
            f"{json.dumps({k: v for k, v in settings.items() if k not in LOCAL_SETTINGS})}")
        module = MODULES.get(kind, "bench.measure")
        command = [sys.executable, "-m", module] + ([] if kind in MODULES else [kind])
        command.append(json.dumps(settings))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        self.output = tempfile.TemporaryFile(mode="w+")  # pylint: disable=consider-using-with
        self.errors = tempfile.TemporaryFile(mode="w+")  # pylint: disable=consider-using-with
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            command, stdout=self.output, stderr=self.errors, env=env, text=True)
        self.started = time.monotonic()

    def stop(self):
        """Ends the process if it still runs (a failed run leaves nothing behind)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def result(self):
        """Waits for the process; returns its result dict (with `skipped` instead of numbers
        when a peer cannot run here). Raises RuntimeError or subprocess.TimeoutExpired."""
        try:
            self.process.wait(timeout=max(1.0, FLAGS.timeout_secs
                                          - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self.output.seek(0)
        self.errors.seek(0)
        stdout, stderr = self.output.read(), self.errors.read()
        for line in stdout.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
                self.log(f"  {self.name} -> {summarize(result)}")
                return result
        raise RuntimeError(f"measurement {self.kind} failed (exit {self.process.returncode}): "
                           + last_error(stderr))


MODULES = {"torch": "bench.torch_peer"}  # kinds measured outside bench.measure
LOCAL_SETTINGS = ("work_dir", "device_lock")  # not worth a log line


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
    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    if "gflops" in result:
        return f"{result['gflops']:.1f} GFLOP/s"
    return f"{result['images_per_sec']:.2f} images/sec, peak {result['peak_memory_mb']:.0f} MB"


def result_or_record(measurement, errors):
    """measurement.result(), or with --keep_going None and the error kept in `errors`."""
    try:
        return measurement.result()
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        if not FLAGS.keep_going:
            raise
        measurement.log(f"  {measurement.name} -> FAILED: {error}")
        errors[measurement.name] = str(error)
        return None


def machine_capabilities():
    """What this machine can measure: {'gpus': count, 'bf16': bool, 'fp16': bool}. bf16 where
    it is fast (every GPU of compute capability 8.0+, or a CPU with bf16 instructions on a
    machine without GPUs); fp16 on GPUs."""
    gpus = hardware.gpu_infos()
    bf16 = all(gpu.has_bf16 for gpu in gpus) if gpus else hardware.cpu_supports_bf16()
    return {"gpus": len(gpus), "bf16": bf16, "fp16": bool(gpus)}


def applicable(plan, capabilities):
    """The names of `plan` this machine can measure, with why the others are left out."""
    gpus = capabilities["gpus"]
    default = "the default here, measured as ours"
    needs = {"bf16": (capabilities["bf16"], "no fast bf16 here"),
             "fp16": (capabilities["fp16"], "fp16 is for GPUs"),
             "gpu": (gpus > 0, "GPU only"),
             # The variables' default device is the GPU on one GPU, the CPU on several: the
             # other one is measured side by side.
             "one_gpu": (gpus == 1, default if gpus else "GPU only"),
             "several_gpus": (gpus > 1, default if gpus == 1 else "GPU only"),
             "multi_tower": (plan["ours"][1]["towers"] > 1, "ours has one tower")}
    left_out = {}
    for name, (_, settings) in plan.items():
        for need in settings.pop("needs", ()):
            met, reason = needs[need]
            if not met:
                left_out[name] = reason
    return left_out


def run_all(log, save_partial=lambda report: None):
    """Every measurement of the report, in one run; returns the report dict.

    After each measurement `save_partial` gets the report so far (`complete` false, pending
    measurements null), so a run stopped early still leaves what it measured. On GPU machines
    the next measurement's process starts (imports, graph building) while the current one
    runs; bench.device_lock keeps their timed parts apart.
    """
    started = time.monotonic()
    capabilities = machine_capabilities()
    work_dir = tempfile.mkdtemp(prefix="inception_bench_")
    common = {"model": FLAGS.model, "image_size": FLAGS.image_size,
              "batch_size": FLAGS.batch_size,
              "warmup": FLAGS.warmup, "steps": FLAGS.steps, "repeats": FLAGS.repeats,
              "work_dir": work_dir}
    if FLAGS.overlap == "on" or (FLAGS.overlap == "auto" and capabilities["gpus"]):
        common["device_lock"] = os.path.join(work_dir, "device.lock")
    plan = measurement_plan(capabilities)
    notes = applicable(plan, capabilities)
    notes.update({name: "--skip" for name in FLAGS.skip})
    errors, not_measured = {}, []
    results = {name: None for name in plan}

    def collect(measurement):
        result = result_or_record(measurement, errors)
        if result and "skipped" in result:
            notes[measurement.name], result = result["skipped"], None
        results[measurement.name] = result
        save_partial({**build_report(results, capabilities), "errors": errors, "notes": notes,
                      "not_measured": not_measured, "complete": False})

    waiting, started_ones = None, []  # waiting: runs while the next one is set up
    try:
        for name, (kind, extra) in plan.items():
            if name in notes:
                continue
            if FLAGS.deadline_secs and time.monotonic() - started > FLAGS.deadline_secs:
                not_measured.append(name)
                continue
            measurement = Measurement(name, kind, {**common, **extra}, log)
            started_ones.append(measurement)
            if waiting is not None:
                collect(waiting)
            waiting = measurement if "device_lock" in common else None
            if waiting is None:
                collect(measurement)
        if waiting is not None:
            collect(waiting)
    finally:
        for measurement in started_ones:
            measurement.stop()
    return {**build_report(results, capabilities), "errors": errors, "notes": notes,
            "not_measured": not_measured, "complete": not not_measured}


def split_gpu_memory_mb():
    """Memory of each of two virtual GPUs per GPU: --virtual_gpu_memory_mb, else 45% of the
    first GPU's memory (nvidia-smi), else 20000."""
    if FLAGS.virtual_gpu_memory_mb:
        return FLAGS.virtual_gpu_memory_mb
    for _, memory in machine.nvidia_gpus():
        total = memory.split()[0] if memory else ""
        if total.isdigit():
            return int(int(total) * 0.45)
    return 20000


def measurement_plan(capabilities=None):
    """{name: (kind, its settings)} of every measurement, in running order (most wanted first,
    for runs with a deadline). A settings key `needs` lists what the machine must have."""
    gpus = (capabilities or {}).get("gpus", 0)
    towers = FLAGS.towers or (gpus or devices.DEFAULT_CPU_TOWERS)
    ours = {"towers": towers, "depth_multiplier": FLAGS.depth_multiplier,
            "virtual_gpu_memory_mb": split_gpu_memory_mb() if towers > max(gpus, 1) else 0}
    if FLAGS.profile_dir:
        ours["profile_dir"] = cli.user_path(FLAGS.profile_dir)
    keras = {"jit_compile": {"auto": "auto", "true": True,
                             "false": False}[FLAGS.keras_jit_compile]}
    return {
        "matmul_peak": ("matmul_peak", {}),
        "matmul_peak_bf16": ("matmul_peak", {"precision": "bf16", "needs": ["bf16"]}),
        "matmul_peak_fp16": ("matmul_peak", {"precision": "fp16", "needs": ["fp16"]}),
        "ours_bf16": ("ours", {**ours, "precision": "bf16", "needs": ["bf16"]}),
        # Keras with its own mixed-precision policy: the same-precision comparison.
        "keras_bf16": ("keras", {**keras, "precision": "bf16", "needs": ["bf16"]}),
        "torch_bf16": ("torch", {"needs": ["bf16"]}),
        "ours": ("ours", dict(ours)),
        "keras": ("keras", dict(keras)),
        "ours_fp16": ("ours", {**ours, "precision": "fp16", "needs": ["fp16"]}),
        "keras_fp16": ("keras", {**keras, "precision": "fp16", "needs": ["fp16"]}),
        # Two towers on each GPU split into two virtual GPUs, same global batch: how N-tower
        # code runs on a machine with fewer GPUs.
        "ours_split_gpu": ("ours", {**ours, "towers": 2 * max(gpus, 1),
                                    "virtual_gpu_memory_mb": split_gpu_memory_mb(),
                                    "needs": ["gpu"]}),
        # The same towers with replicated variables and an all-reduce (the ring: NCCL
        # refuses two ranks on one GPU) against ours_split_gpu's parameter_server.
        "ours_replicated": ("ours", {**ours, "towers": 2 * max(gpus, 1),
                                     "virtual_gpu_memory_mb": split_gpu_memory_mb(),
                                     "variable_update": "replicated", "needs": ["gpu"]}),
        # The default's alternative, side by side: variables on the CPU (the original's
        # choice) where the default is the GPU (one GPU), and the other way round.
        "ours_variables_on_cpu": ("ours", {**ours, "variable_device": "cpu",
                                           "needs": ["one_gpu"]}),
        "ours_variables_on_gpu": ("ours", {**ours, "variable_device": "gpu",
                                           "needs": ["several_gpus"]}),
        "ours_unstaged": ("ours", {**ours, "prefetch_inputs": False, "needs": ["gpu"]}),
        "ours_xla": ("ours", {**ours, "xla": True}),
        "ours_1_tower": ("ours", {**ours, "towers": 1, "virtual_gpu_memory_mb": 0,
                                  "needs": ["multi_tower"]}),
        "pipeline": ("pipeline", {"threads": 0, "pipeline_images": FLAGS.pipeline_images}),
        "pipeline_1_thread": ("pipeline", {"threads": 1,
                                           "pipeline_images": FLAGS.pipeline_images}),
    }


def build_report(results, capabilities=None):
    """The report's keys from the raw measurements (None where a measurement was skipped), with
    the settings of this run (its flags) and this machine."""
    gpus = (capabilities or {}).get("gpus", 0)
    settings = {"model": FLAGS.model, "image_size": FLAGS.image_size,
                "batch_size": FLAGS.batch_size,
                "per_gpu_batch": FLAGS.batch_size // max(gpus, 1),
                "towers": FLAGS.towers or (gpus or devices.DEFAULT_CPU_TOWERS),
                "depth_multiplier": FLAGS.depth_multiplier,
                "keras_jit_compile": FLAGS.keras_jit_compile,
                "warmup_steps_discarded": FLAGS.warmup, "steps_per_round": FLAGS.steps,
                "rounds": FLAGS.repeats, "statistic": "median"}
    return report.build_report(results, settings, dict(machine_details()))


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}")
    for name in ("warmup", "steps", "repeats", "batch_size", "towers"):
        if FLAGS[name].value is not None and FLAGS[name].value < 1:
            cli.fail(f"--{name}={FLAGS[name].value} must be at least 1.")
    unknown = sorted(set(FLAGS.skip) - set(measurement_plan()))
    if unknown:
        cli.fail(f"--skip={','.join(unknown)}: no such measurement; use some of "
                 f"{', '.join(measurement_plan())}.")
    output = cli.user_path(FLAGS.output_json)
    plot = cli.user_path(FLAGS.output_plot) or os.path.splitext(output)[0] + ".png"
    saved = []

    def save_partial(partial):
        report.write_json(partial, output)
        saved.append(output)

    try:
        summary = run_all(cli.log, save_partial)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        cli.fail(f"{error} (the measurements before it are in {output})" if saved else error)
    report.write_json(summary, output)
    report.write_plot(summary, plot)
    for key in report.SUMMARY_KEYS:
        value = summary[key]
        cli.log(f"{key:>36}: " + ("skipped" if value is None else f"{value:.3f}"))
    for name, error in summary["errors"].items():
        cli.log(f"{name:>36}: FAILED ({error})")
    for name, note in summary["notes"].items():
        cli.log(f"{name:>36}: not measured ({note})")
    for name in summary["not_measured"]:
        cli.log(f"{name:>36}: not measured (--deadline_secs)")
    cli.log(f"report: {output}  plot: {plot}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
