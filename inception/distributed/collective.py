"""A worker of a cluster without parameter servers: every worker keeps its own copies of the
variables (replicated on its towers, as --variable_update=replicated on one machine) and each
step's gradients are summed over every tower of every worker by TensorFlow's collective
runtime over gRPC, with the chief (worker 0) as the group leader.

What the workers must agree on, they agree on through collectives of their own:
- the start: the chief initializes or restores the model and broadcasts every saved variable;
  the others receive them, then fill their towers' copies (all_reduce.broadcast_variables);
- every step: one small all-reduce sums each worker's votes to stop (one count per reason:
  SIGINT, SIGTERM, the chief's early stopping) and its count of towers whose loss is not
  finite, so that every worker stops after the same step knowing why (a SIGTERM anywhere is a
  preemption: every task exits with the restart code), and a divergence on one worker stops
  them all;
- a lost worker: the collectives of the others fail within a second (gRPC fail-fast; measured
  0.1 s on loopback), a stuck one after --step_timeout_secs (the session's operation timeout).

Every collective of a group must run on every member: one whose output nothing fetched is
pruned from the step, and the others then wait for it until the timeout (seen while building
this: a tower's all-reduce left out of the fetches hung the whole group).
"""

import math
import time

import tensorflow as tf

from common import cli
from inception.config.recovery import SHUTDOWN_TIMEOUT_SECS
from inception.config.recovery import STOP_REASONS
from inception.distributed.connections import ClusterError
from inception.distributed.connections import TaskLostError
from inception.distributed.member import ClusterMember
from inception.distributed.member import step_shape
from inception.loop import guards
from inception.loop import hooks as hooks_lib
from inception.loop import resume
from inception.parallel import all_reduce
from inception.parallel import copies as copies_lib
from inception.parallel.devices import HOST_DEVICE
from inception.parallel import sharing

tf1 = tf.compat.v1
# A worker's vote: one count per STOP_REASONS (config/recovery.py), then its non-finite tower
# losses.

CHIEF_DEVICE = "/job:worker/replica:0/task:0"


def collective_config(config):
    """A copy of the ConfigProto `config` that names the chief as the collectives' group
    leader (every task's server and session need it)."""
    copied = tf1.ConfigProto()
    copied.CopyFrom(config)
    copied.experimental.collective_group_leader = CHIEF_DEVICE
    return copied


