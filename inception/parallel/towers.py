"""Towers: one replica of the model per device (their gradients: gradients.py).

This module knows nothing about Inception: it takes a `model_fn(*tower_inputs) -> {term: loss}`
and works for any model, which is what lets tests compare N towers with one device on a small
model, and what every stage of a training plan (optimizers.py) shares.

Variables are created by tower 0 and reused by the others through the *variable* scope, so
they are named `InceptionV3/...` whatever the tower; each tower's ops live under the *name*
scope `tower_i/`. Select variables by variable scope (see `variables_in_scopes`), never by a
tower's name scope.

How the towers share them (--variable_update: on one device, or a copy on each) is
sharing.py's: it gives `build_towers` each tower's placement and custom getter.
"""

import dataclasses

import tensorflow as tf

from inception.config import plans
from inception.config import rules
from inception.parallel.devices import HOST_DEVICE

tf1 = tf.compat.v1

VARIABLE_OP_TYPES = frozenset({"Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable"})


@dataclasses.dataclass(frozen=True)
class ModelOutputs:
    """What a model_fn returns for one tower: its data loss terms ({name: scalar tensor}) and
    what the summaries show of it (None where the model has none): its logits and labels (the
    training precision), each example's weight in the loss, and the images as trained (after
    Mixup/CutMix). A model_fn may also return the loss terms alone, as a dict."""
    loss_terms: dict
    logits: tf.Tensor = None
    labels: tf.Tensor = None
    example_weights: tf.Tensor = None
    images: tf.Tensor = None


@dataclasses.dataclass(frozen=True)
class Tower:
    """One replica: its index, device, name scope, data loss terms (scalar tensors) and all
    its model returned (ModelOutputs)."""
    index: int
    device: str
    name_scope: str
    loss_terms: dict
    outputs: ModelOutputs = None

    def data_loss(self, term_names=None):
        """Sum of the selected loss terms (all when `term_names` is None): a scalar tensor."""
        names = sorted(self.loss_terms) if term_names is None else list(term_names)
        missing = [name for name in names if name not in self.loss_terms]
        if missing:
            raise plans.PlanError(f"unknown loss term(s) {missing}; the model defines "
                                  f"{sorted(self.loss_terms)}")
        return tf.add_n([self.loss_terms[name] for name in names], name="data_loss")


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
        raise rules.SettingsError(f"a batch of {batch_size} examples cannot be split into "
                                  f"{num_towers} equal tower batches; make --batch_size a "
                                  "multiple of --num_gpus.")
    with tf.name_scope("split_batch"):
        parts = [tf.split(tensor, num_towers, axis=0) for tensor in tensors]
    return [tuple(part[index] for part in parts) for index in range(num_towers)]


def build_towers(model_fn, tower_inputs, devices, tower_scope):
    """Builds one tower per device; variables are created by tower 0 and shared.

    Args:
      model_fn: callable(*inputs) -> ModelOutputs, or {term name: scalar float32 loss (mean
        over the tower batch)}.
      tower_inputs: list of input tuples, one per tower.
      devices: list of device names, one per tower.
      tower_scope: callable(tower index, device) -> (device placement, variable-scope custom
        getter or None): where a tower's ops and variables go (sharing.VariableSharing's).

    Returns:
      A list of `Tower`.
    """
    if len(tower_inputs) != len(devices):
        raise ValueError(f"{len(tower_inputs)} tower inputs for {len(devices)} devices")
    towers = []
    for index, (inputs, device) in enumerate(zip(tower_inputs, devices)):
        placed, getter = tower_scope(index, device)
        with tf1.device(placed), \
                tf.name_scope(f"tower_{index}") as name_scope, \
                tf1.variable_scope(tf1.get_variable_scope(), reuse=index > 0,
                                   custom_getter=getter, auxiliary_name_scope=False):
            outputs = model_fn(*inputs)
        if not isinstance(outputs, ModelOutputs):
            outputs = ModelOutputs(dict(outputs or {}))
        if not outputs.loss_terms:
            raise ValueError("model_fn returned no loss terms")
        towers.append(Tower(index, device, name_scope, dict(outputs.loss_terms), outputs))
    return towers


def regularization_loss(variable_device=HOST_DEVICE, terms=None):
    """Sum of the graph's regularization losses (or of `terms`, a list of them), one per
    variable, or 0: a float32 scalar (terms of layers built in bf16/fp16 are cast up).

    One per variable because a layer adds its weights' term again in every tower when a
    custom getter hands it a cast of the variable rather than the variable (bf16/fp16 towers,
    mixed_precision.py): it cannot tell that it reuses a weight.
    """
    if terms is None:
        terms = tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
    first_of_each = {}
    for loss in terms:
        first_of_each.setdefault(regularized_variable(loss) or loss.op.name, loss)
    with tf.device(variable_device), tf.name_scope("regularization"):
        losses = [tf.cast(loss, tf.float32) for loss in first_of_each.values()]
        return tf.add_n(losses, name="total") if losses else tf.constant(0.0, name="total")


def regularized_variable(loss):
    """The name of the variable a regularization loss reads, found by walking back through its
    few ops; None when it reads none."""
    pending, seen = [loss.op], set()
    while pending:
        op = pending.pop()
        if op.type in ("VariableV2", "VarHandleOp"):
            return op.name
        seen.add(op.name)
        pending.extend(tensor.op for tensor in op.inputs if tensor.op.name not in seen)
    return None


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
