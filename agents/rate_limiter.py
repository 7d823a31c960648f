"""Holds the learner's sampling and the actors' inserting to a fixed ratio.

Free-running actors and learner (as in the Ape-X paper) make the number of updates per env step
depend on the machine: on a 2-core CPU the learner falls behind, on a GPU it may run ahead. A
target samples-per-insert ratio (as Reverb's `SampleToInsertRatio`) makes a run's learning
dynamics the same everywhere; the side that runs ahead waits.
"""

import threading
import time


class SampleToInsertRatio:
    """Lets sampling and inserting proceed while they stay near `samples_per_insert`.

    With x = samples_per_insert * (inserted - min_size) - sampled, inserting is allowed while
    x <= tolerance and sampling a batch while x >= batch - tolerance; tolerance >= batch / 2 and
    >= one insert's worth of samples leaves one of them always allowed, so they never deadlock.

    Args:
      samples_per_insert: target ratio of sampled to inserted transitions.
      min_size: inserts allowed before any sampling (the learner's warm-up).
      tolerance: how far, in samples, either side may run ahead.
    """

    def __init__(self, samples_per_insert: float, min_size: int, tolerance: float):
        if samples_per_insert <= 0:
            raise ValueError(f"samples_per_insert must be > 0, got {samples_per_insert}")
        self.samples_per_insert, self.min_size = samples_per_insert, min_size
        self.tolerance = tolerance
        self._cond = threading.Condition()
        self._inserted = self._sampled = 0
        self.waited_s = dict(insert=0.0, sample=0.0)

    def _excess(self) -> float:
        return self.samples_per_insert * (self._inserted - self.min_size) - self._sampled

    def _await(self, side: str, allowed, stop: threading.Event) -> bool:
        start = time.perf_counter()
        with self._cond:
            while not allowed() and not stop.is_set():
                self._cond.wait(0.05)
        self.waited_s[side] += time.perf_counter() - start
        return not stop.is_set()

    def await_insert(self, stop: threading.Event) -> bool:
        """Blocks while the actors are ahead; False if the run is stopping."""
        return self._await("insert", lambda: self._inserted < self.min_size
                           or self._excess() <= self.tolerance, stop)

    def await_sample(self, batch_size: int, stop: threading.Event) -> bool:
        """Blocks while the learner is ahead (or warming up); False if the run is stopping."""
        return self._await("sample", lambda: self._inserted >= self.min_size
                           and self._excess() >= batch_size - self.tolerance, stop)

    def inserted(self, count: int) -> None:
        with self._cond:
            self._inserted += count
            self._cond.notify_all()

    def sampled(self, count: int) -> None:
        with self._cond:
            self._sampled += count
            self._cond.notify_all()
