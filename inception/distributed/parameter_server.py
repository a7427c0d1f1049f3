"""A parameter-server task: serves the variables until every worker says it is done, and stops
the cluster when a worker is lost (it probes each worker's port). A signal to it stops the
workers first (it sets that signal's stop flag, so the chief saves a checkpoint)."""

import time

import tensorflow as tf

from common import cli
from inception.config.recovery import first_signal
from inception.config.recovery import PROBE_FAILURES
from inception.config.recovery import PROBE_INTERVAL_SECS
from inception.config.recovery import PS_SIGNAL_GRACE_SECS
from inception.distributed.connections import done_queue
from inception.distributed.connections import is_reachable
from inception.distributed.connections import ps_device
from inception.distributed.connections import read_done_message
from inception.distributed.connections import start_server
from inception.distributed.connections import stop_flags
from inception.distributed.connections import task_device
from inception.distributed.connections import TaskLostError
from inception.loop.hooks import run_options
from inception.loop.stop_request import StopRequest

tf1 = tf.compat.v1


def run_parameter_server(cluster, log=print):
    """Serves parameter-server task `cluster.task_id` until every worker says it is done.

    Returns None after a normal end, or the number of the signal that stopped the cluster's
    training: one to this task (its first SIGINT/SIGTERM sets that signal's stop flag, so the
    workers stop after their step and the chief saves, and lets them finish for up to
    PS_SIGNAL_GRACE_SECS), or the one another task's stop flag names. Raises TaskLostError
    when a worker does not come up within `startup_timeout_secs`, or disappears without saying
    it is done.
    """
    server = start_server(cluster, tf1.ConfigProto(device_count={"GPU": 0}))
    log(cli.timestamped(f"{cluster.describe()}: serving variables"))
    # The queue is polled, never waited on with a timeout: a timed-out wait on the server's
    # own master can deadlock TensorFlow's cancellation (measured, after some hundred waits).
    graph = tf.Graph()
    with graph.as_default(), tf.device(ps_device(cluster.task_id)):
        queue = done_queue(cluster.task_id)
        count = tf1.placeholder(tf.int32, [])
        waiting, take = queue.size(), queue.dequeue_many(count)
        _, set_flags = stop_flags()  # on parameter server 0
    config = tf1.ConfigProto(device_filters=[task_device("ps", cluster.task_id),
                                             task_device("ps", 0)])
    watch = _WorkerWatch(cluster, time.time())
    signalled_at = None
    with tf1.Session(server.target, graph=graph, config=config) as session, \
            StopRequest(log, f"letting the workers finish first (for at most "
                             f"{PS_SIGNAL_GRACE_SECS:g} s)") as stop:
        while not watch.all_done:
            if stop.requested:
                if signalled_at is None:
                    signalled_at = time.time()
                    _try_to_set(session, set_flags[stop.signal_number])
                if time.time() - signalled_at > PS_SIGNAL_GRACE_SECS:
                    return stop.signal_number
            arrived = int(session.run(waiting))
            if arrived:
                for message in session.run(take, {count: arrived}):
                    watch.mark_done(*read_done_message(int(message)))
                continue
            watch.probe(time.time())
            time.sleep(PROBE_INTERVAL_SECS)
        ended_by = stop.signal_number or watch.ended_by_signal
    log(cli.timestamped(f"all {cluster.num_workers} worker(s) are done; parameter "
                                 f"server {cluster.task_id} exits"))
    return ended_by


def _try_to_set(session, set_flag):
    """Sets a stop flag on parameter server 0 if it still answers (when it does not, the
    workers lose it anyway)."""
    try:
        session.run(set_flag, options=run_options(PROBE_INTERVAL_SECS * 5))
    except tf.errors.OpError:
        pass


class _WorkerWatch:
    """Which workers are done, have been seen, or stopped answering (for a parameter server)."""

    def __init__(self, cluster, start_time):
        self._cluster = cluster
        self._startup_deadline = start_time + cluster.startup_timeout_secs
        self._done, self._seen, self._misses = set(), set(), {}
        self._reasons = {}
        self._first_done_time = None

    @property
    def all_done(self):
        """True once every worker said it is done."""
        return len(self._done) == self._cluster.num_workers

    @property
    def ended_by_signal(self):
        """The signal that a done worker said stopped it (SIGTERM first), or None."""
        return first_signal(set(self._reasons.values()))

    def mark_done(self, task, reason=None):
        """Records that worker `task` ended its training, for `reason` (connections.
        DONE_REASONS)."""
        self._done.add(task)
        self._reasons[task] = reason
        if self._first_done_time is None:
            self._first_done_time = time.time()

    def probe(self, now):
        """Checks every worker not yet done; raises TaskLostError for a lost, absent or stuck
        one."""
        self._check_stragglers(now)
        for task, address in enumerate(self._cluster.worker_hosts):
            if task in self._done:
                continue
            if is_reachable(address):
                self._seen.add(task)
                self._misses[task] = 0
            elif task in self._seen:
                self._misses[task] = self._misses.get(task, 0) + 1
                if self._misses[task] >= PROBE_FAILURES:
                    raise TaskLostError(
                        f"worker {task} at {address} stopped answering before it finished "
                        f"training; parameter server {self._cluster.task_id} stops too. See "
                        "that worker's log, then restart every task to resume from the last "
                        "checkpoint.")
            elif now > self._startup_deadline:
                raise TaskLostError(
                    f"worker {task} at {address} did not come up within "
                    f"{self._cluster.startup_timeout_secs:g} s; start it (with the same "
                    "--ps_hosts/--worker_hosts) or raise --startup_timeout_secs.")

    def _check_stragglers(self, now):
        # A worker that ends releases the others at once (it closes the token queue), so the
        # rest end soon after; one that does not is stuck (e.g. stopped) though it still
        # accepts connections.
        limit = self._cluster.step_timeout_secs
        if self._first_done_time is None or now - self._first_done_time <= limit:
            return
        pending = [f"worker {task} at {address}"
                   for task, address in enumerate(self._cluster.worker_hosts)
                   if task not in self._done]
        raise TaskLostError(f"{', '.join(pending)} did not finish within {limit:g} s after the "
                           f"first worker did; parameter server {self._cluster.task_id} stops. "
                           "See those workers' logs.")
