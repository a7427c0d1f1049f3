"""How the towers share their variables (--variable_update): `parameter_server`, the
original's (one copy on one device, towers read it and send their gradients there), or
`replicated` (a copy per tower's device, gradients summed by an all-reduce: all_reduce.py), and
over which link the all-reduce runs. One decision, made once per run by devices.py."""

from inception.config import rules
from inception.parallel import all_reduce as all_reduce_lib

# What --variable_update=auto picks where replicated variables do not win. CPU towers (virtual
# devices of one CPU): replicated measured 1.00-1.15x the step time and 1.29x the peak memory
# of parameter_server (bench/results/replicated-cpu-2core.json): they share one memory, so a
# copy per tower saves no transfer. One GPU: its towers share that GPU alike (the GPU check's
# ours_replicated against ours_split_gpu will tell).
AUTO_UPDATE_CPU_TOWERS = rules.PARAMETER_SERVER
AUTO_UPDATE_ONE_GPU = rules.PARAMETER_SERVER


def choose(requested, placement, cluster=None, variable_device="auto"):
    """'parameter_server' or 'replicated' for --variable_update=`requested` ('auto' or one of
    them; the combinations no run can use are refused by config/rules.py).

    'auto': on a cluster, what it has (parameter servers, or none: replicated); an explicit
    --variable_device asks for parameter_server; towers on two or more GPUs: replicated (an
    all-reduce instead of one device that every GPU reads the weights from and sends its
    gradients to; bench/scaling.py's model); CPU towers and one GPU: the measured choice above.
    """
    if requested != rules.AUTO:
        return requested
    if cluster is not None:
        return rules.REPLICATED if cluster.collective else rules.PARAMETER_SERVER
    if variable_device != rules.AUTO:
        return rules.PARAMETER_SERVER
    if placement.device_type == "cpu":
        return AUTO_UPDATE_CPU_TOWERS
    if placement.physical_gpus > 1:
        return rules.REPLICATED
    return AUTO_UPDATE_ONE_GPU


def all_reduce_spec(placement, num_buffers, num_workers=1):
    """How replicated variables sum their gradients on `placement`: NCCL when every tower has
    a GPU of its own on one machine, the collective ring otherwise (CPU devices, virtual GPUs
    sharing one GPU, which NCCL refuses, and the workers of a cluster)."""
    own_gpus = placement.device_type == "gpu" and not placement.virtual_gpu_memory_mb
    communication = all_reduce_lib.NCCL if own_gpus and num_workers == 1 else all_reduce_lib.RING
    return all_reduce_lib.AllReduceSpec(communication, num_buffers, num_workers)
