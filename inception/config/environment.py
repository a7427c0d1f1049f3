"""Where a task learns its cluster when no cluster flag describes it: from the environment its
scheduler starts it in.

- `TF_CONFIG` (Kubeflow's TFJob, Vertex AI): `{"cluster": {"ps": [...], "worker": [...]},
  "task": {"type": "worker", "index": 0}}`; a `chief` (or `master`) task is worker 0.
- A Kubernetes JobSet (deploy/kubernetes/jobset.yaml): one Indexed Job of N pods; a pod's task
  is its `JOB_COMPLETION_INDEX`, and its peers are the JobSet's stable host names
  `<jobset>-<replicated job>-0-<index>.<subdomain>` (the subdomain defaults to the JobSet's
  name), from `JOBSET_NAME`, `REPLICATED_JOB_NAME` and `JOB_COMPLETIONS` (the manifest passes
  the pod's labels and its completions), all listening on `--cluster_port`.
- Slurm, inside `srun`: TensorFlow's own SlurmClusterResolver reads the step's tasks and nodes
  (`SLURM_PROCID`, `SLURM_STEP_NUM_TASKS`, `SLURM_STEP_NODELIST`,
  `SLURM_STEP_TASKS_PER_NODE`); tasks listen on `--cluster_port`, the next ports for a node's
  further tasks. Every task is a worker of an all-reduce cluster.

Free of TensorFlow except for Slurm, whose resolver is TensorFlow's (loaded only there).
"""

import dataclasses
import json

from common import cli

DEFAULT_PORT = 2222  # the port TFJob's and TensorFlow's examples give every task


class ClusterConfigError(cli.UserError):
    """The cluster flags (or the scheduler's environment) do not describe a usable cluster; the
    message says what to change."""


@dataclasses.dataclass(frozen=True)
class TaskFromEnvironment:
    """The task and cluster a scheduler's environment describes, in this trainer's terms.
    single_task: the cluster is this one chief (or worker) task alone, as single-replica jobs
    describe it; source: the scheduler, as messages name it."""
    job_name: str
    task_id: int
    ps_hosts: tuple
    worker_hosts: tuple
    single_task: bool = False
    source: str = "TF_CONFIG"


# How a message names a setting that came from a scheduler (a worker index counts the chief).
_SETTING_NAMES = {"job_name": "{}'s task type", "task_id": "{}'s task index",
                  "ps_hosts": "{}'s ps list", "worker_hosts": "{}'s worker list"}


def setting_name(source, field):
    """How a message names the setting `field` that came from the scheduler `source`."""
    if source == "TF_CONFIG" and field == "worker_hosts":
        return "TF_CONFIG's chief and worker list"
    return _SETTING_NAMES[field].format(source)


def from_environment(environ, port, explicit=False):
    """TaskFromEnvironment from the environment variables `environ` (TF_CONFIG, then a
    JobSet's, then Slurm's), or None when none describes a cluster. With `explicit` (cluster
    flags were given) only TF_CONFIG is read, to check the flags against it."""
    if environ.get("TF_CONFIG", "").strip():
        return parse_tf_config(environ["TF_CONFIG"])
    if explicit:
        return None
    if "JOBSET_NAME" in environ and "JOB_COMPLETION_INDEX" in environ:
        return from_jobset(environ, port)
    if "SLURM_STEP_NUM_TASKS" in environ and "SLURM_PROCID" in environ:
        return from_slurm(environ, port)
    return None


