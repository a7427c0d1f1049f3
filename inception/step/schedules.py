"""The learning rate of every step: the run's schedule and a plan stage's own, as tensors.

Three kinds (plans.SCHEDULES), each after a linear warm-up of `warmup_steps` from the schedule's
start: `exponential`, the original's staircase decay (the rate times decay_factor once every
decay_steps steps); `cosine`, half a cosine from the rate down to zero at the schedule's end (the
run's --max_steps, or the stage's last step); `polynomial`, (1 - progress)^2 down to zero there;
`constant`. The run's schedule spans the whole
run; a stage that names a schedule gets its own, spanning that stage. The decays are
TensorFlow's (exponential_decay, cosine_decay, polynomial_decay); the warm-up multiplies them.
"""

import dataclasses

import tensorflow as tf

from inception.config import plans
from inception.config import recipe

tf1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One learning-rate schedule over global steps [start_step, end_step).

    kind: one of plans.SCHEDULES; end_step: where cosine reaches zero (None: unknown, which
    only exponential and constant accept); decay_steps, decay_factor: exponential's staircase.
    """
    kind: str
    initial_rate: float
    start_step: int = 0
    end_step: int = None
    warmup_steps: int = 0
    decay_steps: int = 1
    decay_factor: float = 1.0

    def __post_init__(self):
        if self.kind not in plans.SCHEDULES:
            raise ValueError(f"unknown learning-rate schedule {self.kind!r}; use one of "
                             f"{', '.join(plans.SCHEDULES)}")
        if self.kind in ("cosine", "polynomial") and self.end_step is None:
            raise ValueError(f"a {self.kind} schedule needs its end step (--max_steps)")


def rate_tensor(schedule, global_step, name="learning_rate"):
    """A scalar float32 tensor: `schedule`'s rate at `global_step` (an integer tensor)."""
    with tf.name_scope(f"{name}_schedule"):
        since = tf.cast(global_step, tf.float32) - float(schedule.start_step)
        if schedule.kind == "exponential":
            rate = tf1.train.exponential_decay(schedule.initial_rate, since,
                                               schedule.decay_steps, schedule.decay_factor,
                                               staircase=True)
        elif schedule.kind == "polynomial":
            rate = tf1.train.polynomial_decay(
                schedule.initial_rate, tf.maximum(since - schedule.warmup_steps, 0.0),
                _decay_span(schedule), 0.0, power=recipe.POLYNOMIAL_DECAY_POWER)
        elif schedule.kind == "cosine":
            # TensorFlow's cosine_decay over the steps after the warm-up (it would mirror
            # the curve back up for the negative steps of the warm-up itself).
            rate = tf1.train.cosine_decay(schedule.initial_rate,
                                          tf.maximum(since - schedule.warmup_steps, 0.0),
                                          _decay_span(schedule))
        else:
            rate = tf.constant(schedule.initial_rate, tf.float32)
        if schedule.warmup_steps:
            rate = rate * tf.minimum(1.0, (since + 1.0) / float(schedule.warmup_steps))
    return tf.identity(rate, name=name)


def _decay_span(schedule):
    """The steps from the end of the warm-up to the schedule's end (at least 1)."""
    return max(1, schedule.end_step - schedule.start_step - schedule.warmup_steps)


def schedule_and_rate(optimization, steps_per_epoch, max_steps, learning_rate, global_step):
    """(the run's Schedule, the rate tensor: `learning_rate` when fed, else the schedule's at
    `global_step`)."""
    schedule = run_schedule(optimization, steps_per_epoch, max_steps)
    return schedule, (learning_rate if learning_rate is not None
                      else rate_tensor(schedule, global_step))


def run_schedule(optimization, steps_per_epoch, max_steps):
    """The run's Schedule from settings.OptimizationSettings `optimization` (resolved), the
    updates per epoch and the run's last step (None where unknown)."""
    return Schedule(kind=optimization.learning_rate_schedule,
                    initial_rate=optimization.initial_learning_rate, end_step=max_steps,
                    warmup_steps=warmup_steps(optimization, steps_per_epoch),
                    decay_steps=optimization.decay_steps(steps_per_epoch),
                    decay_factor=optimization.learning_rate_decay_factor)


def warmup_steps(optimization, steps_per_epoch):
    """The warm-up's steps: --warmup_epochs' at `steps_per_epoch` updates, else --warmup_steps."""
    if optimization.warmup_epochs:
        return max(1, round(optimization.warmup_epochs * steps_per_epoch))
    return optimization.warmup_steps


def stage_schedule(plan, index, run, max_steps):
    """The Schedule of stage `index` of `plan`, or None when the stage follows the run's
    `run` schedule. A stage naming only a learning rate keeps it constant; one naming a
    schedule gets it over its own steps, from its rate (or the run's)."""
    stage = plan.stages[index]
    if stage.learning_rate_schedule is None:
        if stage.learning_rate is None:
            return None
        return Schedule(kind="constant", initial_rate=stage.learning_rate,
                        start_step=plan.stage_start(index))
    start = plan.stage_start(index)
    end = max_steps if stage.steps is None else start + stage.steps
    return dataclasses.replace(
        run, kind=stage.learning_rate_schedule, start_step=start, end_step=end,
        initial_rate=stage.learning_rate if stage.learning_rate is not None
        else run.initial_rate)
