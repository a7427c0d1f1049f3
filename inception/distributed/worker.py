"""A worker task: the hooks through which `session_loop.run_training` trains one worker of a
cluster (shared variables on the parameter servers, synchronous updates, only the chief writing
files).

TensorFlow's SyncReplicasOptimizer does the averaging; its chief queue runner and readiness
checks were made for MonitoredTrainingSession, which this project does not use (the training
loop is its own, so that one-machine and cluster runs share every line of it): the chief runs
the update op in a thread of its own, and a ready flag on the first parameter server replaces
the session manager's readiness report. The shared token queue, which TensorFlow keeps in a
private attribute, is read in one place (`sync_token_queue`), pinned by a test.

What every kind of worker shares (its server, start-up waits, bounded calls, the error naming
the tasks that do not answer) is member.py's.
"""

import threading
import time

import tensorflow as tf

from common import cli
from inception.config import recovery
from common import error_lines
from inception.distributed.connections import ClusterError
from inception.distributed.connections import CHIEF_SHAPE_NAME
from inception.distributed.connections import CONNECTION_ERRORS
from inception.distributed.connections import done_message
from inception.distributed.connections import done_queue
from inception.distributed.connections import ps_device
from inception.distributed.connections import ps_flag
from inception.distributed.connections import READY_FLAG_NAME
from inception.distributed.connections import reasons_set
from inception.distributed.connections import stop_flags
from inception.distributed.connections import TaskLostError
from inception.distributed.connections import unreachable_tasks
from inception.distributed.member import ClusterMember
from inception.distributed.member import step_shape
from inception.loop import guards
from inception.loop import hooks as hooks_lib
from inception.parallel import sharing

tf1 = tf.compat.v1


def sync_token_queue(optimizer):
    """The token queue of a SyncReplicasOptimizer after apply_gradients, whose closing releases
    every worker: a private attribute only (tests/distributed/distributed_test.py pins it)."""
    return optimizer._sync_token_queue  # pylint: disable=protected-access


