"""The training graph: input -> towers -> per-stage averaged gradients -> update.

A pure graph builder: `build_train_graph` returns the ops and tensors the loop runs; it owns no
session, writes no files and reads no flags. The towers' forward pass is built once; every
stage of the training plan (plans.py) gets its own gradients, optimizer and train op from the
same tower machinery (towers.py), so `mean_loss`, None-safe averaging and the NaN check work
the same in every stage.

With `accumulate_steps` K, an update's input holds K micro-batches, each split over the towers:
the towers are built K times (micro-batch k on tower i is `tower_{k * num_towers + i}`), and
the one average over all of them is the update, so K x towers x per-tower batch examples make
it, the global step counts updates and `mean_loss` covers every micro-batch; in a one-stage
plan each micro-batch starts once the previous one's gradients are done (micro_batches.py).
What a step changes beside the update is averages.py's. A stage updated by LARS or LAMB
leaves the loss's L2 term out: their own weight decay replaces it.
"""

import dataclasses

import tensorflow as tf

from inception.config import plans
from inception.config import recipe
from inception.parallel import towers as towers_lib
from inception.step import averages
from inception.step import clipping
from inception.step import loss_scaling
from inception.step import micro_batches
from inception.step import optimizers as optimizers_lib
from inception.step import schedules
from inception.step import summaries

tf1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class StageOps:
    """What the loop runs while one stage is current. train_op: one synchronous step of this
    stage (its gradients, update, EMA, batch-norm statistics); update_op: the update within it
    (apply and EMA); tower_losses: float32 [num_towers], each tower's loss in this stage;
    tower_gradient_norms: float32 [num_towers], each tower's global gradient norm (NaN/Inf:
    its update was not finite); mean_loss: their mean; variables: names of the variables this
    stage trains; skipped: variables of the stage that its loss does not reach (left out)."""
    stage: plans.Stage
    train_op: tf.Operation
    update_op: tf.Operation
    tower_losses: tf.Tensor
    tower_gradient_norms: tf.Tensor
    mean_loss: tf.Tensor
    learning_rate: tf.Tensor
    summary_op: tf.Tensor
    variables: list
    skipped: list


@dataclasses.dataclass(frozen=True)
class TrainGraph:
    """Everything the training loop needs; `stages[i]` belongs to `plan.stages[i]`. input_fill:
    with inputs prefetched to the towers' devices, the op that puts the first batch there
    (run once after `input_initializer`, before the first step); None without prefetching.
    loss_scaled: dynamic loss scaling is on (fp16): a step whose gradients overflow skips its
    update by design, so only a non-finite loss means divergence.
    examples_per_step: the input batch of one step (this task's global batch).
    fill_copies: with replicated variables, the op that fills every device's copies from
    the variables themselves (copies.VariableCopies.fill_op): run after every initialization
    or restore; None with variables on one device.
    input_position: the examples trained on so far (pipeline.InputBatch.position; each step
    adds its own), or None when the input does not track it.
    clipped_updates: with gradient clipping, the local int64 count of updates it clipped in
    this process (clipping.py); None without. towers: every tower (towers.Tower, one per tower
    and micro-batch) with what its model returned (towers.ModelOutputs)."""
    global_step: tf.Variable
    plan: plans.TrainingPlan
    stages: list
    corrupt_records: tf.Tensor
    input_initializer: tf.Operation
    moving_average: tf1.train.ExponentialMovingAverage
    examples_per_step: int = None
    input_fill: tf.Operation = None
    loss_scaled: bool = False
    fill_copies: tf.Operation = None
    input_position: tf.Variable = None
    clipped_updates: tf.Variable = None
    towers: tuple = ()

    @property
    def skipped_variables(self):
        """Names of variables some stage leaves out because its loss does not reach them."""
        return sorted({name for ops in self.stages for name in ops.skipped})


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """How the step is built beyond its data, model, optimization and sharing.

    histograms: add gradient and variable histograms to the summaries (costly).
    initial_loss_scale: dynamic loss scaling (loss_scaling.py) from this scale; None: off.
    prefetch_inputs: copy each tower's input to its device a step ahead (gpu_prefetch.py).
    learning_rate: a scalar float32 tensor every stage uses instead of its own rate (the
      range test feeds it); None: the schedules.
    max_steps: where a cosine schedule reaches zero.
    """
    histograms: bool = False
    initial_loss_scale: float = None
    prefetch_inputs: bool = False
    learning_rate: tf.Tensor = None
    max_steps: int = None