def parse_tf_config(text):
    """TaskFromEnvironment from TF_CONFIG's JSON. A `chief` (or `master`) task becomes worker 0
    and the workers follow it, as this trainer's chief is worker 0."""
    try:
        config = json.loads(text)
        cluster, task = config.get("cluster", {}), config.get("task", {})
        chief = list(cluster.get("chief", cluster.get("master", [])))
        workers = tuple(chief + list(cluster.get("worker", [])))
        ps_hosts = tuple(cluster.get("ps", []))
        kind, index = task.get("type", ""), int(task.get("index", 0))
    except (ValueError, AttributeError, TypeError) as error:
        raise ClusterConfigError(f"TF_CONFIG is not the JSON schedulers write ({error}); fix or "
                                 "unset it (to train on this machine alone), or pass "
                                 "--job_name/--task_id/--ps_hosts/--worker_hosts.") from None
    if kind in ("chief", "master"):
        kind = "worker"
    elif kind == "worker":
        index += len(chief)
    elif kind != "ps":
        raise ClusterConfigError(f"TF_CONFIG names a task of type {kind!r}; this trainer runs ps "
                                 "and worker (or chief) tasks (evaluate with //inception:eval).")
    return TaskFromEnvironment(kind, index, ps_hosts, workers,
                               single_task=not ps_hosts and len(workers) == 1)


def from_jobset(environ, port):
    """TaskFromEnvironment of a JobSet's pod (see the module docstring)."""
    try:
        index, count = int(environ["JOB_COMPLETION_INDEX"]), int(environ["JOB_COMPLETIONS"])
        name, job = environ["JOBSET_NAME"], environ["REPLICATED_JOB_NAME"]
    except (KeyError, ValueError) as error:
        raise ClusterConfigError(
            f"a JobSet pod needs JOB_COMPLETION_INDEX, JOB_COMPLETIONS, JOBSET_NAME and "
            f"REPLICATED_JOB_NAME ({error!r} is missing or not a number); see "
            "deploy/kubernetes/jobset.yaml, or pass --job_name/--task_id/--worker_hosts.") \
            from None
    subdomain = environ.get("JOBSET_SUBDOMAIN") or name
    hosts = tuple(f"{name}-{job}-0-{task}.{subdomain}:{port}" for task in range(count))
    return TaskFromEnvironment("worker", index, (), hosts, single_task=count == 1,
                               source="the JobSet")


def from_slurm(environ, port):
    """TaskFromEnvironment of a task of a Slurm step, from TensorFlow's SlurmClusterResolver
    (which reads the process's environment; `environ` must be it); None for a step of one
    task."""
    tasks = int(environ["SLURM_STEP_NUM_TASKS"])
    if tasks == 1:
        return None  # a step of one task: this machine alone
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    try:
        per_node = max(int(count.split("(")[0])
                       for count in environ["SLURM_STEP_TASKS_PER_NODE"].split(","))
        # Its GPU split is not ours (--num_gpus, and Slurm's own --gpus-per-task, choose the
        # towers' GPUs): one "GPU" per task keeps its bookkeeping from asking nvidia-smi or
        # changing CUDA_VISIBLE_DEVICES.
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs={"worker": tasks}, port_base=port, gpus_per_node=per_node, gpus_per_task=1,
            auto_set_gpu=False)
        workers = tuple(resolver.cluster_spec().job_tasks("worker"))
        _, task = resolver.get_task_info()
    except (KeyError, ValueError, RuntimeError) as error:
        raise ClusterConfigError(f"cannot read the Slurm step's tasks ({error}); start the "
                                 "tasks with srun, or pass --job_name/--task_id/"
                                 "--worker_hosts.") from None
    return TaskFromEnvironment("worker", task, (), workers, source="Slurm")


def check_against_flags(task, job_name, task_id, ps_hosts, worker_hosts):
    """Raises ClusterConfigError when a cluster flag contradicts TF_CONFIG (flags win, but a
    task started with both should not silently be two different tasks)."""
    clashes = []
    if job_name and (job_name, task_id) != (task.job_name, task.task_id):
        clashes.append(f"--job_name={job_name} --task_id={task_id} but {task.source} says "
                       f"{task.job_name} {task.task_id}")
    for flag, given, listed in (("ps_hosts", ps_hosts, task.ps_hosts),
                                ("worker_hosts", worker_hosts, task.worker_hosts)):
        if given and tuple(given) != tuple(listed):
            clashes.append(f"--{flag}={','.join(given)} but {task.source} lists "
                           f"{','.join(listed)}")
    if clashes:
        raise ClusterConfigError("; ".join(clashes) + f"; drop those flags or unset "
                                 f"{task.source}.")
