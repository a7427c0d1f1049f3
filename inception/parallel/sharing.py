"""How the towers share their variables: one class per way, the only place that tells them
apart when the training graph is built (step_graph.py asks the run's object, never which way
it is).

- `OneDevice` (--variable_update=parameter_server on one machine, the original's): every
  variable lives once, on the variable device; each tower reads it there and sends its
  gradients back, where they are averaged and applied.
- `Replicated` (--variable_update=replicated on one machine): every tower's device holds a copy
  of each trainable variable (copies.py); each device sums the towers' gradients with an
  all-reduce (all_reduce.py: NCCL between GPUs, the collective ring otherwise) and applies the
  same average to its own copy, so the copies stay equal. After every initialization or
  restore the copies are filled from the variables (`fill_op`).
- `AllReduceCluster` (a cluster without parameter servers): `Replicated` whose ring spans the
  same devices of every worker; each worker's loop hooks (distributed/collective.py) broadcast
  the chief's variables at the start.
- `SyncReplicasCluster` (a cluster with parameter servers): `OneDevice` on the parameter
  servers (the worker's device setter places the variables), whose update goes through
  TensorFlow's SyncReplicasOptimizer (distributed/worker.py makes it and runs its queues); only
  the chief updates the batch-norm statistics and the input position.

A new way is one new subclass answering the same questions: where a tower's variables come
from (`tower_scope`), the weight decay added to the loss (`regularization_loss`), which
variables get moving averages (`averaged_variables`), how the towers' gradients become one
update (`gradients`), how it is applied (`update_ops`) and what runs after every
initialization or restore (`fill_op`). Which one a run gets is decided once: `on_one_machine`
here, a cluster worker's own `variable_sharing` there.
"""

import tensorflow as tf

from inception.config import rules
from inception.parallel import all_reduce as all_reduce_lib
from inception.parallel import copies as copies_lib
from inception.parallel import gradients as gradients_lib
from inception.parallel import towers as towers_lib
from inception.parallel.devices import HOST_DEVICE

tf1 = tf.compat.v1


class VariableSharing:
    """What every way shares: the towers' devices, the device of the variables' own copy, and
    the update applied there with its moving averages (through dynamic loss scaling when on)."""
    variable_update = None  # the --variable_update value this way implements
    # Whether this process updates the batch-norm moving statistics and the input position
    # (averages.py).
    updates_statistics = True

    def __init__(self, tower_devices, variable_device):
        self.tower_devices = list(tower_devices)
        self.variable_device = variable_device

    def tower_scope(self, tower_index, device):
        """(device placement, variable-scope custom getter or None) to build tower
        `tower_index` on `device` in (towers.build_towers)."""
        raise NotImplementedError

    def regularization_loss(self):
        """The weight decay of the variables' own copy: a float32 scalar."""
        return towers_lib.regularization_loss(self.variable_device)

    def averaged_variables(self):
        """The variables given an exponential moving average (averages.py)."""
        return tf1.trainable_variables()

    def gradients(self, towers, var_list, regularization, loss_terms, loss_scale):
        """gradients.AveragedGradients of `var_list` for `loss_terms` (None: all), the towers'
        losses scaled by `loss_scale` (a tensor, or None) and unscaled again."""
        raise NotImplementedError

    def update_ops(self, optimizer, grads_and_vars, global_step, moving_average, loss_scale):
        """Ops applying `grads_and_vars` with `optimizer` and then the moving averages of the
        variables they update; with `loss_scale` (step/loss_scaling.py's LossScale), only when every
        gradient is finite."""
        trained = [variable for _, variable in grads_and_vars]

        def apply_and_average():
            apply_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
            with tf.control_dependencies([apply_op]):
                return [apply_op, moving_average.apply(trained)]

        if loss_scale is None:
            return apply_and_average()
        return [loss_scale.apply_if_finite(grads_and_vars, apply_and_average, global_step)]

    def fill_op(self):
        """The op to run after every initialization or restore, or None when nothing needs
        filling. Build it after the optimizers (their slots are filled too)."""
        return None


