"""Training on several machines with TensorFlow's distributed runtime.

The original `imagenet_distributed_train` layout: parameter-server tasks (`--job_name=ps`) hold
the variables; every worker task (`--job_name=worker`) builds the same training graph with its
own towers (towers.py, exactly as on one machine) and pushes the towers' averaged gradient. A
synchronous update (SyncReplicasOptimizer) averages `replicas_to_aggregate` pushed gradients;
the chief (worker task 0) applies it, initializes or restores the model, and alone writes
checkpoints, model_settings.json and summaries.

Every wait is bounded:
- start-up: a worker waits at most `startup_timeout_secs` for the parameter servers to answer
  and, if it is not the chief, as long again for the chief to initialize the model; a parameter
  server waits as long for every worker to come up;
- a step: a worker's step fails after `step_timeout_secs` (its first one after
  startup_timeout_secs + step_timeout_secs) with a message naming the tasks that do not answer;
- a lost task: each parameter server checks every worker every PROBE_INTERVAL_SECS and stops
  with an error once one has not answered PROBE_FAILURES times in a row without having said it
  is done; the workers' calls to that parameter server then fail at once (gRPC fail-fast), so
  the whole cluster stops within about PROBE_INTERVAL_SECS * PROBE_FAILURES + a few seconds;
- the end: a worker that leaves its training loop, for any reason, closes the shared token
  queue (releasing every other worker from its step) and tells each parameter server it is
  done; a parameter server exits once every worker is done.
"""

import contextlib
import os
import re
import socket
import threading
import time

import tensorflow as tf

from inception import replica as replica_lib
from inception import train_loop
from inception.cluster import JOBS
from inception.cluster import ClusterConfigError
from inception.cluster import split_address
from inception.stop_request import StopRequest

tf1 = tf.compat.v1

PROBE_INTERVAL_SECS = 2.0
PROBE_FAILURES = 3
PROBE_CONNECT_TIMEOUT_SECS = 3.0
SHUTDOWN_TIMEOUT_SECS = 10.0
STUCK_GRACE_SECS = 30.0
PS_SIGNAL_GRACE_SECS = 60.0
CONNECTION_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError,
                     tf.errors.CancelledError, tf.errors.DeadlineExceededError,
                     tf.errors.OutOfRangeError)
DONE_QUEUE_NAME = "inception_workers_done"
# Lines of TensorFlow error messages that say where, not what.
BOILERPLATE = re.compile(r"Graph execution error|Detected at node|Additional GRPC|"
                         r"([A-Z_]+: )?From /job|File |\[\[|:\{|:UNKNOWN")
READY_FLAG_NAME = "inception_model_ready"


class ClusterError(RuntimeError):
    """A task of the cluster failed, vanished or did not answer in time; one line for the user."""


class DivergedError(RuntimeError):
    """The shared weights are no longer finite (a worker's loss diverged)."""


def is_reachable(address, timeout=PROBE_CONNECT_TIMEOUT_SECS):
    """True when something accepts TCP connections at `host:port` (a running task's server)."""
    try:
        with socket.create_connection(split_address(address), timeout=timeout):
            return True
    except OSError:
        return False


def unreachable_tasks(settings):
    """'ps 0 at host:port, ...' for the other tasks that do not accept connections now."""
    down = [f"{job} {task} at {address}" for job in JOBS
            for task, address in enumerate(settings.hosts(job))
            if (job, task) != (settings.job_name, settings.task_id)
            and not is_reachable(address)]
    return ", ".join(down)


def start_server(settings, config):
    """Starts this task's gRPC server (tf.compat.v1.train.Server) and returns it."""
    # Fail-fast RPCs: without this a call to a task that died is retried forever, so a session
    # cannot even be closed after a peer was lost (measured: the chief hangs at shutdown).
    os.environ.setdefault("GRPC_FAIL_FAST", "true")
    try:
        return tf1.train.Server(settings.cluster_spec(), job_name=settings.job_name,
                                task_index=settings.task_id, config=config, start=True)
    except (tf.errors.OpError, ValueError) as error:
        raise ClusterError(f"cannot start the {settings.job_name} {settings.task_id} server at "
                           f"{settings.address} ({_first_line(error)}); is that port in use, or "
                           "is the address not one of this machine's?") from None


