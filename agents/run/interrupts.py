"""Ctrl-C and SIGTERM: the first asks the run to stop; none ever interrupts the stopping.

Python runs a signal handler in the main thread between any two bytecodes. A handler that
raises `KeyboardInterrupt` can therefore land anywhere, also inside the join of the worker
threads or a checkpoint write, and an exception that leaves the main thread while envpool's C++
threads still run aborts the process. So once a run is under way the handler raises nothing: it
records the signal and sets the run's stop event, and the driver stops as it does for any other
reason, with a final checkpoint. Later signals only print that the run is already stopping.

Before a run is under way (construction: compiling, starting envs) the first signal raises
`KeyboardInterrupt` as usual: nothing needs saving yet.
"""

import signal
import sys
from typing import Callable


class InterruptGuard:
    """The process's SIGINT and SIGTERM handler (`GUARD`, installed by the launcher)."""

    def __init__(self):
        self.received: str | None = None
        self._on_signal: Callable[[str], None] | None = None
        self._stopping = False
        self.installed = False

    def install(self) -> None:
        """Takes over SIGINT and SIGTERM (also when the parent started this process with SIGINT
        ignored, as a background job)."""
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        self.installed = True

    @property
    def under_way(self) -> bool:
        """Whether a run's driver has started (and signals no longer raise)."""
        return self._on_signal is not None

    def running(self, on_signal: Callable[[str], None]) -> None:
        """From now on a signal calls `on_signal(name)` (once) instead of raising."""
        self._on_signal, self.received, self._stopping = on_signal, None, False

    def stopping(self) -> None:
        """From now on every signal is only reported: the run is already stopping."""
        self._stopping = True

    def idle(self) -> None:
        """The run has ended: a signal raises `KeyboardInterrupt` again, as before it started
        (a script that runs several runs in turn can be stopped between them)."""
        self._on_signal, self.received, self._stopping = None, None, False

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self._stopping or self.received:
            print(f"{name}: already stopping; waiting for the threads and the final checkpoint",
                  file=sys.stderr, flush=True)
            return
        self.received = name
        if self._on_signal is None:
            raise KeyboardInterrupt(name)
        self._on_signal(name)


GUARD = InterruptGuard()
