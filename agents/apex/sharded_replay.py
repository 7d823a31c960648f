"""The learner's replay over Ape-X's replay shards (`agents.apex.replay.ReplayShard`, each a Ray
actor holding one `PrioritizedReplay`), with the distribution and importance weights of one
buffer holding everything (Horgan et al. 2018, Sec. 3; Schaul et al. 2016, eq. 1-2).

Each batch is split over the shards in proportion to their total priority p^alpha and weighted
with the smallest priority of any shard; ids carry their shard (`local_id * num_shards + shard`);
new priorities go back to their shards in rounds that apply in order; a checkpoint holds every
shard in one `.npz`. A shard that dies ends the run with `ReplayShardLost`.
"""

import os
import threading
import zipfile
from typing import Any

import numpy as np
import ray
from ray.exceptions import RayActorError

from replay.prioritized import Sample

POLL_S = 0.1  # how often a sampler looks again while every shard is empty


class ReplayShardLost(RuntimeError):
    """A replay shard died; its transitions are gone with it."""


def shard_call(refs: Any, what: str) -> Any:
    """`ray.get(refs)`, turning a dead shard into `ReplayShardLost`."""
    try:
        return ray.get(refs)
    except RayActorError as e:
        raise ReplayShardLost(
            f"a replay shard died during {what}: {e}\nThe run cannot go on without its "
            "transitions; restart it with --resume (from the last checkpoint).") from e


def finished(refs: list, timeout: float) -> list:
    """The refs of `refs` that are ready within `timeout` seconds (all of them if they are)."""
    return ray.wait(refs, num_returns=len(refs), timeout=timeout)[0] if refs else []


class ShardedReplay:
    """The learner's replay over `shards`: `PrioritizedReplay`'s sample, update_priorities,
    stats, save and load, and `flush` for the priorities still on their way. Ids carry their
    shard: `local_id * num_shards + shard`.

    Args:
      shards: `ReplayShard` actor handles.
      beta: importance-weight exponent.
      seed: seed of the split of each batch over the shards (for `np.random.default_rng`).
    """

    def __init__(self, shards: list, beta: float, seed: Any):
        self.shards, self.beta = shards, beta
        self._rng = np.random.default_rng(seed)
        self._rng_lock = threading.Lock()  # the learner's sampler threads share the split
        self._updates_in_flight: list = []  # refs of the round of priorities the shards apply
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # rounds made meanwhile
        self._updates_lock = threading.Lock()  # the learner updates; a checkpoint flushes
        self._closed = threading.Event()

    def close(self) -> None:
        """Releases every add and sample waiting in a shard: the run is stopping."""
        self._closed.set()
        for shard in self.shards:
            shard.release.remote()

    def _all(self, method: str, *args) -> list:
        return shard_call([getattr(s, method).remote(*args) for s in self.shards], method)

    def stats(self) -> dict[str, int]:
        """Every shard's counters, summed."""
        totals: dict[str, int] = {}
        for shard_stats in self._all("stats"):
            for k, v in shard_stats.items():
                totals[k] = totals.get(k, 0) + v
        return totals

    def __len__(self) -> int:
        return self.stats()["size"]

    def sample(self, batch_size: int) -> Sample | None:
        """A batch drawn with P(i) = p_i^alpha / sum over all shards; None if the shards were
        released (the run is stopping). Thread-safe: several samplers may wait at once."""
        masses = np.array(self._all("priority_mass"))  # [S, 2] (sum, min) of p^alpha
        while masses[:, 0].sum() <= 0.0:  # nothing added yet: wait as one replay would
            if self._closed.wait(POLL_S):
                return None
            masses = np.array(self._all("priority_mass"))
        total = masses[:, 0].sum()
        with self._rng_lock:
            counts = self._rng.multinomial(batch_size, masses[:, 0] / total)  # [S]
        chosen = np.flatnonzero(counts)
        parts = shard_call([self.shards[k].sample.remote(int(counts[k])) for k in chosen],
                            "sample")
        if any(part is None for part in parts):
            return None
        num = len(self.shards)
        ids = np.concatenate([part.ids * num + k for part, k in zip(parts, chosen)])
        priorities = np.concatenate([part.priorities for part in parts])  # [B] p^alpha
        # The largest weight of any transition in any shard normalizes, as in one buffer.
        min_priority = min(masses[:, 1].min(), priorities.min())
        weights = (priorities / min_priority) ** -self.beta
        transitions = parts[0].transitions if len(parts) == 1 else {
            name: np.concatenate([part.transitions[name] for part in parts])
            for name in parts[0].transitions}
        return Sample(ids, transitions, weights.astype(np.float32), priorities / total,
                      priorities)

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> None:
        """Sends new priorities to their shards without waiting for them.

        One round is in flight at a time, so rounds apply in order; the rounds made while one is
        in flight go together in the next, in order, so an id's last priority wins as in one
        replay. A shard's error surfaces at a later call (or `flush`).
        """
        with self._updates_lock:
            self._pending.append((np.asarray(ids, np.int64), np.asarray(priorities)))
            if len(finished(self._updates_in_flight, 0)) == len(self._updates_in_flight):
                self._send_pending()

    def flush(self) -> None:
        """Waits until every priority given to `update_priorities` is applied."""
        with self._updates_lock:
            self._send_pending()
            shard_call(self._updates_in_flight, "update_priorities")

    def _send_pending(self) -> None:
        """Sends the pending rounds as one, once the round in flight is done; under the lock."""
        shard_call(self._updates_in_flight, "update_priorities")  # raises a shard's error
        self._updates_in_flight = []
        if not self._pending:
            return
        ids = np.concatenate([ids for ids, _ in self._pending])
        priorities = np.concatenate([p for _, p in self._pending])
        self._pending = []
        num = len(self.shards)
        shard_of = ids % num
        self._updates_in_flight = [
            self.shards[k].update_priorities.remote(ids[shard_of == k] // num,
                                                    priorities[shard_of == k])
            for k in np.unique(shard_of)]

    def save(self, path: str) -> None:
        """Writes every shard into one `.npz` (keys `shard<k>/...`), one shard in memory at a
        time, atomically (temporary file, then rename), with every priority sent so far."""
        self.flush()
        tmp = f"{path}.tmp"
        # O_NOFOLLOW: a link planted under the temporary's name is refused, not written through.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with open(fd, "wb") as file, zipfile.ZipFile(file, "w", allowZip64=True) as archive:
            arrays = {"num_shards": np.int64(len(self.shards))}
            for k, shard in enumerate(self.shards):
                arrays.update({f"shard{k}/{name}": array for name, array in
                               shard_call(shard.state_dict.remote(), "save").items()})
                for name, array in arrays.items():
                    with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
                        np.lib.format.write_array(f, np.asarray(array), allow_pickle=False)
                arrays = {}
        os.replace(tmp, path)

    def load(self, path: str) -> None:
        """Restores a file written by `save` with the same number of shards."""
        with np.load(path, allow_pickle=False) as data:
            saved = int(data["num_shards"]) if "num_shards" in data.files else 1
            if saved != len(self.shards):
                raise ValueError(f"{path} holds {saved} replay shards; this run has "
                                 f"replay_shards={len(self.shards)} (resume with {saved})")
            for k, shard in enumerate(self.shards):
                prefix = f"shard{k}/"
                shard_call(shard.load_state_dict.remote(
                    {n[len(prefix):]: data[n] for n in data.files if n.startswith(prefix)}),
                    "load")
