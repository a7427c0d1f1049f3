"""Towers: one replica of the model per device, sharing variables kept on one device.

This module knows nothing about Inception: it takes a `model_fn(*tower_inputs) -> {term: loss}`
and works for any model, which is what lets tests compare N towers with one device on a small
model, and what every stage of a training plan (optimizers.py) shares.

Variables are created by tower 0 and reused by the others through the *variable* scope, so
they are named `InceptionV3/...` whatever the tower; each tower's ops live under the *name*
scope `tower_i/`. Select variables by variable scope (see `variables_in_scopes`), never by a
tower's name scope.
"""

import dataclasses

import tensorflow as tf

tf1 = tf.compat.v1

VARIABLE_OP_TYPES = frozenset({"Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable"})


@dataclasses.dataclass(frozen=True)
class Tower:
    """One replica: its index, device, name scope and data loss terms (scalar tensors)."""
    index: int
    device: str
    name_scope: str
    loss_terms: dict

    def data_loss(self, term_names=None):
        """Sum of the selected loss terms (all when `term_names` is None): a scalar tensor."""
        names = sorted(self.loss_terms) if term_names is None else list(term_names)
        missing = [name for name in names if name not in self.loss_terms]
        if missing:
            raise ValueError(f"unknown loss term(s) {missing}; the model defines "
                             f"{sorted(self.loss_terms)}")
        return tf.add_n([self.loss_terms[name] for name in names], name="data_loss")


@dataclasses.dataclass(frozen=True)
class AveragedGradients:
    """Gradients averaged over towers, ready for `optimizer.apply_gradients`.

    skipped: names of variables of the var_list that no tower's loss reaches (left out).
    tower_norms: float32 [num_towers], the global norm of each tower's gradients (scaled by the
      loss scale when there is one): a NaN or Inf names the towers whose update was not finite.
    """
    grads_and_vars: list
    skipped: list
    tower_norms: tf.Tensor = None


def variables_on(variable_device, compute_device):
    """A device function: variables on `variable_device`, every other op on `compute_device`."""
    def place(op):
        return variable_device if op.type in VARIABLE_OP_TYPES else compute_device
    return place


def split_batch(tensors, num_towers):
    """Splits each tensor's first dimension into `num_towers` equal parts.

    Args:
      tensors: tuple of tensors with the same, statically known batch size B (B % N == 0).

    Returns:
      A list of N tuples; tuple i holds rows [i*B/N, (i+1)*B/N) of each tensor.
    """
    batch_size = tensors[0].shape[0]
    if batch_size is None or batch_size % num_towers:
        raise ValueError(f"a batch of {batch_size} examples cannot be split into {num_towers} "
                         "equal tower batches; make --batch_size a multiple of --num_gpus.")
    with tf.name_scope("split_batch"):
        parts = [tf.split(tensor, num_towers, axis=0) for tensor in tensors]
    return [tuple(part[index] for part in parts) for index in range(num_towers)]


def build_towers(model_fn, tower_inputs, devices, variable_device="/cpu:0"):
    """Builds one tower per device; variables are created by tower 0 and shared.

    Args:
      model_fn: callable(*inputs) -> {term name: scalar float32 loss (mean over the tower batch)}.
      tower_inputs: list of input tuples, one per tower.
      devices: list of device names, one per tower.
      variable_device: where every variable lives.

    Returns:
      A list of `Tower`.
    """
    if len(tower_inputs) != len(devices):
        raise ValueError(f"{len(tower_inputs)} tower inputs for {len(devices)} devices")
    towers = []
    for index, (inputs, device) in enumerate(zip(tower_inputs, devices)):
        with tf1.device(variables_on(variable_device, device)), \
                tf.name_scope(f"tower_{index}") as name_scope, \
                tf1.variable_scope(tf1.get_variable_scope(), reuse=index > 0,
                                   auxiliary_name_scope=False):
            loss_terms = model_fn(*inputs)
        if not loss_terms:
            raise ValueError("model_fn returned no loss terms")
        towers.append(Tower(index, device, name_scope, dict(loss_terms)))
    return towers


def regularization_loss(variable_device="/cpu:0"):
    """Sum of the graph's regularization losses (created once, with the variables), or 0: a
    float32 scalar (terms of layers built in bf16/fp16 are cast up)."""
    with tf.device(variable_device), tf.name_scope("regularization"):
        losses = [tf.cast(loss, tf.float32)
                  for loss in tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)]
        return tf.add_n(losses, name="total") if losses else tf.constant(0.0, name="total")


