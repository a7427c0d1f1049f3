"""What every worker task of a cluster shares, beside parameter servers or not: its server, its
device names, waiting for the other tasks at start-up, every call into its session bounded by a
timeout and a watchdog, and the error that names the tasks that do not answer.

worker.py (a worker beside parameter servers) and collective.py (a worker of a cluster without
them) build their `session_loop.run_training` hooks on it.
"""

import contextlib
import time

import tensorflow as tf

from common import cli
from common import error_lines
from inception.config.cluster import ClusterConfigError
from inception.config.recovery import LOST_TASK_SETTLE_SECS
from inception.config.recovery import PROBE_INTERVAL_SECS
from inception.config.recovery import SHUTDOWN_TIMEOUT_SECS
from inception.distributed.connections import is_reachable
from inception.distributed.connections import start_server
from inception.distributed.connections import TaskLostError
from inception.distributed.connections import task_device
from inception.distributed.connections import unreachable_tasks
from inception.distributed.watchdog import Watchdog
from inception.inputs import service
from inception.loop import hooks as hooks_lib
from inception.loop import liveness


def step_shape(train_graph):
    """[examples a step of `train_graph` trains, its towers (x micro-batches)]: what every
    worker of a cluster must share."""
    return [int(train_graph.examples_per_step), len(train_graph.towers)]


class ClusterMember(hooks_lib.WorkerHooks):
    """One worker task of a cluster: what its hooks share (see the module docstring).
    `_shape_source`: how check_step_shape names what it compares with.

    Constructing it starts the task's server, which must be up for the other tasks to see it.

    on_stuck: callable(message), called from a timer thread when a TensorFlow call outlives its
    own timeout by STUCK_GRACE_SECS (cancelling a timed-out step can deadlock inside
    TensorFlow); the entry point prints the message and ends the process.
    """

    _shape_source = "the chief has"
    # The tf.data service this worker's input comes from (set by the driver), or "": a step
    # that times out may be waiting on it rather than on another task.
    input_service = ""

    def __init__(self, cluster, server_config, log=print, on_stuck=None):
        if cluster.job_name != "worker":
            raise ClusterConfigError("only a worker task trains; a ps task runs "
                                     "run_parameter_server.")
        self.cluster = cluster
        self._log = log
        self._server = start_server(cluster, server_config)
        self._ops = {}
        self._watchdog = Watchdog(f"worker {cluster.task_id}", on_stuck)
        self._step_watch = (liveness.StepWatch(self._lost_contact, on_stuck)
                            if on_stuck is not None else None)
        self._steps_watched = 0

    @property
    def is_chief(self):
        """True for worker task 0."""
        return self.cluster.is_chief

    @property
    def worker_device(self):
        """This worker's device prefix, e.g. '/job:worker/task:1'."""
        return task_device("worker", self.cluster.task_id)

    def local_device(self, device):
        """`device` (e.g. '/cpu:0') on this worker: what is built there stays on it, even a
        variable (input counters are local state, not shared)."""
        return f"{self.worker_device}{device}"

    def watched(self, step):
        """A context manager around the step after `step`: while it waits, the other tasks
        (and the input service) are probed (loop/liveness.py), and when they stop answering
        (a partition, a machine gone) the task ends with one line naming them and the restart
        code, long before --step_timeout_secs. Not the start's first step, which may wait for
        tasks still starting."""
        self._steps_watched += 1
        if self._step_watch is None or self._steps_watched == 1:
            return contextlib.nullcontext()
        return self._step_watch.around(lambda reason: (
            f"worker {self.cluster.task_id} after step {step}: lost contact with the cluster "
            f"({reason}). Stop every task and start them again; training resumes from the "
            "chief's last checkpoint."))

    def _lost_contact(self):
        """What this worker's step waits for that does not answer now, or None."""
        down = unreachable_tasks(self.cluster)
        lost = [f"not answering now: {down}"] if down else []
        if self.input_service:
            reason = service.unreachable(self.input_service)
            if reason:
                lost.append(f"the input service at {self.input_service}: {reason}")
        return "; ".join(lost) or None

    @contextlib.contextmanager
    def _closing(self, session):
        with session:  # the default session and graph, as `with tf1.Session(...)` gives
            try:
                yield session
            finally:
                with self._watchdog.around(SHUTDOWN_TIMEOUT_SECS, "closing the session"):
                    session.close()

    def _wait_for_tasks(self, job, deadline, late):
        """Waits until every other task of `job` accepts connections; raises late() (a
        TaskLostError) after `deadline`. Probing the ports first keeps TensorFlow from logging
        every failed attempt to reach them."""
        def absent():
            return [f"{job} {task} at {address}"
                    for task, address in enumerate(self.cluster.hosts(job))
                    if (job, task) != (self.cluster.job_name, self.cluster.task_id)
                    and not is_reachable(address)]
        missing = absent()
        if missing:
            self._log(cli.timestamped(f"waiting for {', '.join(missing)} to come up"))
        while missing:
            if time.time() > deadline:
                raise late(missing)
            time.sleep(PROBE_INTERVAL_SECS / 2)
            missing = absent()

    def check_step_shape(self, train_graph, others):
        """Raises ClusterConfigError unless `others` (the chief's, or every worker's summed)
        [examples per step, towers] match this worker's `train_graph`: workers that split the
        update differently would read overlapping shares and average wrongly."""
        own = step_shape(train_graph)
        if list(others) != own:
            raise ClusterConfigError(
                f"worker {self.cluster.task_id} trains {own[0]} examples a step on {own[1]} "
                f"tower(s) (batch x micro-batches, towers x micro-batches), but "
                f"{self._shape_source} {list(map(int, others))}: start every worker "
                "with the same --batch_size, --accumulate_steps and --num_gpus, and with one "
                "--train_dir they all read (then a cluster of another size sets "
                "--accumulate_steps alike on every worker).")

    def explain(self, error, where, timeout=None):
        """A TaskLostError for a TensorFlow error of this worker's session: which tasks do not
        answer, and what to do."""
        prefix = f"worker {self.cluster.task_id} {where}"
        timed_out = isinstance(error, tf.errors.DeadlineExceededError)
        down = unreachable_tasks(self.cluster, 0.0 if timed_out else LOST_TASK_SETTLE_SECS)
        down = f"; not answering now: {down}" if down else ""
        restart = ("Stop every task and start them again; training resumes from the chief's "
                   "last checkpoint.")
        if timed_out:
            waited = f" within {timeout:g} s" if timeout else " in time"
            service = (f", or the input service at {self.input_service} stopped serving (see its "
                       "log)" if self.input_service else "")
            return TaskLostError(f"{prefix}: no synchronous update{waited}{down}. A worker is "
                                 f"missing, stuck, or slower than --step_timeout_secs{service}. "
                                 f"{restart}")
        return TaskLostError(f"{prefix}: lost contact with the cluster "
                            f"({error_lines.cause_of(error)}){down}. {restart}")

    def _run(self, name, session, timeout_secs, where):
        try:
            with self._watchdog.around(timeout_secs, f"{name} ({where})"):
                return session.run(self._ops[name], options=hooks_lib.run_options(timeout_secs))
        except tf.errors.OpError as error:
            raise self.explain(error, where, timeout_secs) from None

    def _try_run(self, name, session, feed_dict=None):
        try:
            with self._watchdog.around(SHUTDOWN_TIMEOUT_SECS, str(name)):
                return session.run(self._ops[name], feed_dict,
                                   options=hooks_lib.run_options(SHUTDOWN_TIMEOUT_SECS))
        except tf.errors.OpError:
            return None
