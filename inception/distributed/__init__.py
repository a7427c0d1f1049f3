"""Training on several machines with TensorFlow's distributed runtime, one module per role:
connections.py (limits, errors, reaching tasks, servers), parameter_server.py, member.py (what
every worker shares: its server, start-up waits, bounded calls, the lost-task error), worker.py
(a worker beside parameter servers), collective.py (a worker of a cluster without them: an
all-reduce, see there) and watchdog.py.

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

from inception.distributed.collective import CollectiveWorker
from inception.distributed.connections import ClusterError
from inception.distributed.parameter_server import run_parameter_server
from inception.distributed.worker import ClusterWorker

__all__ = ["ClusterError", "ClusterWorker", "CollectiveWorker",
           "run_parameter_server", "start_worker"]


def start_worker(cluster, server_config, log=print, on_stuck=None):
    """The worker of `cluster` (config.cluster.ClusterSettings), its server started: beside
    parameter servers (ClusterWorker) or, in a cluster without them, CollectiveWorker."""
    kind = CollectiveWorker if cluster.collective else ClusterWorker
    return kind(cluster, server_config, log, on_stuck)
