"""The benchmark's report: raw measurements turned into rates, ratios and utilization beside
the settings they ran with, written as JSON and as a plot (bench/throughput.py measures)."""

import json
import os

from common import files

# Our network (training's --model) -> the keras.applications model it is compared with.
KERAS_MODELS = {"inception_v3": "InceptionV3", "resnet_v1_50": "ResNet50"}


def write_json(report, path):
    """Writes `report` to `path` atomically (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    files.write_text_atomically(path, json.dumps(report, indent=2))


def ratio(numerator, denominator):
    """numerator / denominator, or None when either is missing."""
    return numerator / denominator if numerator and denominator else None


def build_report(results, settings, machine):
    """The report's keys from the raw measurements `results` ({name: result or None}), with
    the run's `settings` and the `machine` it ran on (both dicts, copied in as they are)."""
    ours = results.get("ours") or {}
    return {**_rates(results), **_utilization(results),
            "gpu_tests": None,  # filled by tools/gpu_check.py, which runs the GPU tests
            "demo_precision_at_1": None,  # likewise: {"fp32": P, "bf16": P, "fp16": P}
            "peak_memory_mb": {name: result["peak_memory_mb"]
                               for name, result in results.items() if result},
            "gpu_peak_memory_mb": {name: result["gpu_peak_memory_mb"]
                                   for name, result in results.items()
                                   if result and "gpu_peak_memory_mb" in result},
            "placement": ours.get("placement"), "variable_device": ours.get("variable_device"),
            "profile": ours.get("profile"), "settings": settings,
            "rounds": {name: result.get("rounds") for name, result in results.items()
                       if result},
            "device_held": {name: result["device_held"] for name, result in results.items()
                            if result and "device_held" in result},
            "versions": {name: {key: result[key] for key in ("torch", "torchvision", "device")
                                if key in result}
                         for name, result in results.items() if result and "torch" in result},
            "machine": machine}


def _rate(results, name):
    return results[name]["images_per_sec"] if results.get(name) else None


def _rates(results):
    """images/sec of each measurement and the ratios between them."""
    def rate(name):
        return _rate(results, name)
    ours = rate("ours")
    keys = {f"{name}_images_per_sec": rate(name) for name in (
        "ours", "ours_1_tower", "keras", "ours_bf16", "keras_bf16", "torch_bf16", "ours_fp16",
        "keras_fp16", "ours_variables_on_cpu", "ours_variables_on_gpu", "ours_unstaged",
        "ours_xla", "ours_split_gpu", "ours_replicated")}
    keys.update({
        "speedup_vs_keras": ratio(ours, rate("keras")),
        "speedup_vs_keras_bf16": ratio(rate("ours_bf16"), rate("keras")),
        "speedup_bf16_vs_keras_bf16": ratio(rate("ours_bf16"), rate("keras_bf16")),
        "speedup_bf16_vs_torch_bf16": ratio(rate("ours_bf16"), rate("torch_bf16")),
        "speedup_vs_keras_fp16": ratio(rate("ours_fp16"), rate("keras")),
        "speedup_fp16_vs_keras_fp16": ratio(rate("ours_fp16"), rate("keras_fp16")),
        "split_gpu_overhead": (1.0 - rate("ours_split_gpu") / ours)
        if ours and rate("ours_split_gpu") else None,
        "tower_overhead": (1.0 - ours / rate("ours_1_tower")) if ours and rate("ours_1_tower")
        else None,
        "speedup_replicated_vs_split_gpu": ratio(rate("ours_replicated"),
                                                 rate("ours_split_gpu")),
        "pipeline_images_per_sec": rate("pipeline"),
        "pipeline_images_per_sec_per_core": rate("pipeline_1_thread"),
        "pipeline_headroom": ratio(rate("pipeline"), fastest_training_rate(results))})
    return keys


