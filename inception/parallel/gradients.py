"""The gradients of one update: each tower's (of its selected loss terms, times the loss scale
in fp16), averaged on the variables' device or, with replicated variables, summed across the
devices by the all-reduce so that every copy gets the same average; the regularization's
gradient added once; and each tower's gradient norm, which names the towers whose update was
not finite."""

import dataclasses

import tensorflow as tf

from inception.parallel import towers as towers_lib
from inception.parallel.devices import HOST_DEVICE

tf1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class AveragedGradients:
    """Gradients averaged over towers, ready for `optimizer.apply_gradients`.

    grads_and_vars: the averaged gradient of each variable the loss reaches (replicated: the
      first device's).
    skipped: names of variables of the var_list that no tower's loss reaches (left out).
    tower_norms: float32 [num_towers], the global norm of each tower's gradients (scaled by the
      loss scale when there is one): a NaN or Inf names the towers whose update was not finite.
    every_copy: replicated variables only: every device's (averaged gradient, its copy), the
      first device's first; empty otherwise.
    """
    grads_and_vars: list
    skipped: list
    tower_norms: tf.Tensor = None
    every_copy: list = ()

    @property
    def to_apply(self):
        """The (gradient, variable) pairs the optimizer applies: every copy when replicated."""
        return list(self.every_copy) or list(self.grads_and_vars)


def tower_gradients(towers, var_list, term_names=None, loss_scale=None, tower_var_lists=None):
    """Per-tower gradients of each tower's data loss (times `loss_scale`, a scalar tensor, when
    given) with respect to `var_list` (or, per tower, to `tower_var_lists[i]`: its copies).

    Returns:
      A list (one per tower) of lists aligned with var_list; an entry is None where the
      tower's loss does not depend on the variable.
    """
    per_tower = []
    for position, tower in enumerate(towers):
        variables = var_list if tower_var_lists is None else tower_var_lists[position]
        with tf.device(tower.device), tf.name_scope(f"{tower.name_scope}gradients"):
            loss = tower.data_loss(term_names)
            if loss_scale is not None:
                loss = loss * loss_scale
            per_tower.append(tf.gradients(loss, variables))
    return per_tower


def average_gradients(per_tower_grads, var_list, variable_device=HOST_DEVICE):
    """Averages gradients over towers on `variable_device`, skipping variables no tower
    reaches.

    A variable whose gradient is None in every tower is left out (and named in `skipped`); one
    that is None in only some towers gets zero from those, which is exact for a mean of losses.

    Returns:
      (list of (averaged gradient, variable), list of skipped variable names).
    """
    num_towers = len(per_tower_grads)
    averaged, skipped = [], []
    with tf.device(variable_device), tf.name_scope("average_gradients"):
        for position, variable in enumerate(var_list):
            grads = [tf.convert_to_tensor(tower[position]) for tower in per_tower_grads
                     if tower[position] is not None]
            if not grads:
                skipped.append(variable.op.name)
                continue
            total = grads[0] if len(grads) == 1 else tf.add_n(grads)
            averaged.append((total / float(num_towers), variable))
    return averaged, skipped


def build_gradients(towers, var_list, regularization, term_names=None,
                    variable_device=HOST_DEVICE, loss_scale=None):
    """Tower gradients of the selected loss terms, averaged, plus the regularization gradient.

    The regularization's gradient is computed once on `variable_device` and added to the
    average, so it counts exactly once whatever the number of towers. Variables that no
    tower's data loss reaches are skipped entirely (weight decay alone does not move them).
    With `loss_scale` (fp16), the towers differentiate their scaled losses and the average is
    unscaled again.
    """
    if not var_list:
        raise ValueError("no variables to train: var_list is empty")
    per_tower = tower_gradients(towers, var_list, term_names, loss_scale)
    averaged, skipped = average_gradients(per_tower, var_list, variable_device)
    if loss_scale is not None:
        with tf.device(variable_device), tf.name_scope("unscale_gradients"):
            averaged = [(grad / loss_scale, variable) for grad, variable in averaged]
    trained = [variable for _, variable in averaged]
    with tf.device(variable_device), tf.name_scope("regularization_gradients"):
        reg_grads = tf.gradients(regularization, trained) if trained else []
    grads_and_vars = [(grad if reg is None else grad + reg, variable)
                      for (grad, variable), reg in zip(averaged, reg_grads)]
    return AveragedGradients(grads_and_vars, skipped,
                             gradient_norms(towers, per_tower, variable_device))