def build_train_graph(input_batch, make_model_fn, optimization, sharing, examples_per_epoch,
                      options=StepOptions()):
    """Builds the towers once and one train op per stage of `optimization`'s plan.

    Args:
      input_batch: inputs.pipeline.InputBatch of one update: the batch x accumulate_steps
        (that many micro-batches, each split over the towers); its records_per_step an epoch.
      make_model_fn: callable(batch_norm_decay) -> model_fn(images, labels) -> ModelOutputs.
      optimization: settings.OptimizationSettings (settings.with_defaults): its plan (None:
        one stage), schedule and accumulate_steps.
      sharing: sharing.VariableSharing: the towers' devices and how they share the variables
        (where the variables, the gradient averaging and the updates run).
      examples_per_epoch: examples in the training subset (the schedule decays per epoch).
      options: StepOptions.
    Returns TrainGraph; raises plans.PlanError for a stage whose loss reaches no variable."""
    plan = optimization.training_plan().validate()
    global_step = tf1.train.get_or_create_global_step()
    variable_device = sharing.variable_device
    with tf.device(variable_device):
        run_schedule, schedule = schedules.schedule_and_rate(
            optimization, examples_per_epoch / input_batch.records_per_step, options.max_steps,
            options.learning_rate, global_step)
        bn_decay = averages.warmed_up_decay(recipe.BATCH_NORM_DECAY, global_step)
    towers, prefetched, held_inputs = micro_batches.build_towers(
        input_batch, make_model_fn(bn_decay), sharing, options.prefetch_inputs,
        optimization.accumulate_steps)
    regularization = sharing.regularization_loss()
    with tf.device(variable_device):
        moving_average = averages.averages_of_every_variable(
            global_step, sharing.averaged_variables())
        loss_scale = (options.initial_loss_scale
                      and loss_scaling.create_loss_scale(options.initial_loss_scale))
    shared = _SharedParts(
        towers=towers, regularization=regularization, schedule=schedule, bn_decay=bn_decay,
        global_step=global_step, moving_average=moving_average,
        step_extras=[prefetched.put_op] if prefetched else [],
        statistics=averages.statistics_updates(towers, sharing.updates_statistics),
        input_batch=input_batch, sharing=sharing, options=options, plan=plan,
        run_schedule=run_schedule, loss_scale=loss_scale,
        clipped_updates=clipping.counter_if(optimization.clip_gradient_norm, variable_device),
        adapt_all=optimization.adapt_batch_norm_and_biases)
    stage_ops = _build_stages(plan, shared, held_inputs)
    return TrainGraph(global_step=global_step, plan=plan, stages=stage_ops,
                      corrupt_records=input_batch.corrupt_records,
                      input_initializer=input_batch.initializer, moving_average=moving_average,
                      examples_per_step=int(input_batch.images.shape[0]),
                      loss_scaled=loss_scale is not None,
                      input_fill=prefetched.put_op if prefetched else None,
                      input_position=input_batch.position, towers=tuple(towers),
                      fill_copies=sharing.fill_op(),
                      clipped_updates=shared.clipped_updates and shared.clipped_updates.counter)


def _build_stages(plan, shared, held_inputs):
    """A StageOps per stage of `plan`; micro-batches (their `held_inputs`) and moving
    statistics ordered after."""
    stage_ops = [_build_stage(stage, index, shared) for index, stage in enumerate(plan.stages)]
    micro_batches.one_micro_batch_at_a_time(shared.towers, held_inputs, stage_ops,
                                            len(shared.sharing.tower_devices))
    averages.order_statistics(shared.statistics, stage_ops)
    return stage_ops


@dataclasses.dataclass(frozen=True)
class _SharedParts:
    """What every stage's step shares (keyword-built by build_train_graph)."""
    towers: list
    regularization: tf.Tensor
    schedule: tf.Tensor
    bn_decay: tf.Tensor
    global_step: tf.Variable
    moving_average: tf1.train.ExponentialMovingAverage
    step_extras: list  # run with every step: the next prefetched input
    statistics: list  # batch-norm moving statistics' updates, after the update (one stage)
    input_batch: object
    sharing: object  # sharing.VariableSharing
    options: StepOptions
    plan: plans.TrainingPlan
    run_schedule: schedules.Schedule
    loss_scale: loss_scaling.LossScale  # None: no loss scaling
    clipped_updates: clipping.ClippedUpdates  # None: no clipping
    adapt_all: bool  # LARS and LAMB adapt batch-norm variables and biases too

    @property
    def variable_device(self):
        """Where the variables' own copy lives, and the step's shared arithmetic runs."""
        return self.sharing.variable_device

    def summary_values(self):
        """What the step's summaries show of these parts (summaries.StepValues)."""
        return summaries.StepValues(self.towers, self.regularization, self.bn_decay,
                                    self.loss_scale, self.input_batch, self.options.histograms)

    @property
    def rate_fed(self):
        """Whether every stage takes `schedule` (a fed rate), whatever its plan says."""
        return self.options.learning_rate is not None

    @property
    def single_stage(self):
        """Whether the plan has one stage."""
        return len(self.plan.stages) == 1


