"""`bazel run //inception:input_service`: TensorFlow's tf.data service for training input.

Starts a dispatcher on --port and --num_workers workers in this process (or, with
--dispatcher=host:port, only workers that join a dispatcher elsewhere: start one such process
per input machine). Trainers pass --input_service=grpc://<dispatcher host>:<port>; the
service's workers then read, decode, augment and batch their training input
(inputs/service.py). Logs where each server listens and, every few seconds while it changes,
how many workers the dispatcher has; runs until Ctrl-C or SIGTERM.
"""

import signal
import threading

from absl import app
from absl import flags

from common import cli
from inception.config import flag_table
from inception.config import sources
from inception.driver import startup

FLAGS = flags.FLAGS
flag_table.define_flags([sources.InputServiceSettings], sources.SERVICE_HELP)
flags.adopt_module_key_flags(flag_table)  # --help lists them as this program's own
WORKER_COUNT_EVERY_SECS = 5.0


def settings_from_flags():
    """InputServiceSettings from the parsed flags, checked (exit 2 and one line if bad)."""
    try:
        values = flag_table.values_of(FLAGS, sources.InputServiceSettings, sources.SERVICE_HELP)
        return sources.InputServiceSettings(**values).validate()
    except cli.UserError as error:
        return cli.fail(error, 2)


def start(settings, log):
    """(the dispatcher started here or None, the workers started here) as `settings` say."""
    from inception.inputs import service  # pylint: disable=import-outside-toplevel
    dispatcher, address = None, settings.dispatcher
    if not settings.dispatcher:
        address = f"localhost:{settings.port}"
    host, chosen = ((settings.host, "--host") if settings.host
                    else service.default_host(address))
    if not settings.dispatcher:
        dispatcher = service.start_dispatcher(settings.port, settings.work_dir)
        journal = (f", journal in {settings.work_dir} (fault tolerant)" if settings.work_dir
                   else "")
        log(f"dispatcher listening on port {settings.port} of {service.LISTENS_ON}{journal}; "
            f"train with --input_service=grpc://{host}:{settings.port}")
    workers = []
    for index in range(settings.num_workers):
        port = settings.worker_port + index if settings.worker_port else 0
        workers.append(service.start_worker(address, host, port))
        log(f"worker {index + 1} of {settings.num_workers} listening on port "
            f"{service.bound_port(workers[-1])} of {service.LISTENS_ON}, registering with the "
            f"dispatcher at {address} as {host} ({chosen}; --host to change)")
    return dispatcher, workers


def report_workers(dispatcher, stopped, log):
    """Logs the dispatcher's worker count whenever it changes, until `stopped` is set."""
    from inception.inputs import service  # pylint: disable=import-outside-toplevel
    last = None
    while not stopped.wait(WORKER_COUNT_EVERY_SECS if last is not None else 1.0):
        count = service.registered_workers(dispatcher)
        if count != last:
            log(f"{count} worker(s) registered with the dispatcher")
            last = count


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --port=5050.", 2)
    settings = settings_from_flags()
    startup.quiet_tensorflow()
    dispatcher, workers = start(settings, cli.log)
    stopped = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *unused: stopped.set())
    if dispatcher is not None:
        threading.Thread(target=report_workers, args=(dispatcher, stopped, cli.log),
                         daemon=True).start()
    stopped.wait()
    cli.log("stopping the input service")
    for server in workers + ([dispatcher] if dispatcher else []):
        server.stop()


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
