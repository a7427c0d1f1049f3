"""Which cluster a task belongs to: its job, index and every task's address.

From the cluster flags (`--job_name --task_id --ps_hosts --worker_hosts`), or, when those are
absent, from the environment its scheduler sets (environment.py: TF_CONFIG, a Kubernetes
JobSet, Slurm). Flags win; an environment describing another task than a flag names is an
error.
A cluster with parameter servers keeps the variables on them; one without (no --ps_hosts, no
`ps` in TF_CONFIG) is `collective`: every worker keeps its own copies and the gradients are
summed by an all-reduce over every tower of every worker.
Free of TensorFlow, so the entry point checks these flags before it loads TensorFlow.
"""

import dataclasses

from common.field_flags import Flag
from inception.config import environment as environment_lib
from inception.config import recovery
from inception.config.environment import ClusterConfigError

JOBS = ("ps", "worker")


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """One task of a cluster: its job and index and every task's `host:port`.

    num_replicas_to_aggregate: gradients averaged into each synchronous update (None: one per
      worker). With the default every update waits for, and averages, exactly one gradient of
      every worker; with fewer, an update takes the first gradients to arrive (a fast worker
      may supply several) and the late ones are dropped as stale.
    restart_exit_code: the exit status of every task when the cluster stops to be started
      again (a task got SIGTERM, or one was lost); check_restart_exit_code says which work.
    cluster_port: where tasks listen when a JobSet or Slurm describes the cluster
      (environment.py).
    """
    job_name: str
    task_id: int
    ps_hosts: tuple
    worker_hosts: tuple
    num_replicas_to_aggregate: int = None
    startup_timeout_secs: float = 600.0
    step_timeout_secs: float = 600.0
    restart_exit_code: int = recovery.DEFAULT_RESTART_EXIT_CODE
    cluster_port: int = environment_lib.DEFAULT_PORT

    @property
    def num_workers(self):
        """Number of worker tasks."""
        return len(self.worker_hosts)

    @property
    def collective(self):
        """True for a cluster without parameter servers: an all-reduce across the workers."""
        return not self.ps_hosts

    @property
    def is_chief(self):
        """True for worker task 0, which initializes the model and writes every file."""
        return self.job_name == "worker" and self.task_id == 0

    @property
    def replicas_to_aggregate(self):
        """Gradients per synchronous update."""
        return self.num_replicas_to_aggregate or self.num_workers

    @property
    def address(self):
        """This task's `host:port`."""
        return self.hosts(self.job_name)[self.task_id]

    def hosts(self, job_name):
        """The `host:port` list of `job_name` ('ps' or 'worker')."""
        return self.ps_hosts if job_name == "ps" else self.worker_hosts

    def cluster_spec(self):
        """The tf.compat.v1.train.ClusterSpec of the whole cluster."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        jobs = {"worker": list(self.worker_hosts)}
        if self.ps_hosts:
            jobs["ps"] = list(self.ps_hosts)
        return tf.compat.v1.train.ClusterSpec(jobs)

    def describe(self):
        """One log line: who this task is in which cluster."""
        role = " (chief)" if self.is_chief else ""
        members = (f"{self.num_workers} worker(s) and no parameter server (all-reduce)"
                   if self.collective else f"{len(self.ps_hosts)} parameter server(s) and "
                   f"{self.num_workers} worker(s)")
        return f"{self.job_name} task {self.task_id}{role} at {self.address}; cluster of {members}"

    def validate(self, from_environment=frozenset(), source="TF_CONFIG"):
        """Raises ClusterConfigError for a cluster that cannot work; returns self. Settings
        named in `from_environment` came from the scheduler's environment `source` (e.g.
        TF_CONFIG), and the message says so."""
        def name(field, job=None):
            if field == "hosts":
                field = f"{job}_hosts"
            if field in from_environment:
                return environment_lib.setting_name(source, field)
            return f"--{field}"

        if self.job_name not in JOBS:
            raise ClusterConfigError(f"{name('job_name')}={self.job_name!r}: use ps or worker.")
        for job in JOBS:
            if not self.hosts(job) and (job == "worker" or self.job_name == "ps"):
                raise ClusterConfigError(f"{name('hosts', job)} is empty; list every {job} task "
                                         "as host:port, comma-separated.")
            for address in self.hosts(job):
                split_address(address)
        everyone = self.ps_hosts + self.worker_hosts
        duplicates = sorted({a for a in everyone if everyone.count(a) > 1})
        if duplicates:
            raise ClusterConfigError(
                f"{', '.join(duplicates)} appears more than once in {name('ps_hosts')}/"
                f"{name('worker_hosts')}; give every task its own port.")
        count = len(self.hosts(self.job_name))
        if not 0 <= self.task_id < count:
            raise ClusterConfigError(
                f"{name('task_id')}={self.task_id} but {name('hosts', self.job_name)} lists "
                f"{count} task(s); use 0 to {count - 1}.")
        aggregate = self.num_replicas_to_aggregate
        if aggregate is not None and self.collective:
            raise ClusterConfigError(
                f"--num_replicas_to_aggregate={aggregate} is for parameter servers; an "
                "all-reduce (no --ps_hosts) always sums every worker's gradients.")
        if aggregate is not None and not 1 <= aggregate <= self.num_workers:
            raise ClusterConfigError(
                f"--num_replicas_to_aggregate={aggregate} must be between 1 and the number of "
                f"workers ({self.num_workers}): it is how many workers' gradients each update "
                "averages. For more examples per update raise --batch_size.")
        if self.startup_timeout_secs <= 0 or self.step_timeout_secs <= 0:
            raise ClusterConfigError("--startup_timeout_secs and --step_timeout_secs must be "
                                     "positive.")
        recovery.check_restart_exit_code(self.restart_exit_code)
        return self


def cluster_settings(job_name, task_id, ps_hosts, worker_hosts, environment=None, **options):
    """Validated ClusterSettings, or None when neither a cluster flag nor `environment` (the
    process's environment variables: environment.py's from_environment) names a cluster: this
    machine alone. `options`: the other ClusterSettings fields, by name, as their flags gave
    them (absent: the field's default).

    `num_replicas_to_aggregate` of None, 0 or -1 (the original's default) means every worker.
    """
    ps_hosts, worker_hosts = tuple(ps_hosts or ()), tuple(worker_hosts or ())
    cluster_port = options.get("cluster_port", ClusterSettings.cluster_port)
    from_env = environment_lib.from_environment(environment or {}, cluster_port,
                                           explicit=bool(job_name or worker_hosts))
    taken = set()
    if from_env is not None and from_env.single_task and not job_name:
        from_env = None  # a one-task job (e.g. a single-replica Vertex AI job): one machine
    if from_env is not None:
        environment_lib.check_against_flags(from_env, job_name, task_id, ps_hosts, worker_hosts)
        if not job_name:
            job_name, task_id = from_env.job_name, from_env.task_id
            taken |= {"job_name", "task_id"}
        taken |= {name for name, given in (("ps_hosts", ps_hosts),
                                           ("worker_hosts", worker_hosts)) if not given}
        ps_hosts = ps_hosts or from_env.ps_hosts
        worker_hosts = worker_hosts or from_env.worker_hosts
    if not job_name:
        if ps_hosts or worker_hosts:
            raise ClusterConfigError("--ps_hosts/--worker_hosts need --job_name=ps or "
                                     "--job_name=worker (and --task_id).")
        return None
    if (options.get("num_replicas_to_aggregate") or 0) <= 0:
        options["num_replicas_to_aggregate"] = None
    return ClusterSettings(job_name, task_id, ps_hosts, worker_hosts, **options).validate(
        frozenset(taken), from_env.source if from_env else "TF_CONFIG")


def split_address(address):
    """(host, port) of a `host:port` task address; ClusterConfigError otherwise."""
    host, separator, port = address.strip().rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ClusterConfigError(f"task address {address!r} is not host:port.")
    return host.strip("[]"), int(port)


CLUSTER_HELP = {
    "job_name": Flag(
        "Training on several machines: this "
        "task's job, ps (parameter server) or worker; empty: this machine alone.",
        choices=("",) + JOBS, default=""),
    "task_id": Flag(
        "Index of this task in --ps_hosts or --worker_hosts; "
        "worker 0 is the chief (initializes the model, writes every file).", default=0),
    "ps_hosts": Flag(
        "Parameter servers, host:port,host:port,...; none: the "
        "workers keep their own copies and all-reduce the gradients.", default=()),
    "worker_hosts": Flag(
        "Workers, host:port,host:port,...", default=()),
    "num_replicas_to_aggregate":
        "Gradients averaged into each "
        "synchronous update (default: one from every worker; fewer lets an update "
        "go ahead without the slowest workers).",
    "startup_timeout_secs":
        "Longest a task waits for the others to come "
        "up (and a worker for the chief to initialize the model).",
    "step_timeout_secs":
        "Longest a worker waits for one synchronous step "
        "before it stops with an error naming the tasks that do not answer.",
    "cluster_port":
        "Port every task listens on when a Kubernetes JobSet or Slurm describes the cluster "
        "(further tasks on one Slurm node take the next ports).",
    "restart_exit_code":
        "Exit status that asks a scheduler to start the run again: of a run stopped by "
        "SIGTERM (a preemption), and on a cluster of every task when any task got SIGTERM or "
        "one was lost (138: what Kubeflow's ExitCode restart policy retries).",
}
