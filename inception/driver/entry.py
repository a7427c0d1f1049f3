"""What the training command does once its flags are settings (inception/train.py parses
them): trains, runs the learning-rate range test or serves a parameter server's variables,
turns whatever ends the run into one line and an exit status, and says what to run next."""

import os
import shlex
import signal
import sys

from common import cli
from common import signals
from inception.driver import startup
from inception.loop import first_step


def print_next_steps(train_dir, result):
    """Where the results are and what to run next (paths quoted for the shell, so the commands
    can be pasted as they are): with validation, the tools are pointed at the best checkpoint."""
    quoted = shlex.quote(train_dir)
    cli.log(f"Checkpoints and TensorBoard events: {train_dir} (last: {result.checkpoint})")
    if result.last_validation is not None:
        from inception.run import best as best_lib  # pylint: disable=import-outside-toplevel
        best = best_lib.best_dir(train_dir)
        cli.log(f"Validation at step {result.last_validation.step}: "
                f"{result.last_validation.line()}; the best checkpoint is in {best}")
        quoted = shlex.quote(best)
    cli.log(f"  watch training:  bin/tensorboard --logdir={shlex.quote(train_dir)}   (then open "
            "http://localhost:6006)")
    cli.log(f"  evaluate:        {cli.program_command('eval')} --checkpoint_dir={quoted} "
            "--run_once")
    cli.log(f"  export it:       {cli.program_command('export')} --checkpoint_dir={quoted} "
            "--export_dir=<dir>")
    cli.log(f"  classify images: {cli.program_command('classify')} --model={quoted} "
            "<images or folders>")


def exit_now(message):
    """Last resort when TensorFlow hangs past its own timeout (a task of the cluster is gone
    or stuck): one line, then exit at once with the restart code (a normal exit would wait for
    the stuck call)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(signals.exit_status(signal.SIGTERM))  # pylint: disable=protected-access


def fail(error):
    """Ends the process with `error`'s one line: the restart code for an error a restart may
    get past (a lost task), else 1."""
    cli.fail(error, code=signals.exit_status(signal.SIGTERM) if error.retryable else 1)


def serve_parameters(cluster):
    """The parameter-server task: serves variables until every worker is done; exits with the
    status of the signal that stopped the cluster, if one did."""
    from inception import distributed  # pylint: disable=import-outside-toplevel
    try:
        signal_number = distributed.run_parameter_server(cluster, log=cli.log)
    except distributed.ClusterError as error:
        fail(error)
    if signal_number is not None:
        raise SystemExit(signals.exit_status(signal_number))


def report_worker_end(settings, result):
    """What a worker of a cluster prints at its end (the chief also where the files are); a
    worker that another task's signal stopped exits as that task does."""
    if settings.is_chief:
        print_next_steps(settings.train_dir, result)
    if result.stopped_by_peer and result.stopped_by_signal is None and not result.stopped_early:
        saved = f"; the chief saved {result.checkpoint}" if settings.is_chief else ""
        if result.peer_signal is None:
            cli.fail(f"training stopped at step {result.step} because another task of the "
                     f"cluster stopped (see its log){saved}; start every task again to resume.")
        status = signals.exit_status(result.peer_signal)
        why = (f"got {signal.Signals(result.peer_signal).name}"
               + (" (a preemption)" if result.peer_signal == signal.SIGTERM else ""))
        cli.fail(f"training stopped at step {result.step} because another task of the cluster "
                 f"{why}{saved}; exit status {status}: start every task again to resume.",
                 code=status)
    early = (" (the chief's validation stopped the run early: see its log)"
             if result.stopped_early and not settings.is_chief else "")
    cli.log(f"worker {settings.cluster.task_id} done at step {result.step}{early}.")


def train(settings):
    """Trains (TensorFlow loads here); returns session_loop.TrainResult or ends with one line."""
    clock = first_step.StartupClock.from_process_start("interpreter and flags")
    startup.quiet_tensorflow()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from inception.driver import launch  # pylint: disable=import-outside-toplevel
    clock.mark("TensorFlow import")
    try:
        return launch.train(settings, log=cli.log, on_stuck=exit_now, startup=clock)
    except cli.UserError as error:
        fail(error)
    except (OSError, tf.errors.OpError) as error:
        cli.fail(startup.stopped_line(error))


def find_learning_rate(settings, range_settings):
    """The learning-rate range test instead of training: a plot and one suggested rate."""
    startup.quiet_tensorflow()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from common import error_lines  # pylint: disable=import-outside-toplevel
    from common import files  # pylint: disable=import-outside-toplevel
    from inception.driver import launch  # pylint: disable=import-outside-toplevel
    from inception.driver import lr_range  # pylint: disable=import-outside-toplevel
    try:
        files.ensure_writable_directory(settings.train_dir)
    except (OSError, tf.errors.OpError) as error:
        cli.fail(error_lines.cannot_write(
            f"the range test's plot in --train_dir={settings.train_dir}", error))
    plot = os.path.join(settings.train_dir, "learning_rate_range.png")
    test = lr_range.RangeTest(range_settings.lr_range_min, range_settings.lr_range_max,
                              range_settings.lr_range_steps)
    try:
        result = launch.find_learning_rate(settings, test, plot, log=cli.log)
    except cli.UserError as error:
        cli.fail(error)
    cli.log(f"the smoothed loss was lowest at {result.lowest_rate:.3g}; suggested: "
            f"--initial_learning_rate={result.suggested_rate:.2g} (plot: {plot})")


def finish(settings, cluster, result):
    """The end of a run: where the files are and what to run next (a cluster's worker: its own
    end); a run a signal stopped exits with that signal's status."""
    if cluster is not None:
        report_worker_end(settings, result)
    else:
        print_next_steps(settings.train_dir, result)
    if result.stopped_by_signal is not None:
        cli.log(f"stopped by {signal.Signals(result.stopped_by_signal).name} at step "
                f"{result.step}; run the same command to resume.")
        raise SystemExit(signals.exit_status(result.stopped_by_signal))
