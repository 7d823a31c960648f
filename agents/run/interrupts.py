"""Ctrl-C and SIGTERM, from the process's first line to its exit: never lost, never misread.

A launcher installs `GUARD` first, before it imports JAX or the agents, and what a signal does
then depends on where the process is:

  loading     (the imports; `install()`): nothing has started, so the process ends at once
              with exit status 130. Raising instead would not work: a `KeyboardInterrupt` in
              the middle of an import is caught and turned into an `ImportError`, or swallowed,
              by some libraries, and the run then trained to its end.
  starting    (`starting()`: flags, the run folder, compiling, envs, a Ray cluster): the signal
              raises `KeyboardInterrupt`, so what was started is stopped on the way out, and is
              also kept in `pending`, so one that a library swallowed still stops the run: the
              launcher checks it, and `running()` acts on it at once.
  running     (`running(on_signal)`): Python runs a handler between any two bytecodes, and an
              exception that leaves the main thread while envpool's C++ threads run aborts the
              process. So the handler raises nothing: it calls `on_signal` (the driver sets its
              stop event and ends with a final checkpoint).
  stopping    (`stopping()`: joining threads, the final save): a signal only prints that the
              run is already stopping.
  done        (`idle()`, after the final save): the signal is kept in `pending` and otherwise
              ignored quietly; nothing is left to stop. A script that runs several runs in turn
              calls `starting()` before the next one, which raises a signal kept meanwhile.
"""

import os
import signal
import sys
from typing import Callable

LOADING, STARTING, RUNNING, STOPPING, DONE = "loading", "starting", "running", "stopping", "done"


class InterruptGuard:
    """The process's SIGINT and SIGTERM handler (`GUARD`, installed by the launcher)."""

    def __init__(self):
        self.state = STARTING  # not installed: Python's own handler raises KeyboardInterrupt
        self.received: str | None = None  # the signal that stopped the run under way
        self.pending: str | None = None  # a signal no run has acted on yet
        self._on_signal: Callable[[str], None] | None = None
        self._next_unraisablehook = sys.unraisablehook
        self.installed = False

    def install(self) -> None:
        """Takes over SIGINT and SIGTERM (also when the parent started this process with SIGINT
        ignored, as a background job); until `starting()`, a signal ends the process."""
        self.state, self.pending, self.received = LOADING, None, None
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        if sys.unraisablehook is not self._unraisable:
            self._next_unraisablehook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        self.installed = True

    def _unraisable(self, unraisable) -> None:
        """`sys.unraisablehook`: a `KeyboardInterrupt` the handler raised into code that cannot
        raise (a garbage-collection callback, a `__del__`) is lost there, but the signal is kept
        in `pending` and acted on, so Python's "Exception ignored" trace would only mislead."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.pending:
            return
        self._next_unraisablehook(unraisable)

    @property
    def under_way(self) -> bool:
        """Whether a run's driver has started (and signals no longer raise)."""
        return self.state in (RUNNING, STOPPING)

    def starting(self) -> None:
        """From now on a signal raises `KeyboardInterrupt`; raises it now for a signal that came
        while the last run was finishing."""
        self.state, self._on_signal, self.received = STARTING, None, None
        self.raise_if_pending()

    def raise_if_pending(self) -> None:
        """Raises `KeyboardInterrupt` if a signal came that nothing has acted on (a library
        caught the one the handler raised)."""
        if self.pending:
            raise KeyboardInterrupt(self.pending)

    def running(self, on_signal: Callable[[str], None]) -> None:
        """From now on a signal calls `on_signal(name)` (once) instead of raising; a signal
        that came before and was swallowed is acted on now."""
        self._on_signal, self.received, self.state = on_signal, None, RUNNING
        if self.pending:
            self.received, self.pending = self.pending, None
            on_signal(self.received)

    def stopping(self) -> None:
        """From now on every signal is only reported: the run is already stopping."""
        self.state = STOPPING

    def idle(self) -> None:
        """The run has written its final checkpoint: from now on a signal is kept in `pending`
        and otherwise ignored (`starting()` makes signals raise again)."""
        self._on_signal, self.received, self.state = None, None, DONE

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.state == LOADING:
            sys.stderr.write(f"interrupted ({name}) while starting; nothing to save\n")
            sys.stderr.flush()
            os._exit(130)  # nothing is under way yet, and an exception here could be lost
        if self.state == DONE:
            self.pending = self.pending or name
            return
        if self.state == STOPPING or self.received:
            print(f"{name}: already stopping; waiting for the threads and the final checkpoint",
                  file=sys.stderr, flush=True)
            return
        if self.state == STARTING:
            self.pending = name
            raise KeyboardInterrupt(name)
        self.received = name
        self._on_signal(name)


GUARD = InterruptGuard()
