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
What a step changes beside the update is after_update.py's. A stage updated by LARS or LAMB
leaves the loss's L2 term out: their own weight decay replaces it.
"""

import dataclasses

import tensorflow as tf

from inception.config import plans
from inception.config import recipe
from inception.parallel import after_update
from inception.parallel import all_reduce as all_reduce_lib
from inception.parallel import averages
from inception.parallel import clipping
from inception.parallel import copies as copies_lib
from inception.parallel.devices import HOST_DEVICE
from inception.parallel import gradients as gradients_lib
from inception.parallel import loss_scaling
from inception.parallel import micro_batches
from inception.parallel import optimizers as optimizers_lib
from inception.parallel import schedules
from inception.parallel import summaries
from inception.parallel import towers as towers_lib

tf1 = tf.compat.v1

DEFAULT_VARIABLE_DEVICE = HOST_DEVICE  # as in the original; the run's Placement decides


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
    with inputs staged on the towers' devices, the op that stages the first batch
    (run once after `input_initializer`, before the first step); None without staging.
    loss_scaled: dynamic loss scaling is on (fp16): a step whose gradients overflow skips its
    update by design, so only a non-finite loss means divergence.
    examples_per_step: the input batch of one step (this task's global batch).
    copy_to_replicas: with replicated variables, the op that fills every device's copies from
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
    copy_to_replicas: tf.Operation = None
    input_position: tf.Variable = None
    clipped_updates: tf.Variable = None
    towers: tuple = ()

    @property
    def skipped_variables(self):
        """Names of variables some stage leaves out because its loss does not reach them."""
        return sorted({name for ops in self.stages for name in ops.skipped})


def build_train_graph(input_batch, make_model_fn, optimization, tower_devices,
                      examples_per_epoch, histograms=False, wrap_optimizer=None,
                      initial_loss_scale=None, variable_device=DEFAULT_VARIABLE_DEVICE,
                      stage_inputs=False, learning_rate=None, max_steps=None, all_reduce=None,
                      updates_statistics=True):
    """Builds the towers once and one train op per stage of `optimization`'s plan.

    Args:
      input_batch: inputs.pipeline.InputBatch of one update: the batch x accumulate_steps
        (that many micro-batches, each split over the towers); its records_per_step an epoch.
      make_model_fn: callable(batch_norm_decay) -> model_fn(images, labels) -> ModelOutputs.
      optimization: settings.OptimizationSettings (settings.with_defaults): its plan (None:
        one stage), schedule and accumulate_steps; tower_devices: one device name per tower.
      examples_per_epoch: examples in the training subset (the schedule decays per epoch);
        histograms: add gradient and variable histograms to the summaries (costly).
      wrap_optimizer: optional callable(optimizer, moving_average, variables) -> an optimizer
        whose apply_gradients also updates `moving_average` (distributed/worker.py).
      initial_loss_scale: dynamic loss scaling (loss_scaling.py) from this scale; None: off.
      variable_device: where the variables, the gradient averaging and the updates run
        (devices.py decides; with `all_reduce`, the first tower's device).
      stage_inputs: copy each tower's input to its device a step ahead (gpu_prefetch.py).
      learning_rate: a scalar float32 tensor every stage uses instead of its own rate (the
        range test feeds it); None: the schedules; max_steps: where a cosine one reaches zero.
      all_reduce: all_reduce.AllReduceSpec of replicated variables (copies.py), or None.
      updates_statistics: False: another process updates the moving statistics and position.
    Returns TrainGraph; raises plans.PlanError for a stage whose loss reaches no variable."""
    plan = optimization.training_plan().validate()
    global_step = tf1.train.get_or_create_global_step()
    with tf.device(variable_device):
        run_schedule, schedule = schedules.schedule_and_rate(
            optimization, examples_per_epoch / input_batch.records_per_step, max_steps,
            learning_rate, global_step)
        bn_decay = averages.warmed_up_decay(recipe.BATCH_NORM_DECAY, global_step)
    copies, reducer = _replication(tower_devices, all_reduce)
    towers, staged = micro_batches.build_towers(
        input_batch, make_model_fn(bn_decay), tower_devices, variable_device, stage_inputs,
        optimization.accumulate_steps, copies)
    regularization = towers_lib.regularization_loss(
        variable_device, copies.regularization_terms(0) if copies else None)
    with tf.device(variable_device):
        moving_average = averages.averages_of_every_variable(global_step, copies)
        loss_scale = initial_loss_scale and loss_scaling.create_loss_scale(initial_loss_scale)
    shared = _SharedParts(
        towers, regularization, schedule, bn_decay, global_step, moving_average,
        [staged.put_op] if staged else [], after_update.statistics_updates(
            towers, updates_statistics), input_batch, updates_statistics, histograms,
        len(plan.stages) == 1, variable_device, wrap_optimizer, loss_scale,
        learning_rate is not None, plan, run_schedule, copies, reducer,
        clipping.counter_if(optimization.clip_gradient_norm, variable_device),
        optimization.adapt_batch_norm_and_biases)
    stage_ops = _build_stages(plan, shared, len(tower_devices))
    return TrainGraph(global_step=global_step, plan=plan, stages=stage_ops,
                      corrupt_records=input_batch.corrupt_records,
                      input_initializer=input_batch.initializer, moving_average=moving_average,
                      examples_per_step=int(input_batch.images.shape[0]),
                      loss_scaled=loss_scale is not None,
                      input_fill=staged.put_op if staged else None,
                      input_position=input_batch.position, towers=tuple(towers),
                      copy_to_replicas=copies.fill_op() if copies else None,
                      clipped_updates=shared.clipped_updates and shared.clipped_updates.counter)


def _build_stages(plan, shared, num_towers):
    """A StageOps per stage of `plan`; micro-batches and moving statistics ordered after."""
    stage_ops = [_build_stage(stage, index, shared) for index, stage in enumerate(plan.stages)]
    micro_batches.one_micro_batch_at_a_time(shared.towers, stage_ops, num_towers)
    after_update.order_statistics(shared.statistics, stage_ops)
    return stage_ops


def _replication(tower_devices, all_reduce):
    """(copies.VariableCopies, all_reduce.GradientReducer) of replicated variables on
    `tower_devices`, or (None, None)."""
    if all_reduce is None:
        return None, None
    return (copies_lib.VariableCopies(tower_devices),
            all_reduce_lib.GradientReducer(tower_devices, all_reduce))


@dataclasses.dataclass(frozen=True)
class _SharedParts:
    towers: list
    regularization: tf.Tensor
    schedule: tf.Tensor
    bn_decay: tf.Tensor
    global_step: tf.Variable
    moving_average: tf1.train.ExponentialMovingAverage
    step_extras: list  # run with every step: the next staged input
    statistics: list  # batch-norm moving statistics' updates, after the update (one stage)
    input_batch: object
    advances_position: bool  # its position, if tracked, advanced by this process each step
    histograms: bool
    single_stage: bool
    variable_device: str = DEFAULT_VARIABLE_DEVICE
    wrap_optimizer: object = None
    loss_scale: loss_scaling.LossScale = None
    rate_fed: bool = False  # every stage takes `schedule`, whatever its plan says
    plan: plans.TrainingPlan = None
    run_schedule: schedules.Schedule = None
    copies: copies_lib.VariableCopies = None  # replicated variables; None: parameter_server
    reducer: all_reduce_lib.GradientReducer = None  # sums the copies' gradients
    clipped_updates: clipping.ClippedUpdates = None  # None: no clipping
    adapt_all: bool = False  # LARS and LAMB adapt batch-norm variables and biases too

    def __post_init__(self):
        # Synchronous replicas apply their own update: never loss-scaled or replicated
        # (config/rules.py refuses those runs).
        assert self.wrap_optimizer is None or (self.loss_scale is None and self.copies is None)


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
        gradients = _gradients(shared, var_list, stage.loss_terms)
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
            update_ops = _update_ops(optimizer, applied.to_apply, shared)
            update_op = tf.group(*update_ops, name="update")
            train_op = tf.group(update_op, *extras, *shared.statistics,
                                *after_update.position_advance(
                                    shared.input_batch, shared.advances_position, update_op),
                                name="train_op")
        summary_op = summaries.step_summaries(
            shared.towers, tower_totals, stage.loss_terms, index, mean_loss, learning_rate,
            gradients.grads_and_vars, shared.input_batch, shared.regularization,
            shared.bn_decay, shared.loss_scale, shared.histograms, clipped_count)
    return StageOps(stage=stage, train_op=train_op, update_op=update_op,
                    tower_losses=tower_losses,
                    tower_gradient_norms=gradients.tower_norms, mean_loss=mean_loss,
                    learning_rate=learning_rate, summary_op=summary_op,
                    variables=[v.op.name for v in trained], skipped=gradients.skipped)


def _gradients(shared, var_list, loss_terms):
    """gradients.AveragedGradients of `var_list` for the stage's `loss_terms`: averaged on the
    variable device, or on every device's copies when replicated."""
    scale = shared.loss_scale.scale if shared.loss_scale else None
    if shared.copies is None:
        return gradients_lib.build_gradients(shared.towers, var_list, shared.regularization,
                                          loss_terms, variable_device=shared.variable_device,
                                          loss_scale=scale)
    return gradients_lib.build_replicated_gradients(
        shared.towers, var_list, shared.regularization, shared.copies, shared.reducer.sum,
        loss_terms, scale, shared.reducer.spec.num_workers)


def _update_ops(optimizer, grads_and_vars, shared):
    """Ops applying the averaged gradients and then the moving averages of the variables (or
    copies) they update."""
    trained = [variable for _, variable in grads_and_vars]
    if shared.wrap_optimizer is not None:
        wrapped = shared.wrap_optimizer(optimizer, shared.moving_average, trained)
        return [wrapped.apply_gradients(grads_and_vars, global_step=shared.global_step)]

    def apply_and_average():
        apply_op = optimizer.apply_gradients(grads_and_vars, global_step=shared.global_step)
        with tf.control_dependencies([apply_op]):
            return [apply_op, shared.moving_average.apply(trained)]

    if shared.loss_scale is None:
        return apply_and_average()
    return [loss_scaling.apply_if_finite(grads_and_vars, apply_and_average, shared.global_step,
                                         shared.loss_scale)]


def describe_stage(graph, index, end_step):
    """One log line: which stage starts, its steps and what it trains."""
    plan, ops = graph.plan, graph.stages[index]
    start = plan.stage_start(index)
    end = end_step if ops.stage.steps is None else min(end_step, start + ops.stage.steps)
    scopes = ", ".join(ops.stage.scopes) if ops.stage.scopes else "all scopes"
    terms = ", ".join(ops.stage.loss_terms) if ops.stage.loss_terms else "all loss terms"
    return (f"stage '{ops.stage.name}' ({index + 1} of {len(plan.stages)}): steps {start}-{end}, "
            f"training {len(ops.variables)} variables ({scopes}; {terms}; "
            f"{ops.stage.optimizer})")
