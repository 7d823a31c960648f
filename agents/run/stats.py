"""Counters shared by worker threads and read by the main loop."""

import collections
import threading

import numpy as np


class RunStats:
    """Thread-safe run counters and the returns of recently finished episodes.

    With several processes (`agents.parallel.step_counts`) each counts its own actors' steps
    and episodes, and what it reads (`get`, `snapshot`, `state_dict`: the progress line, the
    metrics, checkpoints) adds the other processes' counts since this start (`set_others`);
    the budget (`stop_at`) compares this process's own count.

    Args:
      window: how many recent episode returns to average over.
    """

    def __init__(self, window: int = 100):
        self._lock = threading.Lock()
        self._counts = collections.Counter()
        self._start = collections.Counter()  # the counts restored at this start
        self._others = collections.Counter()  # other processes' counts since this start
        self._returns = collections.deque(maxlen=window)
        self._limits: list[tuple[str, int, threading.Event]] = []

    def stop_at(self, name: str, limit: int, event: threading.Event) -> None:
        """Sets `event` as soon as this process's own counter `name` (what it restored plus
        what it counted) reaches `limit` (a budget enforced at the step that reaches it, not at
        the next look of the main thread)."""
        with self._lock:
            self._limits.append((name, limit, event))
            self._check_limits()

    def _check_limits(self) -> None:
        for name, limit, event in self._limits:
            if self._counts[name] >= limit:
                event.set()

    def add(self, **counts: int) -> None:
        with self._lock:
            self._counts.update(counts)
            self._check_limits()

    def episodes_done(self, returns) -> None:
        with self._lock:
            self._returns.extend(float(r) for r in returns)
            self._counts["episodes"] += len(returns)

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name] + self._others[name]

    def since_start(self, names: tuple[str, ...]) -> list[int]:
        """This process's own counts of `names` since this start (what it restored excluded)."""
        with self._lock:
            return [self._counts[name] - self._start[name] for name in names]

    def set_others(self, counts: dict[str, int]) -> None:
        """The other processes' counts since this start (the sum over all processes of
        `since_start`, less this one's), added to every read from now on."""
        with self._lock:
            self._others = collections.Counter(counts)

    def snapshot(self) -> dict[str, float]:
        """All counters, plus the mean recent episode return (NaN before the first)."""
        with self._lock:
            out = self._totals()
            out["episode_return"] = (sum(self._returns) / len(self._returns)
                                     if self._returns else float("nan"))
            return out

    def drain(self) -> tuple[dict[str, int], list[float]]:
        """(counters, returns finished) since the last drain, and resets both; a worker
        process forwards them to the main process's `RunStats` with `merge`."""
        with self._lock:
            counts, returns = dict(self._counts), list(self._returns)
            self._counts.clear()
            self._returns.clear()
            return counts, returns

    def merge(self, counts: dict[str, int], returns: list[float]) -> None:
        """Adds another `RunStats`'s `drain()` (its episodes are counted in `counts`)."""
        with self._lock:
            self._counts.update(counts)
            self._returns.extend(returns)
            self._check_limits()

    def state_dict(self) -> dict[str, int]:
        """The run's counters: with several processes, summed over them. `env_steps` is
        always there (0 before the first step), as a checkpoint's meta must hold it: a run
        stopped before its actors' first step still saves one that resumes."""
        with self._lock:
            return {"env_steps": 0} | self._totals()

    def _totals(self) -> dict[str, int]:
        # Not `Counter.__add__`: it drops counters at 0.
        return {k: self._counts[k] + self._others[k] for k in {**self._counts, **self._others}}

    def load_state_dict(self, counts: dict[str, int]) -> None:
        """Restores the run's counters (a checkpoint's): this start counts on from them."""
        with self._lock:
            self._counts = collections.Counter({k: int(v) for k, v in counts.items()})
            self._start = collections.Counter(self._counts)
            self._others = collections.Counter()


class EpisodeReturns:
    """One actor's running per-env returns; finished episodes and env steps go to `stats`."""

    def __init__(self, num_envs: int, stats: RunStats):
        self._returns = np.zeros(num_envs)
        self._stats = stats

    def step(self, env_ids: np.ndarray, rewards: np.ndarray, ended: np.ndarray) -> None:
        """Adds one recv batch: `[B]` env ids, rewards and episode-end flags."""
        self._returns[env_ids] += rewards
        if ended.any():
            self._stats.episodes_done(self._returns[env_ids[ended]])
            self._returns[env_ids[ended]] = 0.0
        self._stats.add(env_steps=len(env_ids))