def build_replicated_gradients(towers, var_list, regularization, variable_copies, reducer,
                               term_names=None, loss_scale=None):
    """Each device's gradients of its own copies, summed over every tower by an all-reduce and
    averaged on every device, plus each device's own regularization gradient: the average
    `build_gradients` computes, on every device at once.

    Args:
      variable_copies: copies.VariableCopies whose devices the towers were built on (tower t
        on device t % len(devices): micro-batches of one device are summed there first).
      reducer: all_reduce.GradientReducer: its `sum` adds lists of equally shaped tensors (one
        list per device) over every device, of every worker its spec's num_workers counts
        (the average divides by every tower of every worker).

    Returns AveragedGradients with `every_copy` set; a variable no tower reaches is skipped,
    one that only some towers reach gets zero from the others, as in average_gradients.
    """
    if not var_list:
        raise ValueError("no variables to train: var_list is empty")
    devices = variable_copies.devices
    tower_copies = [variable_copies.copies(var_list, tower.index % len(devices))
                    for tower in towers]
    per_tower = tower_gradients(towers, var_list, term_names, loss_scale, tower_copies)
    per_device = _sum_micro_batches(towers, per_tower, devices)
    reached = [position for position in range(len(var_list))
               if any(grads[position] is not None for grads in per_device)]
    skipped = [var_list[p].op.name for p in range(len(var_list)) if p not in reached]
    filled = []
    for index, (grads, device) in enumerate(zip(per_device, devices)):
        copies = variable_copies.copies(var_list, index)
        with tf.device(device), tf.name_scope(f"replica_{index}_gradients"):
            filled.append([tf.zeros_like(copies[p]) if grads[p] is None else grads[p]
                           for p in reached])
    summed = reducer.sum(filled) if reached else [[] for _ in devices]
    divisor = float(len(towers) * reducer.spec.num_workers)
    every_copy = []
    for index, (sums, device) in enumerate(zip(summed, devices)):
        copies = [variable_copies.copies(var_list, index)[p] for p in reached]
        with tf.device(device), tf.name_scope(f"replica_{index}_average"):
            averaged = [total / divisor for total in sums]
            if loss_scale is not None:
                averaged = [grad / loss_scale for grad in averaged]
            reg_loss = regularization if index == 0 else towers_lib.regularization_loss(
                device, variable_copies.regularization_terms(index))
            reg_grads = tf.gradients(reg_loss, copies) if copies else []
        every_copy.extend((grad if reg is None else grad + reg, copy)
                          for grad, reg, copy in zip(averaged, reg_grads, copies))
    first = every_copy[:len(reached)]
    return AveragedGradients(first, skipped, gradient_norms(towers, per_tower, devices[0]),
                             every_copy)


def _sum_micro_batches(towers, per_tower, devices):
    """Per device, each variable's gradient summed over that device's towers (None where none
    of them reaches it)."""
    per_device = []
    for index, device in enumerate(devices):
        mine = [grads for tower, grads in zip(towers, per_tower)
                if tower.index % len(devices) == index]
        with tf.device(device), tf.name_scope(f"replica_{index}_micro_batches"):
            sums = []
            for position in range(len(mine[0])):
                present = [grads[position] for grads in mine if grads[position] is not None]
                sums.append(None if not present else present[0] if len(present) == 1
                            else tf.add_n(present))
        per_device.append(sums)
    return per_device


def gradient_norms(towers, per_tower_grads, device=HOST_DEVICE):
    """float32 [num_towers]: each tower's gradient global norm, computed on its own device."""
    norms = []
    for tower, grads in zip(towers, per_tower_grads):
        with tf.device(tower.device), tf.name_scope(f"{tower.name_scope}gradient_norm"):
            present = [grad for grad in grads if grad is not None]
            norms.append(tf.cast(tf.linalg.global_norm(present), tf.float32) if present
                         else tf.constant(0.0))
    with tf.device(device):
        return tf.stack(norms, name="tower_gradient_norms")
