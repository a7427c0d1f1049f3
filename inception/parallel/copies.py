"""Replicated variables (--variable_update=replicated): every device holds its own copy of every
trainable variable, and every copy applies the same all-reduced update (all_reduce.py), so the
copies stay equal without a device that all towers read the weights from.

The first device's copy is the variable itself, created by tower 0 under its original name
(`InceptionV3/...`) and kept in the trainable-variable collection: it is what a stage's scopes
select, what summaries show, what checkpoints hold. Each other device gets a copy named
`replica_<device>/<name>`, created through a variable-scope custom getter while that device's
tower is built, started at zero and filled from the first device by `fill_op` (after every
initialization or restore): not trainable, never saved, reached through `VariableCopies` only. The
optimizer's slots and the moving averages of a copy get names under the same prefix, so
`is_copy` tells every one of them by its name.

Only trainable variables are copied. Batch-norm moving statistics stay one variable, on the
first device: only tower 0 updates them (the original's rule), and a tower in training mode
never reads them.
"""

import re

import tensorflow as tf

from inception.parallel import towers

tf1 = tf.compat.v1

COPY_PREFIX = "replica_"
_COPY_NAME = re.compile(rf"^{COPY_PREFIX}(\d+)/(.+)$")


def copy_name(device_index, name):
    """The name of device `device_index`'s copy of the variable `name`."""
    return f"{COPY_PREFIX}{device_index}/{name}"


def is_copy(variable):
    """Whether `variable` belongs to a copy on a device other than the first (the copy itself,
    its optimizer slots or its moving average): never saved, never restored."""
    return _COPY_NAME.match(variable.op.name) is not None


def saved_variables(variables):
    """{name: variable} of `variables` without the copies: what a checkpoint holds, the same in
    every --variable_update mode."""
    return {v.op.name: v for v in variables if not is_copy(v)}


class VariableCopies:
    """The copies of the trainable variables on each of `devices` (device 0: the variables).

    Build tower t on device `t % len(devices)` inside `tf1.variable_scope(...,
    custom_getter=variable_copies.custom_getter(device_index))`; afterwards `copies` maps
    variables to one device's copies and `regularization_terms` gives that device's weight
    decay.
    """

    def __init__(self, devices):
        self.devices = list(devices)
        self._copies = [dict() for _ in self.devices]  # per device: {variable ref: copy}

    def custom_getter(self, device_index):
        """A variable-scope custom getter for towers on device `device_index`, or None for the
        first device (its towers use the variables themselves)."""
        if device_index == 0:
            return None
        copies = self._copies[device_index]

        def copying_getter(getter, name, *args, **kwargs):
            variable = getter(name, *args, **kwargs)
            if variable.ref() not in {v.ref() for v in tf1.trainable_variables()}:
                return variable  # batch-norm statistics and other state: the first device's
            if variable.ref() not in copies:
                # Zeros, not the variable's initializer: a random one would draw numbers the
                # copy never keeps (fill_op fills it). The regularizer, when the caller passes
                # one, adds the copy's weight decay to the graph's collection, as a layer that
                # regularizes its own weights does: regularization_terms sorts them out.
                copies[variable.ref()] = getter(
                    copy_name(device_index, variable.op.name), shape=variable.shape,
                    dtype=variable.dtype.base_dtype, initializer=tf1.zeros_initializer(),
                    regularizer=kwargs.get("regularizer"), trainable=False,
                    reuse=tf1.AUTO_REUSE, collections=[tf1.GraphKeys.GLOBAL_VARIABLES])
            return copies[variable.ref()]
        return copying_getter

    def copies(self, variables, device_index):
        """Device `device_index`'s copy of each of `variables` (the variables themselves on
        device 0); KeyError for a variable no tower on that device used."""
        if device_index == 0:
            return list(variables)
        return [self._copies[device_index][variable.ref()] for variable in variables]

    def all_copies(self):
        """Every copy on the devices other than the first."""
        return [copy for copies in self._copies[1:] for copy in copies.values()]

    @staticmethod
    def regularization_terms(device_index):
        """The graph's regularization losses that read device `device_index`'s copies (device
        0: the variables themselves): each device's weight decay, computed on its own copies."""
        return [loss for loss in tf1.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
                if _device_read_by(loss) == device_index]

    def fill_op(self):
        """An op setting every copy in the graph (the copies, their optimizer slots and moving
        averages) to its original's value: run after every initialization or restore, so that
        a restore of the originals fills every copy. Build it after the optimizers."""
        return fill_op(tf1.global_variables())


def _device_read_by(loss):
    """The device index of the copy a regularization loss reads (0: a variable itself)."""
    match = _COPY_NAME.match(towers.regularized_variable(loss) or "")
    return int(match.group(1)) if match else 0


def fill_op(variables):
    """An op setting every copy among `variables` to its original's value (a no-op without
    copies)."""
    originals = {v.op.name: v for v in variables if not is_copy(v)}
    assignments = []
    with tf.name_scope("fill_copies"):
        for variable in variables:
            match = _COPY_NAME.match(variable.op.name)
            if match:
                with tf.device(variable.device):
                    assignments.append(variable.assign(originals[match.group(2)]))
    return tf.group(*assignments, name="fill_copies")
