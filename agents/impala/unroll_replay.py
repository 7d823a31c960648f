"""IMPALA with experience replay: a replay of past unrolls mixed into every learner batch.

Espeholt et al. 2018 (arXiv:1802.01561), Sec. 5.2.2 and Table 2 ("with replay"): besides the
fresh unrolls from the actors, each batch holds unrolls drawn uniformly from a memory of recent
ones, so the learner trains on data from much older policies than the actors' lag alone gives;
the off-policy corrections are compared under that larger gap. The replayed unrolls keep their
behaviour logits and the parameter versions they were acted with, so V-trace corrects them and
the learner's policy-lag histogram counts their lag (`agents.impala.learner.count_lags`).

`UnrollReplay` has the methods of `UnrollQueue` (the channel of `agents.run.interfaces`): the
actors `put` unrolls as before and the learner's `get_batch` returns mixed batches. The memory
is a FIFO of the newest `capacity` fresh unrolls; it is not checkpointed (a resumed run refills
it from fresh data).
"""

import threading
from typing import Any

import numpy as np

from agents.impala.unroll import Unrolls
from agents.impala.unroll_queue import UnrollQueue


def replayed_per_batch(size: int, proportion: float) -> int:
    """Replayed unrolls in a batch of `size`: round(proportion * size), keeping at least one
    fresh unroll (a batch of replayed data alone would never bring the actors' data in)."""
    if not 0.0 <= proportion < 1.0:
        raise ValueError(f"replay_proportion must be in [0, 1), got {proportion}")
    return min(int(round(proportion * size)), size - 1)


class UnrollReplay:
    """An `UnrollQueue` whose batches mix in unrolls replayed from a memory of recent ones.

    Args:
      unrolls: the queue the actors put fresh unrolls into.
      capacity: unrolls the memory holds (the oldest is overwritten first).
      proportion: share of each batch drawn from the memory, in [0, 1).
      seed: seed of the uniform draws.

    A batch of `size` holds `size - k` fresh unrolls, in the order they came, then `k =
    replayed_per_batch(size, proportion)` distinct unrolls drawn uniformly from the memory as it
    was before this batch's fresh ones entered it. Until the memory holds k unrolls, batches are
    all fresh.
    """

    def __init__(self, unrolls: UnrollQueue, capacity: int, proportion: float, seed: Any):
        if capacity < 1:
            raise ValueError(f"replay_unrolls must be >= 1, got {capacity}")
        replayed_per_batch(2, proportion)  # checks proportion
        self.unrolls, self.capacity, self.proportion = unrolls, int(capacity), float(proportion)
        self._rng = np.random.default_rng(seed)
        self._memory: Unrolls | None = None  # fields [capacity, ...], allocated at first insert
        self._size = self._next = 0
        self._lock = threading.Lock()  # `status` reads from the driver's thread
        self.fresh_count = self.replayed_count = 0

    @property
    def waited_s(self) -> float:
        return self.unrolls.waited_s

    def put(self, unrolls: Unrolls, stop: threading.Event) -> bool:
        return self.unrolls.put(unrolls, stop)

    def close(self) -> None:
        self.unrolls.close()

    def __len__(self) -> int:
        """Unrolls in the memory."""
        return self._size

    def get_batch(self, size: int, stop: threading.Event) -> Unrolls | None:
        """`size` unrolls `[size, ...]`: fresh ones from the queue, then replayed ones; None if
        `stop` is set or the queue closes before the fresh ones are all there."""
        k = replayed_per_batch(size, self.proportion)
        if self._size < k:
            k = 0
        fresh = self.unrolls.get_batch(size - k, stop)
        if fresh is None:
            return None
        with self._lock:
            if k:
                picks = self._rng.choice(self._size, size=k, replace=False)
                replayed = Unrolls(*(field[picks] for field in self._memory))
                batch = Unrolls(*(np.concatenate([a, b]) for a, b in zip(fresh, replayed)))
            else:
                batch = fresh
            self._insert(fresh)
            self.fresh_count += size - k
            self.replayed_count += k
        return batch

    def _insert(self, fresh: Unrolls) -> None:
        """Writes the fresh unrolls over the oldest slots."""
        if self._memory is None:
            self._memory = Unrolls(*(np.zeros((self.capacity,) + f.shape[1:], f.dtype)
                                     for f in fresh))
        slots = (self._next + np.arange(len(fresh.env_ids))) % self.capacity
        for store, field in zip(self._memory, fresh):
            store[slots] = field
        self._next = int(slots[-1] + 1) % self.capacity
        self._size = min(self._size + len(slots), self.capacity)

    def status(self) -> dict[str, float]:
        """The queue's values, the memory's fill and the reuse: replayed unrolls per fresh one
        trained on so far (each fresh unroll is trained on once fresh, then this many times
        from the memory on average)."""
        with self._lock:
            reuse = self.replayed_count / max(self.fresh_count, 1)
            return self.unrolls.status() | dict(replay_size=self._size, replay_reuse=reuse)
