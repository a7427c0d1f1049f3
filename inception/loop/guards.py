"""What the training loop checks: non-finite losses, updates and variables, and a loss that
climbs. Each check raises or returns what the loop reports; none has side effects."""

import math
import os

import tensorflow as tf

from common import cli


class DivergenceError(cli.UserError):
    """Training diverged: a tower's loss or update, or a variable, became NaN or infinite (on
    any worker of a cluster), or the smoothed loss climbed far above its start
    (--on_divergence=stop). The message says what, where, and what was kept; `step`,
    `last_checkpoint`, `set_aside` and `bad_towers` say it to code (None or empty where not
    known)."""

    def __init__(self, message, step=None, last_checkpoint=None, set_aside=(),
                 bad_towers=()):
        super().__init__(message)
        self.step, self.last_checkpoint = step, last_checkpoint
        self.set_aside, self.bad_towers = list(set_aside), list(bad_towers)


def non_finite_error(step, tower_losses, last_checkpoint, tower_gradient_norms=(),
                     variables=(), set_aside=(), cause=None):
    """The DivergenceError of a loss, update or variable not finite at `step`: the message names
    the step, the towers, the last healthy checkpoint and those set aside."""
    losses_bad = [i for i, value in enumerate(tower_losses) if not math.isfinite(value)]
    norms_bad = [i for i, value in enumerate(tower_gradient_norms) if not math.isfinite(value)]
    cause = cause or divergence(step, tower_losses, tower_gradient_norms, variables)
    return DivergenceError(
        f"{cause}; training stopped and {kept(last_checkpoint, set_aside)}. Lower "
        "--initial_learning_rate, check the data, or rerun with --on_nan=rollback.",
        step, last_checkpoint, set_aside, losses_bad or norms_bad)


def divergence(step, tower_losses, tower_gradient_norms=(), variables=()):
    """What went non-finite at `step`, for the log and the error."""
    def towers(values):
        return ", ".join(f"tower_{i}" for i, value in enumerate(values)
                         if not math.isfinite(value))

    def listed(values):
        return ", ".join(f"tower_{i} = {value:.4g}" for i, value in enumerate(values))
    if any(not math.isfinite(value) for value in tower_losses):
        return (f"loss is not finite at step {step} in {towers(tower_losses)} "
                f"({listed(tower_losses)})")
    if any(not math.isfinite(value) for value in tower_gradient_norms):
        return (f"the update of step {step} is not finite in {towers(tower_gradient_norms)} "
                f"(gradient norms: {listed(tower_gradient_norms)})")
    return (f"{len(variables)} variable(s) are not finite at step {step} (e.g. "
            f"{variables[0] if variables else '?'})")


def kept(last_checkpoint, set_aside=()):
    """How a stop names the last healthy checkpoint (or that there is none) and the checkpoints
    it set aside (see run.health.SaveRecord for what healthy means)."""
    if last_checkpoint:
        text = f"the last healthy checkpoint is {last_checkpoint} (a rerun continues from it)"
    elif set_aside:
        text = "no healthy checkpoint is left (a rerun starts afresh)"
    else:
        text = "no checkpoint was written"
    if set_aside:
        names = ", ".join(os.path.basename(path) for path in set_aside)
        text += (f"; set aside, as written after the divergence began: {names} (kept as "
                 "<name>.unusable.*)")
    return text


class SmoothedValue:
    """The bias-corrected exponential moving average of a series (as TensorBoard smooths):
    `add(value)` returns the average so far; the first values count fully."""

    def __init__(self, decay):
        self.decay = decay
        self._average, self._weight = 0.0, 0.0

    def add(self, value):
        """Takes the next value; returns the smoothed value."""
        self._average = self.decay * self._average + (1.0 - self.decay) * value
        self._weight = self.decay * self._weight + (1.0 - self.decay)
        return self._average / self._weight