def _utilization(results):
    """The matmul peaks and the fraction of them our steps reach (MFU)."""
    flops = results["ours"]["train_flops_per_image"] if results.get("ours") else None

    def peak(name):
        return results[name]["gflops"] if results.get(name) else None

    def mfu(images_per_sec, peak_gflops):
        return ratio(images_per_sec * flops / 1e9 if images_per_sec and flops else None,
                     peak_gflops)
    return {
        "train_gflops_per_image": flops / 1e9 if flops else None,
        "matmul_peak_gflops": peak("matmul_peak"),
        "matmul_peak_device": results["matmul_peak"]["device"] if results.get("matmul_peak")
        else None,
        "mfu": mfu(_rate(results, "ours"), peak("matmul_peak")),
        "matmul_peak_bf16_gflops": peak("matmul_peak_bf16"),
        "mfu_bf16": mfu(_rate(results, "ours_bf16"), peak("matmul_peak_bf16")),
        "matmul_peak_fp16_gflops": peak("matmul_peak_fp16"),
        "mfu_fp16": mfu(_rate(results, "ours_fp16"), peak("matmul_peak_fp16"))}


TRAINING = ("ours", "ours_bf16", "ours_fp16", "ours_xla", "ours_variables_on_cpu",
            "ours_variables_on_gpu", "ours_unstaged", "ours_split_gpu", "ours_replicated",
            "ours_1_tower",
            "keras", "keras_bf16", "keras_fp16", "torch_bf16")


def fastest_training_rate(results):
    """The fastest training measurement of the run (the rate the input pipeline must feed)."""
    rates = [results[name]["images_per_sec"] for name in TRAINING if results.get(name)]
    return max(rates) if rates else None


SUMMARY_KEYS = ("ours_images_per_sec", "keras_images_per_sec", "speedup_vs_keras", "mfu",
                "ours_bf16_images_per_sec", "keras_bf16_images_per_sec", "speedup_vs_keras_bf16",
                "speedup_bf16_vs_keras_bf16", "torch_bf16_images_per_sec",
                "speedup_bf16_vs_torch_bf16", "mfu_bf16", "ours_fp16_images_per_sec",
                "keras_fp16_images_per_sec", "speedup_vs_keras_fp16",
                "speedup_fp16_vs_keras_fp16", "mfu_fp16", "ours_variables_on_cpu_images_per_sec",
                "ours_variables_on_gpu_images_per_sec", "ours_unstaged_images_per_sec",
                "ours_xla_images_per_sec", "ours_split_gpu_images_per_sec",
                "split_gpu_overhead", "ours_replicated_images_per_sec",
                "speedup_replicated_vs_split_gpu", "tower_overhead", "pipeline_headroom")


def write_plot(report, path):
    """A bar chart of images/sec by configuration."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    towers = report["settings"]["towers"]
    bars = [(f"ours, {towers} tower{'s' if towers > 1 else ''}", report["ours_images_per_sec"],
             "#1f77b4"),
            ("ours, 1 tower", report["ours_1_tower_images_per_sec"], "#6baed6"),
            ("ours, 2 towers per GPU (split)", report["ours_split_gpu_images_per_sec"],
             "#6baed6"),
            ("ours, split, replicated", report["ours_replicated_images_per_sec"], "#6baed6"),
            ("ours, bf16", report["ours_bf16_images_per_sec"], "#08306b"),
            ("ours, fp16", report["ours_fp16_images_per_sec"], "#08306b"),
            ("ours, variables on CPU", report["ours_variables_on_cpu_images_per_sec"],
             "#6baed6"),
            ("ours, variables on GPU", report["ours_variables_on_gpu_images_per_sec"],
             "#6baed6"),
            ("ours, inputs not staged", report["ours_unstaged_images_per_sec"], "#6baed6"),
            ("ours, XLA", report["ours_xla_images_per_sec"], "#6baed6"),
            ("Keras fit", report["keras_images_per_sec"], "#ff7f0e"),
            ("Keras fit, mixed_bfloat16", report["keras_bf16_images_per_sec"], "#a63603"),
            ("Keras fit, mixed_float16", report["keras_fp16_images_per_sec"], "#a63603"),
            ("PyTorch, autocast bf16", report["torch_bf16_images_per_sec"], "#d62728"),
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