class OneDevice(VariableSharing):
    """Every variable once, on `variable_device`; the towers' gradients averaged there."""
    variable_update = rules.PARAMETER_SERVER

    def __init__(self, tower_devices, variable_device=HOST_DEVICE):
        super().__init__(tower_devices, variable_device)

    def tower_scope(self, tower_index, device):
        """Variables on the variable device, every other op on the tower's."""
        return towers_lib.variables_on(self.variable_device, device), None

    def gradients(self, towers, var_list, regularization, loss_terms, loss_scale):
        """The towers' gradients averaged on the variable device (gradients.build_gradients)."""
        return gradients_lib.build_gradients(towers, var_list, regularization, loss_terms,
                                             self.variable_device, loss_scale)


class SyncReplicasCluster(OneDevice):
    """OneDevice on a cluster's parameter servers: `wrap_optimizer(optimizer, moving_average,
    variables)` (distributed.ClusterWorker's) turns each update into a synchronous-replicas
    one, which also updates the moving averages; `is_chief`: this worker updates the shared
    statistics and input position (the others leave them to it, so they change in the same
    order every run)."""

    def __init__(self, tower_devices, variable_device, wrap_optimizer, is_chief):
        super().__init__(tower_devices, variable_device)
        self._wrap_optimizer = wrap_optimizer
        self.updates_statistics = is_chief

    def update_ops(self, optimizer, grads_and_vars, global_step, moving_average, loss_scale):
        """The synchronous-replicas update (never loss-scaled: config/rules.py refuses fp16
        on such a cluster)."""
        assert loss_scale is None, "loss scaling on a cluster with parameter servers"
        trained = [variable for _, variable in grads_and_vars]
        wrapped = self._wrap_optimizer(optimizer, moving_average, trained)
        return [wrapped.apply_gradients(grads_and_vars, global_step=global_step)]


class Replicated(VariableSharing):
    """A copy of every trainable variable on each of `tower_devices` (the first device's copy
    is the variable itself), gradients summed across them by all_reduce.AllReduceSpec `spec`."""
    variable_update = rules.REPLICATED

    def __init__(self, tower_devices, spec):
        super().__init__(tower_devices, list(tower_devices)[0])
        self.spec = spec
        self.copies = copies_lib.VariableCopies(self.tower_devices)
        self._reducer = all_reduce_lib.GradientReducer(self.tower_devices, spec)

    def tower_scope(self, tower_index, device):
        """Everything on the tower's device, reading that device's copies."""
        return device, self.copies.custom_getter(tower_index % len(self.tower_devices))

    def regularization_loss(self):
        """The weight decay of the first device's copies (the variables themselves)."""
        return towers_lib.regularization_loss(self.variable_device,
                                              self.copies.regularization_terms(0))

    def averaged_variables(self):
        """The variables and every device's copies: each copy averages its own values."""
        return tf1.trainable_variables() + self.copies.all_copies()

    def gradients(self, towers, var_list, regularization, loss_terms, loss_scale):
        """Every device's average of the towers' gradients, for its own copies
        (gradients.build_replicated_gradients)."""
        return gradients_lib.build_replicated_gradients(
            towers, var_list, regularization, self.copies, self._reducer, loss_terms,
            loss_scale)

    def fill_op(self):
        """Every copy (and its slots and average) set to the variable's value."""
        return self.copies.fill_op()


class AllReduceCluster(Replicated):
    """Replicated on this worker's towers, the all-reduce spanning every worker's
    (`spec.num_workers` of them, over the collective ring)."""

    def __init__(self, tower_devices, spec):
        assert spec.num_workers > 1 and spec.communication == all_reduce_lib.RING, spec
        super().__init__(tower_devices, spec)


def on_one_machine(placement):
    """The VariableSharing of a run on one machine placed by `placement` (devices.Placement):
    Replicated when it has an all-reduce spec, else OneDevice."""
    replicated = placement.variable_update == rules.REPLICATED
    return for_devices(placement.tower_devices, placement.all_reduce if replicated else None,
                       placement.variable_device)


def for_devices(tower_devices, all_reduce=None, variable_device=HOST_DEVICE):
    """The VariableSharing of towers on `tower_devices`: replicated with `all_reduce` (an
    all_reduce.AllReduceSpec; across workers when its num_workers > 1), else every variable on
    `variable_device`."""
    if all_reduce is None:
        return OneDevice(tower_devices, variable_device)
    kind = AllReduceCluster if all_reduce.num_workers > 1 else Replicated
    return kind(tower_devices, all_reduce)
