"""Worker threads that fail loudly: the first exception in any thread stops the whole run.

Each worker runs `target(stop_event)` and must return soon after `stop_event` is set. An
exception in a worker sets the event, so every other worker winds down, and the main thread
re-raises it (with the worker's traceback) from `raise_if_failed` or `stop`.
"""

import queue
import threading
import traceback
from typing import Callable


class WorkerError(RuntimeError):
    """A worker thread raised; the message holds the thread's name and traceback."""


class StopEvent(threading.Event):
    """A `threading.Event` that also calls its `on_set` callbacks when first set, whoever sets
    it (the budget, the evaluator, a signal, a failing worker): so what workers wait on that is
    not this event (a replay's rate limiter) is released too."""

    def __init__(self):
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._fired = threading.Lock()

    def on_set(self, callback: Callable[[], None]) -> None:
        """Calls `callback()` (quick, thread-safe) when the event is first set, or now if it
        already is."""
        self._callbacks.append(callback)
        if self.is_set():  # set before (or while) the callback was added: calling twice is safe
            callback()

    def set(self) -> None:
        super().set()
        if self._fired.acquire(blocking=False):  # once, however many threads set it
            for callback in self._callbacks:
                callback()


class ThreadRunner:
    """Starts named daemon threads, watches them, and stops them together."""

    def __init__(self):
        self.stop_event = StopEvent()
        self._threads: list[threading.Thread] = []
        self._errors: queue.Queue = queue.Queue()

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Calls `callback()` (quick, thread-safe) as soon as the run is asked to stop."""
        self.stop_event.on_set(callback)

    def start(self, name: str, target: Callable[[threading.Event], None]) -> None:
        def run():
            try:
                target(self.stop_event)
            except BaseException as e:  # noqa: BLE001  (re-raised in the main thread)
                self._errors.put(WorkerError(
                    f"thread {name!r} failed:\n{''.join(traceback.format_exception(e))}"))
                self.stop_event.set()

        # Daemon threads: a worker stuck in a C call can never keep the process alive.
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def raise_if_failed(self) -> None:
        """Re-raises the first worker failure, if any, in the calling thread."""
        if not self._errors.empty():
            raise self._errors.get()

    def wait(self, timeout: float) -> bool:
        """Sleeps up to `timeout` seconds; True if the run was asked to stop meanwhile."""
        return self.stop_event.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Asks every worker to stop, joins them, then re-raises any worker failure."""
        self.stop_event.set()
        for thread in self._threads:
            thread.join(timeout)
        hung = [t.name for t in self._threads if t.is_alive()]
        self.raise_if_failed()
        if hung:
            raise WorkerError(f"threads {hung} did not stop within {timeout} s")
