"""The learning-rate range test (`--find_learning_rate`): which rate suits the user's data.

A few hundred training steps from the run's initial weights, the learning rate rising
exponentially from `min_rate` to `max_rate`, one batch per rate; the smoothed loss against the
rate shows where training starts to learn, learns fastest and blows up. It stops early once the
smoothed loss is `stop_factor` times its lowest (or not finite). The suggested rate is a tenth
of the rate where the smoothed loss was lowest: far enough below the blow-up to stay stable,
high enough to learn (Leslie Smith's test, as Keras and PyTorch tuners offer it). Nothing is
saved: no checkpoint, no settings; only the plot is written.
"""

import dataclasses
import io
import math

import numpy as np
import tensorflow as tf

from inception.config import rules
from inception.loop.guards import SmoothedValue

tf1 = tf.compat.v1
SMOOTHING = 0.9  # decay of the loss's bias-corrected exponential moving average


@dataclasses.dataclass(frozen=True)
class RangeTest:
    """The rates tried: `steps` of them, geometrically from min_rate to max_rate (the
    command line's defaults: config/commands.RangeTestSettings)."""
    min_rate: float
    max_rate: float
    steps: int
    stop_factor: float = 4.0

    def rates(self):
        """The learning rate of each step."""
        return np.geomspace(self.min_rate, self.max_rate, self.steps)


@dataclasses.dataclass(frozen=True)
class RangeResult:
    """Rates tried, the smoothed loss at each, and the suggestion (a tenth of `lowest_rate`,
    where the smoothed loss was lowest)."""
    rates: list
    smoothed_losses: list
    lowest_rate: float
    suggested_rate: float


def suggest(rates, smoothed_losses):
    """(rate of the lowest smoothed loss, a tenth of it)."""
    finite = [(loss, rate) for rate, loss in zip(rates, smoothed_losses) if math.isfinite(loss)]
    if not finite:
        raise rules.SettingsError("the loss was not finite at any rate; lower --lr_range_min.")
    lowest = min(finite)[1]
    return lowest, lowest / 10.0


def run_range_test(session, train_op, mean_loss, rate_input, test, log=print):
    """Runs the test's steps in `session` (initialized, input ready), feeding each rate into
    `rate_input` (a float32 placeholder) and fetching `mean_loss`; returns RangeResult."""
    tried, smoothed_losses = [], []
    smoother = SmoothedValue(SMOOTHING)
    best = math.inf
    for index, rate in enumerate(test.rates()):
        _, loss = session.run([train_op, mean_loss], {rate_input: rate})
        tried.append(float(rate))
        smoothed = smoother.add(float(loss))
        smoothed_losses.append(smoothed)
        best = min(best, smoothed)
        if (index + 1) % 20 == 0:
            log(f"rate {rate:.3g}: smoothed loss {smoothed:.4f}")
        if not math.isfinite(smoothed) or smoothed > test.stop_factor * best:
            log(f"rate {rate:.3g}: the loss blew up ({smoothed:.4g}); stopping the test.")
            break
    lowest, suggested = suggest(tried, smoothed_losses)
    return RangeResult(tried, smoothed_losses, lowest, suggested)


def write_plot(result, path, title):
    """A PNG of the smoothed loss against the learning rate (log scale), the suggestion marked."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    shown = [(rate, loss) for rate, loss in zip(result.rates, result.smoothed_losses)
             if math.isfinite(loss)]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot([rate for rate, _ in shown], [loss for _, loss in shown], color="#1f77b4")
    axes.set_xscale("log")
    axes.axvline(result.suggested_rate, color="#2ca02c", linestyle="--",
                 label=f"suggested {result.suggested_rate:.3g}")
    axes.axvline(result.lowest_rate, color="#d62728", linestyle=":",
                 label=f"lowest loss at {result.lowest_rate:.3g}")
    axes.set_xlabel("learning rate (log scale)")
    axes.set_ylabel("smoothed training loss")
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=100)
    with tf.io.gfile.GFile(path, "wb") as handle:  # any file system TensorFlow reaches
        handle.write(image.getvalue())
    plt.close(figure)
