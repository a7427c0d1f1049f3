"""SIGINT and SIGTERM in every phase of a command: one line, the documented exit status (130 /
143, or the status a command chose for a signal: `set_exit_status`), and a second signal always
stops at once.

`handle_signals()`, called first by every entry point, makes the first signal raise
`Interrupted` in the main thread wherever it is (importing TensorFlow, building a graph,
writing a file: `finally` blocks and atomic writes clean up on the way out) and ends the process
with one line, unless a phase handles signals itself (the training loop and the evaluation
watch stop at their next safe point: inception/loop/stop_request.py).

The second signal must work even while the main thread sits in one long TensorFlow call:
Python runs its signal handlers only between bytecodes of the main thread, so two signals
that both arrive during one call reach the handler once, and the second would be lost. Every
signal is also written to a wakeup pipe by the interpreter's C handler the moment it arrives;
a watcher thread counts them there and ends the process at the second.

A scheduler's SIGTERM comes with a grace period before its SIGKILL (Kubernetes and Slurm: 30
s). A process whose main thread waits in a TensorFlow call that may not return soon (a read
from a lost input service, a peer or parameter server that stopped answering) would not act on
the signal in that time: `set_stop_deadline` makes the watcher end it after its own deadline,
with the signal's exit status (training: the restart code), before the SIGKILL would.
"""

import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# {signal number: exit status} where a command chose another status than 128 + the number.
_EXIT_STATUS = {}
# {signal number: seconds} from its first arrival to the end of the process at the latest.
_STOP_DEADLINE = {}


def set_exit_status(signal_number, status):
    """Makes a stop by `signal_number` end this process with `status` instead of 128 + the
    number, in every phase (training: SIGTERM is a preemption, --restart_exit_code)."""
    _EXIT_STATUS[signal_number] = status


def set_stop_deadline(signal_number, seconds):
    """Makes this process end, with one line and exit_status(`signal_number`), `seconds` after
    the first `signal_number` arrived if it still runs then (see the module docstring); the
    files it wrote stay valid, as after a second signal. Call before handle_signals()."""
    _STOP_DEADLINE[signal_number] = seconds


def exit_status(signal_number):
    """The exit status of a stop by `signal_number`: 128 + it (130 for SIGINT, 143 for
    SIGTERM) unless set_exit_status chose another."""
    return _EXIT_STATUS.get(signal_number, 128 + signal_number)


class Interrupted(KeyboardInterrupt):
    """The first SIGINT or SIGTERM of a phase that does not handle signals itself;
    `signal_number` says which (exit status 128 + it)."""

    def __init__(self, signal_number):
        super().__init__(signal.Signals(signal_number).name)
        self.signal_number = signal_number

    @property
    def exit_status(self):
        """130 for SIGINT, 143 for SIGTERM (or what set_exit_status chose)."""
        return exit_status(self.signal_number)


class _Watcher:
    """Counts SIGINT/SIGTERM from the wakeup pipe; the second of a phase ends the process."""

    def __init__(self):
        self.count = 0
        self._deadline = None
        self._lock = threading.Lock()
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # the C handler must never block on a full pipe
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), name="signal-watcher",
                         daemon=True).start()

    def _watch(self, read_fd):
        while True:
            for number in os.read(read_fd, 64):
                if number in SIGNALS:
                    self._count(number)

    def _count(self, number):
        with self._lock:
            self.count += 1
            if self._deadline is None and number in _STOP_DEADLINE:
                self._deadline = threading.Timer(_STOP_DEADLINE[number], _deadline_passed,
                                                 args=(number, _STOP_DEADLINE[number]))
                self._deadline.daemon = True
                self._deadline.start()
            if self.count < 2:
                return
        stop_at_once(number)

    def reset(self):
        with self._lock:
            self.count = 0


_WATCHER = None


def handle_signals():
    """Installs the behaviour of the module docstring; call from the main thread, first thing
    in an entry point. Safe to call again."""
    global _WATCHER  # pylint: disable=global-statement
    if _WATCHER is not None or threading.current_thread() is not threading.main_thread():
        return
    for number in SIGNALS:
        signal.signal(number, raise_interrupted)
    _WATCHER = _Watcher()
    previous_hook = sys.excepthook

    def one_line_on_interrupt(kind, value, trace):
        if not isinstance(value, Interrupted):
            previous_hook(kind, value, trace)
            return
        sys.stdout.flush()
        print(f"error: stopped by {value}; files already written stay valid and nothing was "
              "left half-written (rerun the same command to go on).", file=sys.stderr,
              flush=True)
        os._exit(value.exit_status)  # pylint: disable=protected-access
    sys.excepthook = one_line_on_interrupt


def stop_at_once(number, next_step="rerun the same command to go on"):
    """The second signal's end: one line, then exit_status(`number`) at once. Safe inside a
    signal handler (os.write and os._exit; print and sys.exit are not, and sys.exit would wait
    for a TensorFlow call under way)."""
    os.write(2, f"{signal.Signals(number).name} received again: stopping at once; files already "
                f"written stay valid ({next_step}).\n".encode())
    os._exit(exit_status(number))  # pylint: disable=protected-access


def _deadline_passed(number, seconds):
    os.write(2, f"{signal.Signals(number).name} received {seconds:g} s ago and this process has "
                "not stopped: a TensorFlow call still waits (for its input, a peer or a "
                f"parameter server); stopping now with exit status {exit_status(number)}. Files "
                "already written stay valid: the last checkpoint is the newest (start it again "
                "to resume).\n".encode())
    os._exit(exit_status(number))  # pylint: disable=protected-access


def raise_interrupted(number, frame):
    """The signal handler outside phases that handle signals themselves."""
    del frame
    raise Interrupted(number)


def new_phase():
    """A phase that handles the first signal itself begins: count signals afresh, so that the
    second one of this phase (not one from before it) stops at once."""
    if _WATCHER is not None:
        _WATCHER.reset()
