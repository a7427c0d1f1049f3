"""Where the towers' input comes from: the pipeline on this machine (the default), the tf.data
service's workers on other machines (--input_service, inputs/service.py), or one fixed random
batch made on the towers' devices (--synthetic_input, inputs/synthetic.py, for timing the
step alone). The section of the training settings, its help texts and its rules, in one place.
Free of TensorFlow.
"""

import dataclasses

from common.field_flags import Flag
from inception.config.rules import SettingsError

SERVICE_PROTOCOL = "grpc://"
DEFAULT_INPUT_SERVICE_TIMEOUT_SECS = 300.0  # a step waits this long for a lost service's batch


@dataclasses.dataclass(frozen=True)
class InputSourceSettings:
    """input_service: the address of a tf.data service dispatcher ("" for none);
    input_service_timeout_secs: how long one step may wait for its batch from it;
    synthetic_input: train on a fixed random batch instead of the data set's images."""
    input_service: str = ""
    input_service_timeout_secs: float = DEFAULT_INPUT_SERVICE_TIMEOUT_SECS
    synthetic_input: bool = False

    def validate(self, deterministic):
        """Raises SettingsError for a setting no run can use (`deterministic`: the run's
        --deterministic)."""
        if not self.input_service:
            return
        service_host_port(self.input_service)
        if not self.input_service_timeout_secs > 0:
            raise SettingsError("--input_service_timeout_secs="
                                f"{self.input_service_timeout_secs} must be positive.")
        if deterministic:
            raise SettingsError("--input_service and --deterministic: the service's workers send "
                                "batches in the order they finish them, which no seed fixes; drop "
                                "one of the two.")
        if self.synthetic_input:
            raise SettingsError("--input_service and --synthetic_input both set the input; "
                                "pass one.")


HELP = {
    "input_service":
        "grpc://host:port of a tf.data service dispatcher (bin/bazel run "
        "//inception:input_service): its workers read, decode, augment and batch the training "
        "input, each taking whole epochs, and stream the batches here (every example once an "
        "epoch; a cluster's workers share them). Not with --deterministic: the order batches "
        "arrive in is not reproducible. See docs/monitoring.md.",
    "input_service_timeout_secs":
        "With --input_service: a step that gets no batch for this long ends training with a "
        "line naming the service (its dispatcher or every worker is gone); the last checkpoint "
        "stays.",
    "synthetic_input":
        "Train on one fixed random batch made on each tower's device (no reading or "
        "decoding): the speed of the step alone, to compare with the real input's.",
}


def service_host_port(address, flag="input_service", protocol=SERVICE_PROTOCOL):
    """(host, port) of the address `protocol`host:port that `flag` gives; SettingsError
    naming the flag otherwise."""
    rest = address[len(protocol):] if address.startswith(protocol) else ""
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"--{flag}={address} is not an address {protocol}host:port "
                            f"(e.g. {protocol}input-host:5050).")
    return host, int(port)


@dataclasses.dataclass(frozen=True)
class InputServiceSettings:
    """`//inception:input_service`: a dispatcher on `port` (unless `dispatcher` names one
    elsewhere) and `num_workers` workers in this process, each on its own port from
    `worker_port` (0: any free one); `work_dir`: the dispatcher's journal (fault tolerant);
    `host`: the name or address other machines reach this one at, under which the workers
    register ("": chosen, inputs/service.default_host)."""
    port: int = 0
    num_workers: int = 1
    dispatcher: str = ""
    worker_port: int = 0
    work_dir: str = ""
    host: str = ""

    def validate(self):
        """Raises SettingsError for a setting no service can use; returns self."""
        if not self.dispatcher and not 0 < self.port < 65536:
            raise SettingsError(f"--port={self.port}: give the dispatcher's port (1-65535), "
                                "e.g. --port=5050, or --dispatcher=host:port to add workers to "
                                "one running elsewhere.")
        if self.num_workers < 0 or (self.dispatcher and not self.num_workers):
            raise SettingsError(f"--num_workers={self.num_workers} must be at least "
                                f"{1 if self.dispatcher else 0}.")
        if self.dispatcher:
            service_host_port(self.dispatcher, flag="dispatcher", protocol="")
        if self.host and (":" in self.host or "/" in self.host or " " in self.host):
            raise SettingsError(f"--host={self.host}: give a host name or IPv4 address without "
                                "a port or protocol, e.g. --host=input-1.example.com.")
        if self.dispatcher and self.work_dir:
            raise SettingsError("--work_dir is the dispatcher's; these workers join the one at "
                                "--dispatcher: drop --work_dir.")
        return self


SERVICE_HELP = {
    "port": "Port of the dispatcher started here (trainers use --input_service=grpc://<this "
            "host>:PORT).",
    "num_workers": "Workers started in this process (each runs the whole input pipeline on "
                   "whole epochs; start more processes, on other machines too, with "
                   "--dispatcher). 0: the dispatcher alone.",
    "dispatcher": "host:port of a dispatcher running elsewhere: start only workers here, "
                  "which join it.",
    "worker_port": "First port of the workers (the next ones count up); 0: any free port.",
    "host": "Name or address at which trainers on other machines reach this machine: the "
            "workers started here register with the dispatcher under it. Default: the address "
            "this machine reaches --dispatcher from, or with a dispatcher here this machine's "
            "network address (the start lines say which).",
    "work_dir": Flag("Directory of the dispatcher's journal: a dispatcher restarted with the same "
                "--work_dir and --port takes its jobs up again (fault-tolerant mode).", path=True),
}
