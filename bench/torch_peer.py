"""PyTorch's peer of our step, for the benchmark: `python -m bench.torch_peer 'JSON settings'`.

torchvision's `inception_v3` (auxiliary head on, as ours) trained with the original recipe's
RMSprop, label smoothing 0.1 and the auxiliary loss weighted 0.4, under `torch.autocast` in
bf16 with channels-last tensors: what a PyTorch user writes for speed without compiling the
model. Each step copies the batch from pinned host memory, as a DataLoader with
`pin_memory=True` does (our step copies its batch from the host too). An optional peer: this
project never needs torch; where it cannot be imported (or torchvision is missing), the result
says so and the benchmark records a note instead of a number. Prints one line `RESULT {json}`.
"""

import json
import resource
import statistics
import sys
import time

from bench import device_lock

NUM_CLASSES = 1001


def unavailable(reason):
    """The result of a measurement that could not run here."""
    return {"skipped": reason}


def measure(settings):
    """images/sec of the bf16 autocast step (median of `repeats` rounds of `steps` steps)."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
        import torchvision  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        return unavailable(f"PyTorch or torchvision not importable here ({error})")
    device_lock.hold_device(settings)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch, size = settings["batch_size"], settings["image_size"]
    model = torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=True,
                                            num_classes=NUM_CLASSES)
    model = model.to(device, memory_format=torch.channels_last).train()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=0.1, alpha=0.9, momentum=0.9,
                                    eps=1.0)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    generator = torch.Generator().manual_seed(0)
    images = (torch.rand(batch, 3, size, size, generator=generator) * 2 - 1).contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(1, NUM_CLASSES, (batch,), generator=generator)
    if device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()

    def step():
        inputs = images.to(device, non_blocking=True)
        targets = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits, aux_logits = model(inputs)
            loss = loss_fn(logits, targets) + 0.4 * loss_fn(aux_logits, targets)
        loss.backward()
        optimizer.step()

    def run(count):
        for _ in range(count):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    run(settings["warmup"])
    rounds = []
    for _ in range(settings["repeats"]):
        start = time.perf_counter()
        run(settings["steps"])
        rounds.append(time.perf_counter() - start)
    values = [batch * settings["steps"] / seconds for seconds in rounds]
    result = {"images_per_sec": statistics.median(values), "rounds": values,
              "torch": torch.__version__, "torchvision": torchvision.__version__,
              "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"}
    if device.type == "cuda":
        result["gpu_peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    return result


def main(argv):
    """Runs the measurement with the JSON settings argv[1]; prints one JSON line."""
    result = measure(json.loads(argv[1]))
    if "skipped" not in result:
        result["peak_memory_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if device_lock.held_since() is not None:
        result["device_held"] = [device_lock.held_since(), time.time()]
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv)