def tower_total_losses(towers, regularization, term_names=None):
    """Each tower's reported loss: its data terms plus the (shared) regularization; scalars."""
    totals = []
    for tower in towers:
        with tf.name_scope(f"{tower.name_scope}total_loss"):
            totals.append(tf.add(tower.data_loss(term_names), regularization, name="value"))
    return totals


def mean_over_towers(values, name="mean_loss"):
    """The mean of per-tower scalars: the loss we log, summarize and report."""
    return tf.reduce_mean(tf.stack(values), name=name)


def tower_gradients(towers, var_list, term_names=None, loss_scale=None):
    """Per-tower gradients of each tower's data loss (times `loss_scale`, a scalar tensor, when
    given) with respect to `var_list`.

    Returns:
      A list (one per tower) of lists aligned with var_list; an entry is None where the
      tower's loss does not depend on the variable.
    """
    per_tower = []
    for tower in towers:
        with tf.device(tower.device), tf.name_scope(f"{tower.name_scope}gradients"):
            loss = tower.data_loss(term_names)
            if loss_scale is not None:
                loss = loss * loss_scale
            per_tower.append(tf.gradients(loss, var_list))
    return per_tower


def average_gradients(per_tower_grads, var_list, device="/cpu:0"):
    """Averages gradients over towers on `device`, skipping variables no tower reaches.

    A variable whose gradient is None in every tower is left out (and named in `skipped`); one
    that is None in only some towers gets zero from those, which is exact for a mean of losses.

    Returns:
      (list of (averaged gradient, variable), list of skipped variable names).
    """
    num_towers = len(per_tower_grads)
    averaged, skipped = [], []
    with tf.device(device), tf.name_scope("average_gradients"):
        for position, variable in enumerate(var_list):
            grads = [tf.convert_to_tensor(tower[position]) for tower in per_tower_grads
                     if tower[position] is not None]
            if not grads:
                skipped.append(variable.op.name)
                continue
            total = grads[0] if len(grads) == 1 else tf.add_n(grads)
            averaged.append((total / float(num_towers), variable))
    return averaged, skipped


def build_gradients(towers, var_list, regularization, term_names=None, device="/cpu:0",
                    loss_scale=None):
    """Tower gradients of the selected loss terms, averaged, plus the regularization gradient.

    The regularization's gradient is computed once on `device` and added to the average, so it
    counts exactly once whatever the number of towers. Variables that no tower's data loss
    reaches are skipped entirely (weight decay alone does not move them). With `loss_scale`
    (fp16), the towers differentiate their scaled losses and the average is unscaled again.
    """
    if not var_list:
        raise ValueError("no variables to train: var_list is empty")
    per_tower = tower_gradients(towers, var_list, term_names, loss_scale)
    averaged, skipped = average_gradients(per_tower, var_list, device)
    if loss_scale is not None:
        with tf.device(device), tf.name_scope("unscale_gradients"):
            averaged = [(grad / loss_scale, variable) for grad, variable in averaged]
    trained = [variable for _, variable in averaged]
    with tf.device(device), tf.name_scope("regularization_gradients"):
        reg_grads = tf.gradients(regularization, trained) if trained else []
    grads_and_vars = [(grad if reg is None else grad + reg, variable)
                      for (grad, variable), reg in zip(averaged, reg_grads)]
    return AveragedGradients(grads_and_vars, skipped, gradient_norms(towers, per_tower, device))


def gradient_norms(towers, per_tower_grads, device="/cpu:0"):
    """float32 [num_towers]: each tower's gradient global norm, computed on its own device."""
    norms = []
    for tower, grads in zip(towers, per_tower_grads):
        with tf.device(tower.device), tf.name_scope(f"{tower.name_scope}gradient_norm"):
            present = [grad for grad in grads if grad is not None]
            norms.append(tf.cast(tf.linalg.global_norm(present), tf.float32) if present
                         else tf.constant(0.0))
    with tf.device(device):
        return tf.stack(norms, name="tower_gradient_norms")


def batch_norm_updates(towers):
    """Moving-statistics update ops of tower 0 only (one tower's batch stands for the step)."""
    return tf1.get_collection(tf1.GraphKeys.UPDATE_OPS, scope=towers[0].name_scope)


def variables_in_scopes(scopes, variables=None):
    """Trainable variables (or `variables`) whose name lies under one of the variable `scopes`.

    A scope matches whole name components: "InceptionV3/Logits" matches
    "InceptionV3/Logits/Conv2d_1c_1x1/weights" but not "InceptionV3/LogitsExtra/...".
    """
    variables = tf1.trainable_variables() if variables is None else variables
    prefixes = [scope.strip("/") + "/" for scope in scopes]
    return [v for v in variables if any(v.op.name.startswith(prefix) for prefix in prefixes)]