class LossWatch:
    """The smoothed mean_loss, one warning when it climbs well above its starting value, and
    where a divergence began.

    Smoothing is an exponential moving average over about `window` steps (bias-corrected, so
    the first values count fully). The starting value is the run's first loss (an untrained
    network's is the same for every run of a data set; after a resume, the loss it resumed
    at); from `window` steps on, a smoothed loss above `factor` times it is the warning, once
    per run. That is what a too-high learning rate does before the loss turns NaN.

    The loss of step k is computed from the weights step k - 1 wrote, so when the run
    diverges at step S, the suspect weights begin at those of step S - 1, or earlier when the
    steps just before S already had losses above the threshold (`first_bad_weights`).
    """

    def __init__(self, window=10, factor=2.0):
        self.window, self.factor = window, factor
        self.smoothed, self.start, self.start_step = None, None, None
        self._smoother = SmoothedValue(1.0 - 1.0 / window)
        self._count, self.warned = 0, False
        self.above_since = None  # first step of the current run of losses above the threshold

    @property
    def threshold(self):
        """The loss above which training is climbing: `factor` times the starting loss."""
        return None if self.start is None else self.factor * self.start

    @property
    def climbing(self):
        """Whether the smoothed loss is above the threshold now."""
        return self.smoothed is not None and self.smoothed > self.threshold

    def sound(self, loss):
        """Whether a step's loss is finite and not above the threshold."""
        return math.isfinite(loss) and (self.threshold is None or loss <= self.threshold)

    def add(self, step, loss):
        """Takes the step's mean loss; returns the warning line when it is due, else None."""
        self.smoothed = self._smoother.add(loss)
        self._count += 1
        if self.start is None:
            self.start, self.start_step = loss, step
        if self.sound(loss):
            self.above_since = None
        elif self.above_since is None:
            self.above_since = step
        if (self.warned or self._count < self.window
                or not self.smoothed > self.factor * self.start):
            return None
        self.warned = True
        return (f"the loss is climbing: smoothed loss {self.smoothed:.4g} at step {step}, "
                f"{self.smoothed / self.start:.1f}x its {self.start:.4g} at step "
                f"{self.start_step}. Lower --initial_learning_rate (a tenth is a good first "
                "try), lengthen --warmup_steps, or pick a rate with --find_learning_rate.")

    def first_bad_weights(self, failed_step):
        """The step whose weights are the first suspect when step `failed_step` diverged: the
        one before it, or the one before the losses above the threshold that led up to it."""
        first = failed_step if self.above_since is None else self.above_since
        return first - 1

    def restart(self):
        """After a rollback: forget the diverging losses (the start stays)."""
        self._smoother = SmoothedValue(1.0 - 1.0 / self.window)
        self.smoothed, self.above_since, self._count = None, None, 0


class Diverged(Exception):
    """Inside the loop: this step's loss, update or variables are not finite. cause: what
    went wrong in words, where this task's own values do not show it (another worker's tower)."""

    def __init__(self, step, tower_losses=(), tower_gradient_norms=(), variables=(),
                 cause=None):
        self.cause = cause or divergence(step, tower_losses, tower_gradient_norms, variables)
        super().__init__(self.cause)
        self.step, self.tower_losses = step, list(tower_losses)
        self.tower_gradient_norms, self.variables = list(tower_gradient_norms), list(variables)

    def error(self, last_checkpoint, set_aside=()):
        """The DivergenceError to stop with."""
        return non_finite_error(self.step, self.tower_losses, last_checkpoint,
                                self.tower_gradient_norms, self.variables, set_aside, self.cause)


class VariableHealth:
    """Which saved float variables hold NaN or Inf (checked before every save), and how many
    bytes a checkpoint of them takes."""

    def __init__(self, saved_variables):
        floats = [(name, v) for name, v in sorted(saved_variables.items())
                  if v.dtype.base_dtype.is_floating]
        self.names = [name for name, _ in floats]
        checks = []
        for _, variable in floats:
            with tf.device(variable.device):
                checks.append(tf.reduce_all(tf.math.is_finite(variable)))
        with tf.name_scope("variable_health"):
            self.finite = tf.stack(checks) if checks else tf.constant([], tf.bool)
        self.checkpoint_bytes = sum(
            v.shape.num_elements() * v.dtype.base_dtype.size for v in saved_variables.values())

    def non_finite(self, session):
        """Names of the variables that are not finite now."""
        return [name for name, ok in zip(self.names, session.run(self.finite)) if not ok]