class CollectiveWorker(ClusterMember):
    """The hooks `session_loop.run_training` calls for one worker of a cluster without
    parameter servers (see the module docstring). Construct it before building the graph and
    pass it to run_training as `worker`; the graph is built with its `variable_sharing`."""

    _shape_source = "the workers have on average"

    def __init__(self, cluster, server_config, log=print, on_stuck=None):
        super().__init__(cluster, collective_config(server_config), log, on_stuck)
        self._vote = [0.0] * len(STOP_REASONS)  # once this task wants to stop: sent next step
        self._stop_agreed = False
        self._train_graph = None

    @staticmethod
    def variable_sharing(placement):
        """Replicated variables, the all-reduce spanning every worker (the placement's spec
        has their number); the update needs no wrapper: the all-reduce makes it synchronous.
        A cluster shrunk to one worker replicates over its own towers alone."""
        return sharing.for_devices(placement.tower_devices, placement.all_reduce)

    def device_scope(self):
        """Everything, variables included, on this worker."""
        return tf1.device(self.worker_device)

    def build(self, train_graph):
        """Adds the start-up broadcast and each stage's vote (see the module docstring)."""
        self._train_graph = train_graph
        saved = copies_lib.saved_variables(tf1.global_variables())
        device = self.local_device(HOST_DEVICE)
        workers = self.cluster.num_workers
        keys = all_reduce.InstanceKeys(all_reduce.WORKER_INSTANCE_KEYS)
        self._ops = {
            "init": tf1.global_variables_initializer(),
            "broadcast": all_reduce.broadcast_variables(
                [saved[name] for name in sorted(saved)], device, workers, self.is_chief, keys),
            "global_step": train_graph.global_step,
        }
        # Summed over the workers with the broadcast: equal shapes sum to workers x one's.
        self._ops["step_shapes"] = all_reduce.sum_over_workers(
            tf.constant(step_shape(train_graph), tf.int64), device, workers, keys)
        with tf.device(device), tf.name_scope("cluster_vote"):
            self._vote_input = tf1.placeholder_with_default(
                tf.zeros([len(STOP_REASONS)]), [len(STOP_REASONS)], name="stop")
            self._votes = []
            for ops in train_graph.stages:
                losses = tf.stack(ops.tower_losses)
                not_finite = tf.reduce_sum(tf.cast(~tf.math.is_finite(losses), tf.float32))
                self._votes.append(all_reduce.sum_over_workers(
                    tf.concat([self._vote_input, [not_finite]], 0), device, workers, keys))

    def open_session(self, graph, session_config):
        """A session on this worker's server, once every other worker's port answers (bounded
        by startup_timeout_secs)."""
        config = collective_config(session_config)
        config.device_filters[:] = [self.worker_device]
        config.operation_timeout_in_ms = int(self.cluster.step_timeout_secs * 1000)
        self._wait_for_tasks("worker", time.time() + self.cluster.startup_timeout_secs,
                             self._workers_late)
        return self._closing(tf1.Session(self._server.target, graph=graph, config=config))

    def _workers_late(self, missing):
        return TaskLostError(
            f"{', '.join(missing)} did not come up within {self.cluster.startup_timeout_secs:g}"
            " s; start every worker with the same --worker_hosts or raise "
            "--startup_timeout_secs.")

    def wait_until_ready(self, session):
        """Non-chief start: receives the chief's variables; returns the global step."""
        self._log(cli.timestamped(f"{self.cluster.describe()}: waiting for the chief (worker 0 at "
                              f"{self.cluster.worker_hosts[0]}) to send the model"))
        self._run("init", session, self.cluster.step_timeout_secs, "initializing")
        self._receive_or_send(session)
        resume.fill_copies(session, self._train_graph)
        return int(self._run("global_step", session, SHUTDOWN_TIMEOUT_SECS, "starting"))

    def begin(self, session):
        """Chief: sends the variables it initialized or restored to every other worker."""
        if not self.is_chief:
            return
        self._receive_or_send(session)
        self._log(cli.timestamped(
            f"{self.cluster.describe()}: sent the model to the other worker(s); each step "
            "sums the gradients of every tower of every worker"))

    def _receive_or_send(self, session):
        timeout = self.cluster.startup_timeout_secs
        try:
            with self._watchdog.around(timeout, "the start-up broadcast"):
                _, shapes = session.run((self._ops["broadcast"], self._ops["step_shapes"]),
                                        options=hooks_lib.run_options(timeout))
        except tf.errors.DeadlineExceededError:
            raise ClusterError(
                f"worker {self.cluster.task_id}: the model did not reach every worker within "
                f"{timeout:g} s; start every worker with the same flags (or raise "
                "--startup_timeout_secs).") from None
        except tf.errors.OpError as error:
            raise self.explain(error, "at start-up") from None
        self.check_step_shape(self._train_graph, shapes // self.cluster.num_workers
                              if not (shapes % self.cluster.num_workers).any() else shapes)

    def agree_to_stop(self, signal_number, early):
        """True once every worker has agreed to stop; a task that wants to stop first runs one
        more step, which tells the others (and why: which signal, or early stopping)."""
        reason = signal_number if signal_number is not None else ("early" if early else None)
        if reason is not None and not self._stop_agreed:
            self._vote = [float(reason == known) for known in STOP_REASONS]
        return self._stop_agreed

    def run_step(self, session, fetches, step, metadata=None):
        """One step of every worker; returns (fetched values, step + 1).

        Raises hooks_lib.PeerStopped when another worker asked to stop after this step
        (with the signal that stopped it: a SIGTERM anywhere wins), guards.Diverged when
        another worker's tower loss was not finite, and TaskLostError when a worker is lost or
        the step does not end within step_timeout_secs.
        """
        timeout = self.cluster.step_timeout_secs
        votes = self._votes[self._train_graph.plan.stage_index_at(step)]
        where = f"after step {step}"
        try:
            with self._watchdog.around(timeout, f"the step after step {step}"), self.watched(step):
                out, counts = session.run(
                    (fetches, votes), feed_dict={self._vote_input: self._vote},
                    options=hooks_lib.run_options(timeout, metadata), run_metadata=metadata)
        except tf.errors.OpError as error:
            raise self.explain(error, where, timeout) from None
        step += 1
        *stops, not_finite = counts
        own = sum(1 for value in out["losses"] if not math.isfinite(float(value)))
        if not_finite > own:
            raise guards.Diverged(step, cause=(
                f"loss is not finite at step {step} on another worker of the cluster "
                f"({int(not_finite - own)} tower(s); see its log)"))
        if any(stops):
            self._stop_agreed = True
            if not any(self._vote):
                raise hooks_lib.PeerStopped.for_reasons(
                    step, {reason for reason, count in zip(STOP_REASONS, stops) if count})
        return out, step

    def before_save(self, session):
        """Nothing: the chief's own copies are every worker's, and the loop checks them."""
        del session

    def finish(self, session):
        """Nothing to release: a worker still waiting in a collective for this one fails at
        once when this process ends."""
        del session