class ClusterWorker(ClusterMember):
    """The hooks `session_loop.run_training` calls for one worker task of a cluster with
    parameter servers.

    Construct it before building the graph (it starts the task's server, which must be up for
    the parameter servers to see this worker), build the graph with its `variable_sharing`
    (its optimizer wrapper is used once: one-stage plans only) and pass the object itself to
    run_training as `worker`. `on_stuck`: see ClusterMember.
    """

    def __init__(self, cluster, server_config, log=print, on_stuck=None):
        super().__init__(cluster, server_config, log, on_stuck)
        self._sync_optimizer = None
        self._steps_run, self._update_failures = 0, []
        self._stop_reason = None  # a signal number or "early", once this worker stops
        self._train_graph = None

    def variable_sharing(self, placement):
        """Variables on the parameter servers, updated through `wrap_optimizer`."""
        return sharing.SyncReplicasCluster(placement.tower_devices, placement.variable_device,
                                           self.wrap_optimizer, self.is_chief)

    def device_scope(self):
        """Variables on the parameter servers (round robin), every other op on this worker."""
        return tf1.device(tf1.train.replica_device_setter(
            worker_device=self.worker_device, cluster=self.cluster.cluster_spec()))

    def wrap_optimizer(self, optimizer, moving_average, variables):
        """The synchronous-replicas version of `optimizer`; its update (run by the chief) also
        updates `moving_average` of `variables`, once per global step."""
        # The user-facing rule (one-stage plans only) lives in config/rules.py.
        assert self._sync_optimizer is None, "a second stage on a cluster"
        self._sync_optimizer = tf1.train.SyncReplicasOptimizer(
            optimizer, replicas_to_aggregate=self.cluster.replicas_to_aggregate,
            total_num_replicas=self.cluster.num_workers, variable_averages=moving_average,
            variables_to_average=variables)
        return self._sync_optimizer

    def build(self, train_graph):
        """Adds the cluster's ops: readiness flag, update and token ops, done signals, probes."""
        optimizer = self._sync_optimizer
        if optimizer is None:
            raise RuntimeError("the graph was not built with ClusterWorker.variable_sharing")
        _check_local_variables_stay(self.worker_device)
        self._train_graph = train_graph
        # Its readiness report is for MonitoredSession, which we do not use (the chief's ready
        # flag below replaces it); marked so TensorFlow does not warn at exit.
        optimizer.ready_for_local_init_op.mark_used()
        self._ops = {
            "chief_init": optimizer.chief_init_op,
            "local_step_init": optimizer.local_step_init_op,
            "update": optimizer.get_chief_queue_runner().enqueue_ops[0],
            "global_step": train_graph.global_step,
            "weights_finite": _all_finite(tf1.trainable_variables()),
        }
        # The token queue every worker's step takes a token from (the same shared queue in
        # every worker's graph); closing it ends every worker's current and next step.
        tokens = sync_token_queue(optimizer)
        with tf.device(train_graph.global_step.device):
            self._ops["close_tokens"] = tokens.close()
            self._ops["tokens_closed"] = tokens.is_closed()
        self._ops["is_ready"], self._ops["set_ready"] = ps_flag(READY_FLAG_NAME)
        with tf.device(ps_device(0)):  # set by the chief before its ready flag: what it trains
            chief_shape = tf1.Variable(step_shape(train_graph), dtype=tf.int64, trainable=False,
                                       collections=[], name=CHIEF_SHAPE_NAME)
            self._ops["set_chief_shape"] = chief_shape.initializer
            self._ops["chief_shape"] = chief_shape.read_value()
        # Why training stops, set by the task that stops it before it ends the others' steps
        # (a parameter server sets a signal's flag too); read with every step.
        self._ops["stop_flags"], set_flags = stop_flags()
        self._ops.update({("set", reason): op for reason, op in set_flags.items()})
        done, ping = [], []
        self._done_message = tf1.placeholder(tf.int32, [], name="done_message")
        for task in range(len(self.cluster.ps_hosts)):
            with tf.device(ps_device(task)):
                done.append(done_queue(task).enqueue(self._done_message))
                ping.append(tf.no_op())
        self._ops["done"] = tf.group(*done)
        self._ops["ping"] = tf.group(*ping)

    def open_session(self, graph, session_config):
        """A session on this worker's server, once every parameter server answers (retried
        until `startup_timeout_secs`)."""
        config = tf1.ConfigProto()
        config.CopyFrom(session_config)
        config.device_filters[:] = ["/job:ps", self.worker_device]
        config.operation_timeout_in_ms = int(self.cluster.step_timeout_secs * 1000)
        deadline = time.time() + self.cluster.startup_timeout_secs
        # Probing the ports first keeps TensorFlow from logging every failed attempt.
        self._wait_for_parameter_servers(deadline)
        while True:
            session = tf1.Session(self._server.target, graph=graph, config=config)
            try:
                limit = recovery.PROBE_INTERVAL_SECS * 5
                with self._watchdog.around(limit, "connecting"):
                    session.run(self._ops["ping"], options=hooks_lib.run_options(limit))
                return self._closing(session)
            except tf.errors.OpError:
                session.close()
                if time.time() > deadline:
                    raise self._parameter_servers_late() from None
                time.sleep(recovery.PROBE_INTERVAL_SECS / 2)

    def _wait_for_parameter_servers(self, deadline):
        self._wait_for_tasks("ps", deadline, self._parameter_servers_late)

    def _parameter_servers_late(self, missing=None):
        del missing  # named below with every task that does not answer
        return TaskLostError(
            f"the parameter servers did not answer within {self.cluster.startup_timeout_secs:g}"
            f" s (not answering: {unreachable_tasks(self.cluster) or 'none now'}); start them "
            "with the same --ps_hosts/--worker_hosts or raise --startup_timeout_secs.")

    def wait_until_ready(self, session):
        """Waits for the chief to initialize or restore the model; returns the global step."""
        deadline = time.time() + self.cluster.startup_timeout_secs
        self._log(cli.timestamped(f"{self.cluster.describe()}: waiting for the chief "
                                           f"(worker 0 at {self.cluster.worker_hosts[0]}) to "
                                           "initialize the model"))
        while not self._run("is_ready", session, recovery.PROBE_INTERVAL_SECS * 5,
                            "waiting for the chief"):
            if time.time() > deadline:
                raise TaskLostError(
                    f"the chief (worker 0 at {self.cluster.worker_hosts[0]}) did not "
                    f"initialize the model within {self.cluster.startup_timeout_secs:g} s; "
                    "start it (same --ps_hosts/--worker_hosts) or raise --startup_timeout_secs.")
            time.sleep(recovery.PROBE_INTERVAL_SECS / 2)
        timeout = recovery.SHUTDOWN_TIMEOUT_SECS
        self.check_step_shape(self._train_graph,
                              self._run("chief_shape", session, timeout, "starting"))
        return int(self._run("global_step", session, timeout, "starting"))

    def begin(self, session):
        """Chief: prepares the gradient accumulators, starts applying updates, then lets the
        other workers in. Other workers: start counting from the current global step."""
        timeout = self.cluster.step_timeout_secs
        if not self.is_chief:
            self._run("local_step_init", session, timeout, "starting")
            return
        self._run("chief_init", session, timeout, "starting")
        threading.Thread(target=self._apply_updates, args=(session,), daemon=True,
                         name="sync_replicas_updates").start()
        self._run("set_chief_shape", session, timeout, "starting")
        self._run("set_ready", session, timeout, "starting")
        self._log(cli.timestamped(
            f"{self.cluster.describe()}: each update averages the gradients of "
            f"{self.cluster.replicas_to_aggregate} worker(s)"))

    def _apply_updates(self, session):
        # The chief's update loop (what the original ran as the chief queue runner). It ends
        # when the session closes (Cancelled), the token queue is closed, or a task is lost.
        timeout = self.cluster.startup_timeout_secs + self.cluster.step_timeout_secs
        while True:
            try:
                session.run(self._ops["update"], options=hooks_lib.run_options(timeout))
            except tf.errors.OpError as error:
                # Lost tasks and the end of training reach the main thread too; anything
                # else (e.g. workers built with different flags) only shows up here.
                if not isinstance(error, CONNECTION_ERRORS):
                    self._update_failures.append(error)
                    self._try_run("close_tokens", session)  # so the workers stop waiting
                return

    def run_step(self, session, fetches, step, metadata=None):
        """One synchronous step; returns (fetched values, global step after the update).

        Raises hooks_lib.PeerStopped when another task ended the training (a worker closed
        the token queue, or a signal's flag is set: with the reason it set), TaskLostError
        when a task is lost or the update does not come in time.
        """
        timeout = self.cluster.step_timeout_secs
        if self._steps_run == 0:
            timeout += self.cluster.startup_timeout_secs
        where = f"after step {step}"
        try:
            with self._watchdog.around(timeout, f"the step after step {step}"), self.watched(step):
                out, flags_set = session.run((fetches, self._ops["stop_flags"]),
                                             options=hooks_lib.run_options(timeout, metadata),
                                             run_metadata=metadata)
        except tf.errors.OutOfRangeError as error:
            if self._update_failures:
                raise self.explain(error, where) from None
            if self._try_run("tokens_closed", session):
                raise hooks_lib.PeerStopped.for_reasons(
                    int(self._run("global_step", session, recovery.SHUTDOWN_TIMEOUT_SECS, where)),
                    reasons_set(self._try_run("stop_flags", session) or {})) from None
            raise
        except tf.errors.OpError as error:
            raise self.explain(error, where, timeout) from None
        self._steps_run += 1
        step = int(self._run("global_step", session, recovery.SHUTDOWN_TIMEOUT_SECS, where))
        if recovery.first_signal(reasons_set(flags_set)) and self._stop_reason is None:
            raise hooks_lib.PeerStopped.for_reasons(step, reasons_set(flags_set))
        return out, step

    def explain(self, error, where, timeout=None):
        """ClusterMember.explain, unless the chief's update failed: then that failure (the
        other workers see only their steps end)."""
        if self._update_failures:
            return ClusterError(f"worker {self.cluster.task_id} {where}: the chief could not "
                                "apply the synchronous update "
                                f"({error_lines.cause_of(self._update_failures[0])}).")
        return super().explain(error, where, timeout)

    def before_save(self, session):
        """Refuses to checkpoint weights that are no longer finite (another worker's loss
        may have diverged; this chief only sees its own towers' losses)."""
        if not self._run("weights_finite", session, self.cluster.step_timeout_secs,
                         "checking the weights"):
            raise guards.DivergenceError(
                "the model's weights are no longer finite (NaN/Inf): a worker's loss diverged. "
                "No checkpoint was written, so the newest one in --train_dir is the last good "
                "one; lower --initial_learning_rate or check the data.")

    def agree_to_stop(self, signal_number, early):
        """At once: this worker's end releases the others (finish), telling them why (a
        signal, or the chief's early stopping)."""
        if self._stop_reason is None:
            self._stop_reason = signal_number if signal_number is not None else (
                "early" if early else None)
        return signal_number is not None or early

    def finish(self, session):
        """Releases the other workers (closes the token queue; first setting the flag of why
        it stops), then tells every parameter server this worker is done. Best effort: a lost
        task is not an error here."""
        if self._stop_reason is not None:
            self._try_run(("set", self._stop_reason), session)
        self._try_run("close_tokens", session)
        self._try_run("done", session, {self._done_message: done_message(
            self.cluster.task_id, self._stop_reason)})


def _all_finite(variables):
    """A bool scalar: every element of every variable is finite (reduced where each lives)."""
    checks = []
    for variable in variables:
        with tf.device(variable.device):
            checks.append(tf.reduce_all(tf.math.is_finite(variable)))
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def _check_local_variables_stay(worker_device):
    """Local variables (input counters, the sync step) must live on the worker: on a parameter
    server, every worker would share one."""
    for variable in tf1.local_variables():
        if not variable.device.startswith(worker_device):
            raise RuntimeError(f"local variable {variable.op.name} was placed on "
                               f"{variable.device!r}, not on {worker_device}; build it under "
                               "ClusterWorker.local_device(...).")