def _first_line(error):
    """The informative line of a TensorFlow error (its message without graph boilerplate)."""
    text = getattr(error, "message", None) or str(error)
    for line in text.splitlines():
        line = line.strip()
        if any(c.isalpha() for c in line) and not BOILERPLATE.match(line):
            return line.rstrip(".")
    return type(error).__name__


def _run_options(timeout_secs):
    return tf1.RunOptions(timeout_in_ms=max(1, int(timeout_secs * 1000)))


def _ps_device(task):
    return f"/job:ps/task:{task}/device:CPU:0"


def _done_queue(ps_task):
    """The queue on parameter server `ps_task` into which each worker puts its task id when it
    ends; the same shared queue whichever graph (a worker's or the server's own) defines it.
    Build it, and the ops that use it, under tf.device(_ps_device(ps_task))."""
    return tf1.FIFOQueue(-1, tf.int32, shapes=(), shared_name=DONE_QUEUE_NAME,
                         name=f"{DONE_QUEUE_NAME}_{ps_task}")


# --- parameter servers -----------------------------------------------------------------------

def run_parameter_server(settings, log=print):
    """Serves parameter-server task `settings.task_id` until every worker says it is done.

    Returns None after a normal end, or the number of the signal that stopped it early (the
    first SIGINT/SIGTERM still lets the workers finish for up to PS_SIGNAL_GRACE_SECS).
    Raises ClusterError when a worker does not come up within `startup_timeout_secs`, or
    disappears without saying it is done.
    """
    server = start_server(settings, tf1.ConfigProto(device_count={"GPU": 0}))
    log(train_loop.timestamped(f"{settings.describe()}: serving variables"))
    # The queue is polled, never waited on with a timeout: a timed-out wait on the server's
    # own master can deadlock TensorFlow's cancellation (measured, after some hundred waits).
    graph = tf.Graph()
    with graph.as_default(), tf.device(_ps_device(settings.task_id)):
        queue = _done_queue(settings.task_id)
        count = tf1.placeholder(tf.int32, [])
        waiting, take = queue.size(), queue.dequeue_many(count)
    config = tf1.ConfigProto(device_filters=[f"/job:ps/task:{settings.task_id}"])
    watch = _WorkerWatch(settings, time.time())
    signalled_at = None
    with tf1.Session(server.target, graph=graph, config=config) as session, \
            StopRequest(log, f"letting the workers finish first (for at most "
                             f"{PS_SIGNAL_GRACE_SECS:g} s)") as stop:
        while not watch.all_done:
            if stop.requested:
                signalled_at = signalled_at or time.time()
                if time.time() - signalled_at > PS_SIGNAL_GRACE_SECS:
                    return stop.signal_number
            arrived = int(session.run(waiting))
            if arrived:
                for task in session.run(take, {count: arrived}):
                    watch.mark_done(int(task))
                continue
            watch.probe(time.time())
            time.sleep(PROBE_INTERVAL_SECS)
    log(train_loop.timestamped(f"all {settings.num_workers} worker(s) are done; parameter "
                               f"server {settings.task_id} exits"))
    return None


class _WorkerWatch:
    """Which workers are done, have been seen, or stopped answering (for a parameter server)."""

    def __init__(self, settings, start_time):
        self._settings = settings
        self._startup_deadline = start_time + settings.startup_timeout_secs
        self._done, self._seen, self._misses = set(), set(), {}
        self._first_done_time = None

    @property
    def all_done(self):
        """True once every worker said it is done."""
        return len(self._done) == self._settings.num_workers

    def mark_done(self, task):
        """Records that worker `task` ended its training."""
        self._done.add(task)
        if self._first_done_time is None:
            self._first_done_time = time.time()

    def probe(self, now):
        """Checks every worker not yet done; raises ClusterError for a lost, absent or stuck
        one."""
        self._check_stragglers(now)
        for task, address in enumerate(self._settings.worker_hosts):
            if task in self._done:
                continue
            if is_reachable(address):
                self._seen.add(task)
                self._misses[task] = 0
            elif task in self._seen:
                self._misses[task] = self._misses.get(task, 0) + 1
                if self._misses[task] >= PROBE_FAILURES:
                    raise ClusterError(
                        f"worker {task} at {address} stopped answering before it finished "
                        f"training; parameter server {self._settings.task_id} stops too. See "
                        "that worker's log, then restart every task to resume from the last "
                        "checkpoint.")
            elif now > self._startup_deadline:
                raise ClusterError(
                    f"worker {task} at {address} did not come up within "
                    f"{self._settings.startup_timeout_secs:g} s; start it (with the same "
                    "--ps_hosts/--worker_hosts) or raise --startup_timeout_secs.")

    def _check_stragglers(self, now):
        # A worker that ends releases the others at once (it closes the token queue), so the
        # rest end soon after; one that does not is stuck (e.g. stopped) though it still
        # accepts connections.
        limit = self._settings.step_timeout_secs
        if self._first_done_time is None or now - self._first_done_time <= limit:
            return
        pending = [f"worker {task} at {address}"
                   for task, address in enumerate(self._settings.worker_hosts)
                   if task not in self._done]
        raise ClusterError(f"{', '.join(pending)} did not finish within {limit:g} s after the "
                           f"first worker did; parameter server {self._settings.task_id} stops. "
                           "See those workers' logs.")


