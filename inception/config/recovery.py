"""How a task that cannot go on asks to be started again, and when it decides that: the
recovery policy of the trainer in one place.

- **The restart code.** A task that stops for a reason a restart may get past exits with it
  (--restart_exit_code, DEFAULT_RESTART_EXIT_CODE): a SIGTERM (a preemption), a lost or stuck
  task of the cluster, a lost input service, a run directory still held by the chief's earlier
  run. Every such error is a cli.UserError whose `retryable` is true (distributed.TaskLostError,
  inputs.service.InputServiceError, run.lock.RunLockError of a cluster task); the entry point
  turns it into the restart code (driver/entry.fail), any other error into 1.
- **Why tasks stop together** (STOP_REASONS): a signal or the chief's early stopping, told to
  every task; SIGTERM wins over SIGINT (`first_signal`), so a preemption anywhere restarts all.
- **When a task is lost**: a parameter server probes every worker every PROBE_INTERVAL_SECS and
  gives up after PROBE_FAILURES misses; a worker's step that waits is watched (loop/liveness.py:
  STEP_PROBE_*); a TensorFlow call past its own timeout by STUCK_GRACE_SECS ends the process
  (distributed/watchdog.py); a SIGTERM not acted on within SIGTERM_DEADLINE_SECS ends it too
  (common/signals.py).

Free of TensorFlow, so the entry point reads it before TensorFlow loads.
"""

import signal

from inception.config.environment import ClusterConfigError

# The exit status that asks a scheduler to start the run again (a preemption, a lost task):
# Kubeflow's training operator reserves 138 (128 + SIGUSR1) for retryable user errors in its
# ExitCode restart policy, which retries every status of 128 and above (v1.9.0:
# IsRetryableExitCode) and takes 1-127 as permanent; a Kubernetes Job's podFailurePolicy
# (JobSet too) and a Slurm script can be told any code. TensorFlow's own preemption handler
# exits 42, which that policy would take as permanent.
DEFAULT_RESTART_EXIT_CODE = 138
# Exit statuses that already mean something else (cli.fail, the flags parser, Ctrl-C).
TAKEN_EXIT_CODES = {0: "success", 1: "an error", 2: "a bad flag", 130: "Ctrl-C"}
# A training task still running this long after a SIGTERM (its step waits for a peer or its
# input) ends itself with the restart code: within the 30 s that Kubernetes
# (terminationGracePeriodSeconds) and Slurm (KillWait) give before SIGKILL, with 5 s to spare
# for the exit. A task that stops on its own (its save included) is not cut short sooner.
SIGTERM_DEADLINE_SECS = 25.0

# Why a task of a cluster stops before the run's end, as the tasks tell each other: a signal
# (SIGTERM: a preemption) or the chief's early stopping.
STOP_REASONS = (signal.SIGINT, signal.SIGTERM, "early")

# A parameter server's probes of the workers, and every probe's connection timeout.
PROBE_INTERVAL_SECS = 2.0
PROBE_FAILURES = 3
PROBE_CONNECT_TIMEOUT_SECS = 3.0
# The input service's dispatcher and workers: how long a probe waits for each to answer.
SERVICE_PROBE_TIMEOUT_SECS = 5.0
# A step that waits this long is watched: probed every STEP_PROBE_EVERY_SECS, and lost after
# STEP_LOST_AFTER_PROBES failures in a row, 30 s into the step (plus the probes' own
# connection timeouts), well within the minute a user should wait for one line; a network
# blip shorter than the probes' span (20 s) ends nothing.
STEP_PROBE_AFTER_SECS = 10.0
STEP_PROBE_EVERY_SECS = 10.0
STEP_LOST_AFTER_PROBES = 3
# A TensorFlow call that outlives its own timeout by this long is stuck: the process ends.
STUCK_GRACE_SECS = 30.0
# The calls of a task that stops (closing a session, reading a flag).
SHUTDOWN_TIMEOUT_SECS = 10.0
# A killed task's connections can break a moment before its listening port closes (the kernel
# closes a dead process's sockets one by one), so a probe right after the error may still see it.
LOST_TASK_SETTLE_SECS = 5.0
# How long a parameter server that got a signal waits for the workers to stop with it.
PS_SIGNAL_GRACE_SECS = 60.0


def first_signal(reasons):
    """The signal among the stop `reasons` that decides how every task ends: SIGTERM (a
    preemption, the restart code) before SIGINT; None when neither is there."""
    for number in (signal.SIGTERM, signal.SIGINT):
        if number in reasons:
            return number
    return None


def check_restart_exit_code(code):
    """Raises ClusterConfigError unless `code` can mean "start me again": 3 to 255, and not a
    status that already means something else (TAKEN_EXIT_CODES)."""
    if not 3 <= code <= 255 or code in TAKEN_EXIT_CODES:
        taken = ", ".join(f"{value} ({meaning})" for value, meaning in TAKEN_EXIT_CODES.items())
        raise ClusterConfigError(
            f"--restart_exit_code={code}: use 3 to 255 but none of {taken}; the default "
            f"{DEFAULT_RESTART_EXIT_CODE} is the one Kubeflow's ExitCode policy retries.")
