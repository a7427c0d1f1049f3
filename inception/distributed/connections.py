"""What every task of a cluster shares: the limits of every wait, the errors, reaching the
other tasks, this task's server, and the queue through which workers say they are done."""

import os
import socket
import time

import tensorflow as tf

from common import cli
from common import error_lines
from inception.config.cluster import JOBS
from inception.config.cluster import split_address
from inception.config.recovery import PROBE_CONNECT_TIMEOUT_SECS
from inception.config.recovery import STOP_REASONS

tf1 = tf.compat.v1

CONNECTION_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError,
                     tf.errors.CancelledError, tf.errors.DeadlineExceededError,
                     tf.errors.OutOfRangeError)
DONE_QUEUE_NAME = "inception_workers_done"
# Flags on parameter server 0 (each a variable, set once it is initialized), the same in every
# graph that names them: the chief's model is ready, and why training stopped (the chief's
# early stopping, or a signal to a task: SIGTERM is a preemption).
READY_FLAG_NAME = "inception_model_ready"
CHIEF_SHAPE_NAME = "inception_chief_step_shape"  # set with the ready flag: member.step_shape
STOP_FLAG_NAMES = dict(zip(STOP_REASONS, ("inception_interrupted", "inception_preempted",
                                          "inception_stopped_early")))


class ClusterError(cli.UserError):
    """A task of the cluster failed, vanished or did not answer in time; one line for the user."""


class TaskLostError(ClusterError):
    """A task died, stopped answering or did not come up in time: starting every task again
    (from the last checkpoint) is the way on, so the task exits with the restart code."""
    retryable = True


def is_reachable(address, timeout=PROBE_CONNECT_TIMEOUT_SECS):
    """True when something accepts TCP connections at `host:port` (a running task's server)."""
    try:
        with socket.create_connection(split_address(address), timeout=timeout):
            return True
    except OSError:
        return False


def unreachable_tasks(cluster, settle_secs=0.0):
    """'ps 0 at host:port, ...' for the other tasks that do not accept connections now.

    With `settle_secs`, probes again every half second for that long while every task still
    answers, so that a task that has just died is named.
    """
    deadline = time.monotonic() + settle_secs
    while True:
        down = [f"{job} {task} at {address}" for job in JOBS
                for task, address in enumerate(cluster.hosts(job))
                if (job, task) != (cluster.job_name, cluster.task_id)
                and not is_reachable(address)]
        if down or time.monotonic() >= deadline:
            return ", ".join(down)
        time.sleep(0.5)


def start_server(cluster, config):
    """Starts this task's gRPC server (tf.compat.v1.train.Server) and returns it."""
    # Fail-fast RPCs: without this a call to a task that died is retried forever, so a session
    # cannot even be closed after a peer was lost (measured: the chief hangs at shutdown).
    os.environ.setdefault("GRPC_FAIL_FAST", "true")
    try:
        return tf1.train.Server(cluster.cluster_spec(), job_name=cluster.job_name,
                                task_index=cluster.task_id, config=config, start=True)
    except (tf.errors.OpError, ValueError) as error:
        raise ClusterError(f"cannot start the {cluster.job_name} {cluster.task_id} server at "
                           f"{cluster.address} ({error_lines.cause_of(error)}); is that port in "
                           "use, or is the address not one of this machine's?") from None


def task_device(job, task):
    """The device prefix of task `task` of `job` ('ps' or 'worker'), e.g. '/job:worker/task:1'."""
    return f"/job:{job}/task:{task}"


def ps_device(task):
    """The CPU of parameter server `task`."""
    return f"{task_device('ps', task)}/device:CPU:0"


def ps_flag(name):
    """(is_set, set_op) of the flag `name` on parameter server 0: a bool scalar and the op
    that sets it, for good."""
    with tf.device(ps_device(0)):
        flag = tf1.Variable(True, trainable=False, collections=[], name=name)
        is_set = tf1.is_variable_initialized(flag)
        is_set.mark_used()  # not every task reads every flag
        return is_set, flag.initializer


def stop_flags():
    """({reason: is_set}, {reason: set_op}) of the STOP_FLAG_NAMES flags."""
    flags = {reason: ps_flag(name) for reason, name in STOP_FLAG_NAMES.items()}
    return ({reason: is_set for reason, (is_set, _) in flags.items()},
            {reason: set_op for reason, (_, set_op) in flags.items()})


def reasons_set(fetched):
    """The stop reasons whose flags are set in `fetched` ({reason: bool}, as stop_flags'
    first dict is fetched)."""
    return {reason for reason, is_set in fetched.items() if is_set}


# Why a worker ended, as it tells the parameter servers (done_message): None for the end of
# training or an error, else what set its stop flag.
DONE_REASONS = (None,) + STOP_REASONS
_DONE_TASKS = 1 << 16  # a done message is reason index * _DONE_TASKS + task id


def done_message(task_id, reason):
    """What worker `task_id` puts into the done queues when it ends for `reason` (one of
    DONE_REASONS)."""
    return DONE_REASONS.index(reason) * _DONE_TASKS + task_id


def read_done_message(message):
    """(task id, reason) of a done_message."""
    return message % _DONE_TASKS, DONE_REASONS[message // _DONE_TASKS]


def done_queue(ps_task):
    """The queue on parameter server `ps_task` into which each worker puts a done_message when
    it ends; the same shared queue whichever graph (a worker's or the server's own) defines it.
    Build it, and the ops that use it, under tf.device(ps_device(ps_task))."""
    return tf1.FIFOQueue(-1, tf.int32, shapes=(), shared_name=DONE_QUEUE_NAME,
                         name=f"{DONE_QUEUE_NAME}_{ps_task}")