def _build_stage(stage, index, shared):
    if stage.optimizer in plans.LAYERWISE_OPTIMIZERS:
        shared = dataclasses.replace(shared, regularization=tf.constant(0.0, name="no_l2"))
    trainable = tf1.trainable_variables()
    var_list = optimizers_lib.select_variables(stage, trainable)
    with tf.name_scope(f"stage_{stage.name}"):
        tower_totals = towers_lib.tower_total_losses(shared.towers, shared.regularization,
                                                     stage.loss_terms)
        with tf.device(shared.variable_device):
            tower_losses = tf.stack(tower_totals, name="tower_losses")
            mean_loss = towers_lib.mean_over_towers(tower_totals)
        gradients = shared.sharing.gradients(
            shared.towers, var_list, shared.regularization, stage.loss_terms,
            shared.loss_scale.scale if shared.loss_scale else None)
        if not gradients.grads_and_vars:
            terms = ", ".join(stage.loss_terms or sorted(shared.towers[0].loss_terms))
            raise plans.PlanError(
                f"stage {stage.name!r}: its loss ({terms}) reaches none of its "
                f"{len(var_list)} variables; pick scopes the loss depends on, or other loss "
                "terms.")
        trained = [variable for _, variable in gradients.grads_and_vars]
        with tf.device(shared.variable_device):
            own = schedules.stage_schedule(shared.plan, index, shared.run_schedule,
                                           shared.run_schedule.end_step)
            learning_rate = (shared.schedule if own is None or shared.rate_fed
                             else schedules.rate_tensor(own, shared.global_step))
            optimizer = optimizers_lib.make_optimizer(stage, learning_rate, shared.single_stage,
                                                      shared.adapt_all)
            applied, extras, clipped_count = gradients, list(shared.step_extras), None
            if shared.clipped_updates is not None:
                clipped = clipping.clip_gradients(gradients, shared.clipped_updates)
                applied, clipped_count = clipped.gradients, clipped.count
                extras.append(clipped_count.op)
            update_ops = shared.sharing.update_ops(optimizer, applied.to_apply,
                                                   shared.global_step, shared.moving_average,
                                                   shared.loss_scale)
            update_op = tf.group(*update_ops, name="update")
            train_op = tf.group(update_op, *extras, *shared.statistics,
                                *averages.position_advance(
                                    shared.input_batch, shared.sharing.updates_statistics,
                                    update_op),
                                name="train_op")
        summary_op = summaries.step_summaries(shared.summary_values(), summaries.StageValues(
            index, stage.loss_terms, tower_totals, mean_loss, learning_rate,
            gradients.grads_and_vars, clipped_count))
    return StageOps(stage=stage, train_op=train_op, update_op=update_op,
                    tower_losses=tower_losses,
                    tower_gradient_norms=gradients.tower_norms, mean_loss=mean_loss,
                    learning_rate=learning_rate, summary_op=summary_op,
                    variables=[v.op.name for v in trained], skipped=gradients.skipped)


def describe_stage(graph, index, end_step, step=None):
    """One log line: which stage starts (or, when `step` is past its start, goes on after a
    resume), its steps and what it trains."""
    plan, ops = graph.plan, graph.stages[index]
    start = plan.stage_start(index)
    end = end_step if ops.stage.steps is None else min(end_step, start + ops.stage.steps)
    going_on = f" (going on from step {step})" if step is not None and step > start else ""
    scopes = ", ".join(ops.stage.scopes) if ops.stage.scopes else "all scopes"
    terms = ", ".join(ops.stage.loss_terms) if ops.stage.loss_terms else "all loss terms"
    return (f"stage '{ops.stage.name}' ({index + 1} of {len(plan.stages)}): steps {start}-{end}"
            f"{going_on}, training {len(ops.variables)} variables ({scopes}; {terms}; "
            f"{ops.stage.optimizer})")
