"""Batch norm over the towers of a group (--sync_batch_norm): each layer's mean and variance
computed over every example the group's towers hold in one step (or one micro-batch), so that
small tower batches normalize with the statistics of the global batch and the moving statistics
are the same on every tower.

Without it a tower normalizes with its own slice's statistics and tower 0's updates the moving
statistics (the original's rule, towers.batch_norm_updates): that is tf-slim's batch norm,
untouched. With it, every batch-norm layer of a tower in training is this module's
`TowerStatistics.batch_norm`, which creates the same variables under the same names (a
checkpoint does not tell the two apart) and sums over the group, with TensorFlow's collective
(`CollectiveReduceV2`, the ring that all_reduce.py also uses: across the devices of a machine
and the workers of a cluster), first each channel's sum (the mean), then its squared
deviations from that mean (the variance: two small collectives a layer rather than Keras's one
of sums and squared sums, which cancel where a channel's mean is large against its spread).
The sum is differentiable: its gradient is the same collective sum of the towers' gradients,
so every tower backpropagates through the global statistics (what timm's --sync-bn, Horovod's
and Keras's SyncBatchNormalization compute). Keras's layer needs a distribution strategy's replica
context, which our towers do not run in: hence this one.

Groups (--batch_norm_group_size, NVIDIA's BN_GROUP): consecutive towers of the whole cluster,
`group_size` at a time, each group its own collective group; micro-batches of accumulation
each normalize over their own micro-batch of the group (statistics per micro-batch).
"""

import dataclasses

import tensorflow as tf

from inception.parallel import all_reduce

tf1 = tf.compat.v1

# Each micro-batch's layers take instance keys from their own block: four per layer (two sums,
# each with its gradient's); Inception v3 has 94 batch-norm layers.
KEYS_PER_MICRO_BATCH = 1000


@dataclasses.dataclass(frozen=True)
class BatchNormGroups:
    """How the towers of a run share batch-norm statistics.

    group_size: towers per group, dividing num_workers x towers_per_worker; towers_per_worker:
    the towers of one process (one per device); first_device: this process's first device among
    every worker's (worker index x towers_per_worker); micro_batches: --accumulate_steps.
    """
    group_size: int
    towers_per_worker: int
    first_device: int = 0
    micro_batches: int = 1

    def for_tower(self, index):
        """The TowerStatistics of this process's tower `index`, counted in build order (the
        towers of micro-batch 0 first, as micro_batches.build_towers builds them)."""
        micro_batch, device = divmod(index, self.towers_per_worker)
        group = (self.first_device + device) // self.group_size
        return TowerStatistics(
            group_key=all_reduce.BATCH_NORM_GROUP_KEYS + group, group_size=self.group_size,
            first_instance_key=all_reduce.BATCH_NORM_INSTANCE_KEYS
            + micro_batch * KEYS_PER_MICRO_BATCH)


class TowerStatistics:
    """One tower's batch norm over its group; build the tower's layers with `batch_norm` as
    their normalizer (network.inception_logits does)."""

    def __init__(self, group_key, group_size, first_instance_key):
        self.group_key, self.group_size = group_key, group_size
        self.first_key = self._next_key = first_instance_key
        self._last_key = first_instance_key + KEYS_PER_MICRO_BATCH

    def batch_norm(self, inputs, decay=0.999, center=True, scale=False, epsilon=0.001,
                   updates_collections=tf1.GraphKeys.UPDATE_OPS, variables_collections=None,
                   scope=None, **unused):
        """tf-slim's batch_norm in training (its arguments, NHWC) with the group's statistics.

        Args:
          inputs: float32, bfloat16 or float16 [batch, height, width, channels]; the statistics
            and the parameters are float32, the output has the input's dtype.
          decay: float or scalar float32 tensor, of the moving statistics.
          updates_collections: where the moving statistics' update ops go (UPDATE_OPS: the
            step runs tower 0's once its update is applied, averages.py).
          variables_collections: tf-slim's dict of extra collections per variable.

        Returns the normalized `inputs` (same shape and dtype).
        """
        channels = inputs.shape[-1]
        with tf1.variable_scope(scope, "BatchNorm", [inputs]):
            params = {name: _variable(name, channels, initializer, trainable, name,
                                      variables_collections)
                      for name, initializer, trainable, wanted in (
                          ("beta", tf1.zeros_initializer(), True, center),
                          ("gamma", tf1.ones_initializer(), True, scale),
                          ("moving_mean", tf1.zeros_initializer(), False, True),
                          ("moving_variance", tf1.ones_initializer(), False, True))
                      if wanted}
            mean, variance = self.moments(tf.cast(inputs, tf.float32))
            count = self.group_count(inputs)
            # The moving variance takes the unbiased estimate, as tf-slim's (Keras's) does.
            unbiased = variance * (count / max(count - 1, 1))
            for moving, value in ((params["moving_mean"], mean),
                                  (params["moving_variance"], unbiased)):
                update = tf1.assign_sub(moving, (moving - value) * (1.0 - decay))
                if updates_collections:
                    tf1.add_to_collections(updates_collections, update)
            outputs = tf.nn.batch_normalization(
                tf.cast(inputs, tf.float32), mean, variance, params.get("beta"),
                params.get("gamma"), epsilon)
        return tf.cast(outputs, inputs.dtype)

    def moments(self, inputs):
        """(mean, variance) per channel of float32 [batch, height, width, channels] `inputs`
        over every example of the group: float32 [channels] each, the variance without
        Bessel's correction (what the batch is normalized with)."""
        axes = [0, 1, 2]
        count = self.group_count(inputs)
        mean = self.sum_over_group(tf.reduce_sum(inputs, axes)) / count
        deviations = tf.reduce_sum(tf.math.squared_difference(inputs, mean), axes)
        return mean, self.sum_over_group(deviations) / count

    def group_count(self, inputs):
        """The values per channel the group's statistics are over: the group's towers times
        one tower's batch x height x width of `inputs` (equal in every tower)."""
        return inputs.shape[:3].num_elements() * self.group_size

    def sum_over_group(self, tensor):
        """`tensor` summed over the towers of the group, differentiably (its gradient: the same
        sum of the towers' gradients)."""
        if self.group_size == 1:
            return tensor
        forward_key, gradient_key = self._take_keys()

        @tf.custom_gradient
        def summed(value):
            total = all_reduce.collective_sum(value, self.group_size, self.group_key,
                                              forward_key, name="sum_over_batch_norm_group")
            device = total.device

            def gradient(upstream):
                with tf.device(device):
                    return all_reduce.collective_sum(upstream, self.group_size,
                                                     self.group_key, gradient_key)
            return total, gradient
        return summed(tensor)

    def _take_keys(self):
        if self._next_key + 2 > self._last_key:
            raise ValueError(f"more than {KEYS_PER_MICRO_BATCH // 4} batch-norm layers in one "
                             "tower; raise synced_batch_norm.KEYS_PER_MICRO_BATCH")
        keys = (self._next_key, self._next_key + 1)
        self._next_key += 2
        return keys


def _variable(name, channels, initializer, trainable, role, variables_collections):
    """A float32 [channels] batch-norm variable made as tf-slim makes it (a model variable in
    its role's collections), through the enclosing scopes' custom getters (replicated copies,
    float32 storage under low precision)."""
    collections = [tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES]
    extra = (variables_collections or {}).get(role) if isinstance(
        variables_collections, dict) else variables_collections
    collections += list(extra or [])
    return tf1.get_variable(name, [channels], tf.float32, initializer=initializer,
                            trainable=trainable, collections=collections, use_resource=True)