# --- workers ---------------------------------------------------------------------------------

class ClusterWorker(replica_lib.Replica):
    """The hooks `train_loop.run_training` calls for one worker task of a cluster.

    Construct it before building the graph (it starts the task's server, which must be up for
    the parameter servers to see this worker), pass `wrap_optimizer` to
    train_graph.build_train_graph (once: one-stage plans only) and the object itself to
    run_training as `replica`.

    on_stuck: callable(message), called from a timer thread when a TensorFlow call outlives its
    own timeout by STUCK_GRACE_SECS (cancelling a timed-out step can deadlock inside
    TensorFlow); the entry point prints the message and ends the process.
    """

    def __init__(self, settings, server_config, log=print, on_stuck=None):
        if settings.job_name != "worker":
            raise ClusterConfigError("only a worker task trains; a ps task runs "
                                     "run_parameter_server.")
        self.settings = settings
        self._log = log
        self._server = start_server(settings, server_config)
        self._sync_optimizer = None
        self._ops = {}
        self._steps_run = 0
        self._update_failures = []
        self._on_stuck = on_stuck

    @property
    def is_chief(self):
        """True for worker task 0."""
        return self.settings.is_chief

    @property
    def worker_device(self):
        """This worker's device prefix, e.g. '/job:worker/task:1'."""
        return f"/job:worker/task:{self.settings.task_id}"

    def local_device(self, device):
        """`device` (e.g. '/cpu:0') on this worker: what is built there stays on it, even a
        variable (input counters are local state, not shared)."""
        return f"{self.worker_device}{device}"

    def device_scope(self):
        """Variables on the parameter servers (round robin), every other op on this worker."""
        return tf1.device(tf1.train.replica_device_setter(
            worker_device=self.worker_device, cluster=self.settings.cluster_spec()))

    def wrap_optimizer(self, optimizer, moving_average, variables):
        """The synchronous-replicas version of `optimizer`; its update (run by the chief) also
        updates `moving_average` of `variables`, once per global step."""
        # The user-facing rule (one-stage plans only) lives in training.check_cluster_options.
        assert self._sync_optimizer is None, "a second stage on a cluster"
        self._sync_optimizer = tf1.train.SyncReplicasOptimizer(
            optimizer, replicas_to_aggregate=self.settings.replicas_to_aggregate,
            total_num_replicas=self.settings.num_workers, variable_averages=moving_average,
            variables_to_average=variables)
        return self._sync_optimizer

    def build(self, train_graph):
        """Adds the cluster's ops: readiness flag, update and token ops, done signals, probes."""
        optimizer = self._sync_optimizer
        if optimizer is None:
            raise RuntimeError("build_train_graph was not given ClusterWorker.wrap_optimizer")
        _check_local_variables_stay(self.worker_device)
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
        tokens = optimizer._sync_token_queue  # pylint: disable=protected-access
        with tf.device(train_graph.global_step.device):
            self._ops["close_tokens"] = tokens.close()
            self._ops["tokens_closed"] = tokens.is_closed()
        with tf.device(_ps_device(0)):
            ready_flag = tf1.Variable(True, trainable=False, collections=[],
                                      name=READY_FLAG_NAME)
            self._ops["is_ready"] = tf1.is_variable_initialized(ready_flag)
            self._ops["is_ready"].mark_used()  # only non-chief workers run it
            self._ops["set_ready"] = ready_flag.initializer
        done, ping = [], []
        for task in range(len(self.settings.ps_hosts)):
            with tf.device(_ps_device(task)):
                done.append(_done_queue(task).enqueue(self.settings.task_id))
                ping.append(tf.no_op())
        self._ops["done"] = tf.group(*done)
        self._ops["ping"] = tf.group(*ping)

    def open_session(self, graph, session_config):
        """A session on this worker's server, once every parameter server answers (retried
        until `startup_timeout_secs`)."""
        config = tf1.ConfigProto()
        config.CopyFrom(session_config)
        config.device_filters[:] = ["/job:ps", self.worker_device]
        config.operation_timeout_in_ms = int(self.settings.step_timeout_secs * 1000)
        deadline = time.time() + self.settings.startup_timeout_secs
        # Probing the ports first keeps TensorFlow from logging every failed attempt.
        self._wait_for_parameter_servers(deadline)
        while True:
            session = tf1.Session(self._server.target, graph=graph, config=config)
            try:
                with self._watchdog(PROBE_INTERVAL_SECS * 5, "connecting"):
                    session.run(self._ops["ping"], options=_run_options(PROBE_INTERVAL_SECS * 5))
                return self._closing(session)
            except tf.errors.OpError:
                session.close()
                if time.time() > deadline:
                    raise self._parameter_servers_late() from None
                time.sleep(PROBE_INTERVAL_SECS / 2)

    @contextlib.contextmanager
    def _closing(self, session):
        with session:  # the default session and graph, as `with tf1.Session(...)` gives
            try:
                yield session
            finally:
                with self._watchdog(SHUTDOWN_TIMEOUT_SECS, "closing the session"):
                    session.close()

    @contextlib.contextmanager
    def _watchdog(self, timeout_secs, what):
        """Around a TensorFlow call that should end within `timeout_secs`: calls `on_stuck`
        if it has not returned STUCK_GRACE_SECS later."""
        if self._on_stuck is None:
            yield
            return
        limit = timeout_secs + STUCK_GRACE_SECS
        timer = threading.Timer(limit, self._on_stuck, args=(
            f"worker {self.settings.task_id}: {what} did not end within {limit:g} s although "
            "it should have timed out; TensorFlow is stuck, so this worker exits now. Stop "
            "every task and start them again.",))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _wait_for_parameter_servers(self, deadline):
        def absent():
            return [f"ps {task} at {address}"
                    for task, address in enumerate(self.settings.ps_hosts)
                    if not is_reachable(address)]
        missing = absent()
        if missing:
            self._log(train_loop.timestamped(f"waiting for {', '.join(missing)} to come up"))
        while missing:
            if time.time() > deadline:
                raise self._parameter_servers_late()
            time.sleep(PROBE_INTERVAL_SECS / 2)
            missing = absent()

    def _parameter_servers_late(self):
        return ClusterError(
            f"the parameter servers did not answer within {self.settings.startup_timeout_secs:g}"
            f" s (not answering: {unreachable_tasks(self.settings) or 'none now'}); start them "
            "with the same --ps_hosts/--worker_hosts or raise --startup_timeout_secs.")

    def wait_until_ready(self, session):
        """Waits for the chief to initialize or restore the model; returns the global step."""
        deadline = time.time() + self.settings.startup_timeout_secs
        self._log(train_loop.timestamped(f"{self.settings.describe()}: waiting for the chief "
                                         f"(worker 0 at {self.settings.worker_hosts[0]}) to "
                                         "initialize the model"))
        while not self._run("is_ready", session, PROBE_INTERVAL_SECS * 5,
                            "waiting for the chief"):
            if time.time() > deadline:
                raise ClusterError(
                    f"the chief (worker 0 at {self.settings.worker_hosts[0]}) did not "
                    f"initialize the model within {self.settings.startup_timeout_secs:g} s; "
                    "start it (same --ps_hosts/--worker_hosts) or raise --startup_timeout_secs.")
            time.sleep(PROBE_INTERVAL_SECS / 2)
        return int(self._run("global_step", session, SHUTDOWN_TIMEOUT_SECS, "starting"))

    def begin(self, session):
        """Chief: prepares the gradient accumulators, starts applying updates, then lets the
        other workers in. Other workers: start counting from the current global step."""
        timeout = self.settings.step_timeout_secs
        if not self.is_chief:
            self._run("local_step_init", session, timeout, "starting")
            return
        self._run("chief_init", session, timeout, "starting")
        threading.Thread(target=self._apply_updates, args=(session,), daemon=True,
                         name="sync_replicas_updates").start()
        self._run("set_ready", session, timeout, "starting")
        self._log(train_loop.timestamped(
            f"{self.settings.describe()}: each update averages the gradients of "
            f"{self.settings.replicas_to_aggregate} worker(s)"))

    def _apply_updates(self, session):
        # The chief's update loop (what the original ran as the chief queue runner). It ends
        # when the session closes (Cancelled), the token queue is closed, or a task is lost.
        timeout = self.settings.startup_timeout_secs + self.settings.step_timeout_secs
        while True:
            try:
                session.run(self._ops["update"], options=_run_options(timeout))
            except tf.errors.OpError as error:
                # Lost tasks and the end of training reach the main thread too; anything
                # else (e.g. workers built with different flags) only shows up here.
                if not isinstance(error, CONNECTION_ERRORS):
                    self._update_failures.append(error)
                    self._try_run("close_tokens", session)  # so the workers stop waiting
                return

    def run_step(self, session, fetches, step):
        """One synchronous step; returns (fetched values, global step after the update).

        Raises replica_lib.PeerStopped when another worker ended the training (it closed the
        token queue), ClusterError when a task is lost or the update does not come in time.
        """
        timeout = self.settings.step_timeout_secs
        if self._steps_run == 0:
            timeout += self.settings.startup_timeout_secs
        where = f"after step {step}"
        try:
            with self._watchdog(timeout, f"the step after step {step}"):
                out = session.run(fetches, options=_run_options(timeout))
        except tf.errors.OutOfRangeError as error:
            if self._update_failures:
                raise self.explain(error, where) from None
            if self._try_run("tokens_closed", session):
                raise replica_lib.PeerStopped(
                    int(self._run("global_step", session, SHUTDOWN_TIMEOUT_SECS, where))
                ) from None
            raise
        except tf.errors.OpError as error:
            raise self.explain(error, where, timeout) from None
        self._steps_run += 1
        return out, int(self._run("global_step", session, SHUTDOWN_TIMEOUT_SECS, where))

    def explain(self, error, where, timeout=None):
        """A ClusterError for a TensorFlow error of this worker's session: which tasks do not
        answer, and what to do."""
        prefix = f"worker {self.settings.task_id} {where}"
        if self._update_failures:
            return ClusterError(f"{prefix}: the chief could not apply the synchronous update "
                                f"({_first_line(self._update_failures[0])}).")
        down = unreachable_tasks(self.settings)
        down = f"; not answering now: {down}" if down else ""
        restart = ("Stop every task and start them again; training resumes from the chief's "
                   "last checkpoint.")
        if isinstance(error, tf.errors.DeadlineExceededError):
            waited = f" within {timeout:g} s" if timeout else " in time"
            return ClusterError(f"{prefix}: no synchronous update{waited}{down}. A worker is "
                                f"missing, stuck, or slower than --step_timeout_secs. {restart}")
        return ClusterError(f"{prefix}: lost contact with the cluster "
                            f"({_first_line(error)}){down}. {restart}")

    def before_save(self, session):
        """Refuses to checkpoint weights that are no longer finite (another worker's loss
        may have diverged; this chief only sees its own towers' losses)."""
        if not self._run("weights_finite", session, self.settings.step_timeout_secs,
                         "checking the weights"):
            raise DivergedError(
                "the model's weights are no longer finite (NaN/Inf): a worker's loss diverged. "
                "No checkpoint was written, so the newest one in --train_dir is the last good "
                "one; lower --initial_learning_rate or check the data.")

    def finish(self, session):
        """Releases the other workers (closes the token queue), then tells every parameter
        server this worker is done. Best effort: a lost task is not an error here."""
        self._try_run("close_tokens", session)
        self._try_run("done", session)

    def _run(self, name, session, timeout_secs, where):
        try:
            with self._watchdog(timeout_secs, f"{name} ({where})"):
                return session.run(self._ops[name], options=_run_options(timeout_secs))
        except tf.errors.OpError as error:
            raise self.explain(error, where, timeout_secs) from None

    def _try_run(self, name, session):
        try:
            with self._watchdog(SHUTDOWN_TIMEOUT_SECS, name):
                return session.run(self._ops[name], options=_run_options(SHUTDOWN_TIMEOUT_SECS))
        except tf.errors.OpError:
            return None


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
