"""IMPALA's channel from actors to learner: a bounded queue of unrolls.

Espeholt et al. 2018 (arXiv:1802.01561), Sec. 3: actors send fixed-length unrolls with their
behaviour logits to the learner, which trains on batches of them as they arrive ("dynamic
batching": a batch holds whichever actors' unrolls came first). The queue is bounded so that an
actor waits when the learner falls behind, instead of piling up ever staler data.

An `UnrollQueue` is what the actors `put` into and the learner takes batches from
(`get_batch`); `close` wakes both when the run stops. `agents.impala.unroll_replay.UnrollReplay`
offers the same methods with a replay of past unrolls mixed into every batch.
"""

import queue
import threading
import time

from agents.impala.unroll import Unrolls, stack_unrolls

POLL_S = 0.1  # how soon a stop or a close is noticed by a waiting put or get


def split_unrolls(unrolls: Unrolls) -> list[Unrolls]:
    """One `Unrolls` of K=1 per unroll of `unrolls` (fields `[K, ...]`), so the queue bounds
    unrolls, not groups."""
    return [Unrolls(*(field[k:k + 1] for field in unrolls)) for k in range(len(unrolls.env_ids))]


class UnrollQueue:
    """A bounded FIFO of single unrolls between IMPALA's actors and its learner.

    Args:
      capacity: unrolls it holds before `put` waits (the paper's backpressure).
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"queue_size must be >= 1, got {capacity}")
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._closed = threading.Event()
        self.waited_s = 0.0  # cumulative seconds `get_batch` waited for unrolls

    def put(self, unrolls: Unrolls, stop: threading.Event) -> bool:
        """Adds each of the K unrolls of `unrolls` (fields `[K, ...]`), waiting while the queue is
        full; gives up when `stop` is set or the queue is closed. True if all were added."""
        for unroll in split_unrolls(unrolls):
            while True:
                if stop.is_set() or self._closed.is_set():
                    return False
                try:
                    self._queue.put(unroll, timeout=POLL_S)
                    break
                except queue.Full:
                    continue
        return True

    def get_batch(self, size: int, stop: threading.Event) -> Unrolls | None:
        """The next `size` unrolls stacked `[size, ...]`, in the order they came, from whichever
        actors sent them; None if `stop` is set or the queue closes before they are all there."""
        parts = []
        start = time.perf_counter()
        while len(parts) < size:
            try:
                parts.append(self._queue.get(timeout=POLL_S))
            except queue.Empty:
                if stop.is_set() or self._closed.is_set():
                    return None
        self.waited_s += time.perf_counter() - start
        return stack_unrolls(parts)

    def close(self) -> None:
        """Wakes every `put` and `get_batch` waiting on the queue: the run is stopping."""
        self._closed.set()

    def __len__(self) -> int:
        return self._queue.qsize()

    def status(self) -> dict[str, float]:
        """For the progress line and the metrics: unrolls waiting for the learner."""
        return dict(queue=len(self))
