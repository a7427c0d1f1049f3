"""Micro-batches (--accumulate_steps K): the towers built K times over one update's input, and
each micro-batch started only once the previous one's gradients are computed, so that one
micro-batch's activations are alive at a time."""

import tensorflow as tf

from inception.parallel import gpu_prefetch
from inception.parallel import towers as towers_lib

HELD_INPUT_NAME = "micro_batch_input"  # the identity op each input of a tower passes through


def one_micro_batch_at_a_time(towers, held_inputs, stage_ops, num_towers):
    """Makes each micro-batch's towers start only once the previous micro-batch's gradients
    are computed, so that one micro-batch's activations are alive at a time (accumulation's
    point: a larger update in the memory of one global batch).

    Each tower's inputs pass through identity ops (`held_inputs`, by tower index, as
    build_towers returns them); they get control inputs from the gradient norms of the previous
    micro-batch's towers, which need all of their gradients. Added after the fact (a private but
    long-stable Operation method) because the gradients exist only once every tower is built. A
    multi-stage plan (`stage_ops`, one step_graph.StageOps each) is left unordered: a stage's
    order would make the other stages compute its gradients too.
    """
    if len(stage_ops) > 1:
        return
    norms = stage_ops[0].tower_gradient_norms.op.inputs
    for tower in towers[num_towers:]:
        micro_batch = tower.index // num_towers
        previous = [norms[index].op for index in range((micro_batch - 1) * num_towers,
                                                       micro_batch * num_towers)]
        for op in held_inputs[tower.index]:
            op._add_control_inputs(previous)  # pylint: disable=protected-access


def build_towers(input_batch, model_fn, sharing, prefetch_inputs, micro_batches):
    """Splits the global batch over the towers, `micro_batches` times the devices of `sharing`
    (a sharing.VariableSharing; copied to them one step ahead when `prefetch_inputs`) and
    builds them (each with the variables `sharing` gives it); returns (towers,
    gpu_prefetch.PrefetchedInputs or None, held inputs: by tower index the identity ops its
    inputs pass through, for one_micro_batch_at_a_time; none with one micro-batch)."""
    tower_inputs = _tower_inputs(input_batch, sharing.tower_devices, micro_batches)
    tower_devices = list(sharing.tower_devices) * micro_batches
    prefetched = None
    if prefetch_inputs and input_batch.on_device is None:  # made on the devices: nothing to copy
        prefetched = gpu_prefetch.prefetch_to_devices(tower_inputs, tower_devices)
        tower_inputs = prefetched.tower_inputs
    held_inputs = []
    if micro_batches > 1:
        model_fn = _with_held_inputs(model_fn, held_inputs)
    return (towers_lib.build_towers(model_fn, tower_inputs, tower_devices,
                                    sharing.tower_scope), prefetched, held_inputs)


def _tower_inputs(input_batch, tower_devices, micro_batches):
    """Each tower's (images, labels), `micro_batches` times over `tower_devices`: the global
    batch split, or the batches made on the devices (InputBatch.on_device)."""
    if input_batch.on_device is None:
        return towers_lib.split_batch((input_batch.images, input_batch.labels),
                                      len(tower_devices) * micro_batches)
    rows = int(input_batch.images.shape[0]) // (len(tower_devices) * micro_batches)
    return [input_batch.on_device(device, rows, index)
            for index, device in enumerate(tower_devices)] * micro_batches


def _with_held_inputs(model_fn, held_inputs):
    """`model_fn` taking its inputs through identity ops in the tower's name scope, each
    call's ops appended to `held_inputs` (towers.build_towers calls it once per tower, in
    index order): what one_micro_batch_at_a_time orders."""
    def held_model_fn(*inputs):
        copies = tuple(tf.identity(tensor, name=HELD_INPUT_NAME) for tensor in inputs)
        held_inputs.append([copy.op for copy in copies])
        return model_fn(*copies)
    return held_model_fn
