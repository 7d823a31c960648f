"""Rate limiters a replay owns: when its adds and samples may proceed.

As a Reverb table owns its rate limiter, `PrioritizedReplay(rate_limiter=...)` makes every add
and every sample wait on it, so actors and learner only call `add` and `sample`; the handshake
lives in one place. Two limiters (Reverb's names):

- `MinSize`: samples wait until `min_size` transitions were inserted (the learner's warm-up);
  then both sides run free, as in the Ape-X paper.
- `SampleToInsertRatio`: after the warm-up, sampled / inserted transitions stay near
  `samples_per_insert`. Free-running actors and learner make the number of updates per env step
  depend on the machine (on a 2-core CPU the learner falls behind, on a GPU it may run ahead); a
  fixed ratio makes a run's learning dynamics the same everywhere: the side ahead waits.

`close()` releases every waiter for good (a stopping run): waits then return False.
"""

import threading
import time


class MinSize:
    """Sampling waits until `min_size` transitions were inserted; inserting never waits.

    Args:
      min_size: inserts before the first sample.
    """

    def __init__(self, min_size: int):
        if min_size < 0:
            raise ValueError(f"min_size must be >= 0, got {min_size}")
        self.min_size = int(min_size)
        self._cond = threading.Condition()
        self._inserted = self._sampled = 0
        self._closed = False
        self.waited_s = dict(insert=0.0, sample=0.0)

    def _insert_allowed(self, count: int) -> bool:
        return True

    def _sample_allowed(self, batch_size: int) -> bool:
        return self._inserted >= max(self.min_size, 1)

    def _await(self, side: str, allowed) -> bool:
        start = time.perf_counter()
        with self._cond:
            while not (self._closed or allowed()):
                self._cond.wait(0.1)
            closed = self._closed
        self.waited_s[side] += time.perf_counter() - start
        return not closed

    def await_insert(self, count: int) -> bool:
        """Blocks while `count` more inserts are not allowed; False once closed."""
        return self._await("insert", lambda: self._insert_allowed(count))

    def await_sample(self, batch_size: int) -> bool:
        """Blocks while a batch may not be sampled; False once closed."""
        return self._await("sample", lambda: self._sample_allowed(batch_size))

    def inserted(self, count: int) -> None:
        with self._cond:
            self._inserted += count
            self._cond.notify_all()

    def sampled(self, count: int) -> None:
        with self._cond:
            self._sampled += count
            self._cond.notify_all()

    def restore(self, inserted: int, sampled: int) -> None:
        """Counts a restored replay's history, so a resumed run keeps its warm-up and ratio."""
        with self._cond:
            self._inserted, self._sampled = int(inserted), int(sampled)
            self._cond.notify_all()

    def close(self) -> None:
        """Releases every waiting and future call."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed


class SampleToInsertRatio(MinSize):
    """Keeps sampling and inserting near `samples_per_insert` once `min_size` were inserted.

    With x = samples_per_insert * (inserted - min_size) - sampled, inserting is allowed while
    x <= tolerance and sampling a batch while x >= batch - tolerance; tolerance >= batch / 2 and
    >= one insert's worth of samples leaves one of them always allowed, so they never deadlock.

    Args:
      samples_per_insert: target ratio of sampled to inserted transitions, > 0.
      min_size: inserts before any sampling (the learner's warm-up).
      tolerance: how far, in samples, either side may run ahead.
    """

    def __init__(self, samples_per_insert: float, min_size: int, tolerance: float):
        super().__init__(min_size)
        if not samples_per_insert > 0:
            raise ValueError(f"samples_per_insert must be > 0, got {samples_per_insert}")
        self.samples_per_insert, self.tolerance = float(samples_per_insert), float(tolerance)

    def _excess(self) -> float:
        return self.samples_per_insert * (self._inserted - self.min_size) - self._sampled

    def _insert_allowed(self, count: int) -> bool:
        return self._inserted < self.min_size or self._excess() <= self.tolerance

    def _sample_allowed(self, batch_size: int) -> bool:
        return (self._inserted >= self.min_size
                and self._excess() >= batch_size - self.tolerance)
