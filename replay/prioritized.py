"""A thread-safe prioritized replay shared by many actors and one learner.

Prioritized experience replay (Schaul et al. 2016, arXiv:1511.05952) as Ape-X uses it (Horgan et
al. 2018, arXiv:1803.00933): actors add transitions with initial priorities they computed, the
learner samples i with P(i) = p_i^alpha / sum_k p_k^alpha (eq. 1), corrects with importance
weights w_i = (N * P(i))^-beta / max_j w_j (Sec. 3.4), and writes new priorities back. Eviction
is FIFO over `capacity` slots.

Every transition gets an id, its insertion count; its slot is `id % capacity`. The learner hands
the ids back with the new priorities, so a priority computed for a transition that has since been
overwritten is recognised (the slot now holds a newer id) and dropped, never landing on new data.

Rate limiting: a replay built with a `rate_limiter` (`replay.rate_limiter`) owns the handshake
between its writers and its reader, as a Reverb table does: `add` waits until inserting is
allowed and `sample` until sampling is (the learner's warm-up, or a samples-per-insert ratio),
and `close()` releases both for good; closed, they return None.

Concurrency: one lock guards the sum tree, ids and counters. Critical sections are short and
batched; the copy of the sampled transitions' bytes happens outside the lock, and is validated
afterwards (slot ids unchanged and, for frame storage, frames not overwritten), redrawing the rare
rows that raced with an add.
"""

import json
import os
import threading
import zipfile
from typing import Any, NamedTuple

import numpy as np

from replay.rate_limiter import MinSize
from replay.spec import TransitionSpec
from replay.storage import ArrayStorage, Storage
from replay.sum_tree import SumTree

_MAX_REDRAWS = 100  # a redraw only happens when a sampled row raced with an add


class Sample(NamedTuple):
    """A sampled batch.

    Attributes:
      ids: int64 `[B]` transition ids, to pass back to `update_priorities`.
      transitions: dict of fields `[B, ...]`.
      weights: float32 `[B]` importance weights, max-normalized over the whole buffer.
      probabilities: float64 `[B]` the sampling probabilities P(i).
      priorities: float64 `[B]` the scaled priorities p_i^alpha the draw used (with
        `priority_mass`, what a sampler over several replays needs to weight the batch).
    """

    ids: np.ndarray
    transitions: dict[str, np.ndarray]
    weights: np.ndarray
    probabilities: np.ndarray
    priorities: np.ndarray


def _check_priorities(priorities: Any, batch_size: int) -> np.ndarray:
    priorities = np.asarray(priorities, np.float64)
    if priorities.shape != (batch_size,):
        raise ValueError(f"priorities must have shape ({batch_size},), got {priorities.shape}")
    if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
        raise ValueError("priorities must be finite and >= 0, got values like "
                         f"{priorities[~(np.isfinite(priorities) & (priorities >= 0))][:3]}")
    return priorities


class PrioritizedReplay:
    """Prioritized replay over `capacity` transitions with FIFO eviction.

    Args:
      capacity: number of transitions held.
      spec: `{field: (shape, dtype)}` for plain storage; or pass `storage` instead (for example a
        `FrameStackStorage` for Atari frame stacks).
      storage: a `Storage` with `storage.capacity == capacity`.
      alpha: priority exponent (Ape-X: 0.6); 0 samples uniformly.
      beta: importance-weight exponent (Ape-X: 0.4); settable while running, for annealing.
      priority_epsilon: added to every priority so a transition with zero TD error can still be
        sampled (Schaul et al. 2016, Sec. 3.3: p_i = |delta_i| + epsilon).
      seed: seed of the sampling generator (anything `np.random.default_rng` takes).
      rate_limiter: a `replay.rate_limiter` limiter that `add` and `sample` wait on (None:
        neither ever waits).
    """

    def __init__(self, capacity: int, spec: TransitionSpec | None = None, *,
                 storage: Storage | None = None, alpha: float = 0.6, beta: float = 0.4,
                 priority_epsilon: float = 1e-6, seed: Any = 0,
                 rate_limiter: MinSize | None = None):
        if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if (spec is None) == (storage is None):
            raise ValueError("pass exactly one of spec (plain storage) or storage")
        if storage is not None and storage.capacity != capacity:
            raise ValueError(f"storage.capacity={storage.capacity} differs from "
                             f"capacity={capacity}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if not priority_epsilon >= 0.0:
            raise ValueError(f"priority_epsilon must be >= 0, got {priority_epsilon}")
        self.capacity = int(capacity)
        self.alpha = float(alpha)
        self.beta = beta
        self.priority_epsilon = float(priority_epsilon)
        self.storage = storage if storage is not None else ArrayStorage(spec, self.capacity)
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(seed)
        self._tree = SumTree(self.capacity)
        self._ids = np.full(self.capacity, -1, np.int64)  # id held by each slot; -1: empty
        self._next_id = 0
        self._size = 0
        self._counters = dict(added=0, evicted=0, sampled=0, updates_applied=0,
                              updates_stale=0, redrawn=0)
        self.rate_limiter = rate_limiter

    def close(self) -> None:
        """Releases every `add` and `sample` waiting on the rate limiter, and all later ones:
        the run is stopping. Reading, updating priorities and saving still work."""
        if self.rate_limiter is not None:
            self.rate_limiter.close()

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {value}")
        self._beta = float(value)

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes the replay takes once full: storage, sum tree and slot ids. NumPy maps
        zero-filled arrays lazily, so resident memory grows toward this as the replay fills."""
        return self.storage.nbytes + self._tree.nbytes + self._ids.nbytes

    def stats(self) -> dict[str, int]:
        """Counters: size, added, evicted, sampled, updates applied and dropped as stale."""
        with self._lock:
            return dict(size=self._size, **self._counters)

    def priority_mass(self) -> tuple[float, float]:
        """(sum, min) of the scaled priorities p_i^alpha held; (0, inf) when empty."""
        with self._lock:
            return self._tree.total, (self._tree.min if self._size else float("inf"))

    def _scaled(self, priorities: np.ndarray) -> np.ndarray:
        return (priorities + self.priority_epsilon) ** self.alpha

    def add(self, transitions: dict[str, np.ndarray], priorities: Any,
            streams: np.ndarray | None = None) -> np.ndarray | None:
        """Adds a batch of transitions with their initial priorities, once the rate limiter
        allows it.

        Args:
          transitions: dict of fields `[B, ...]` matching the spec.
          priorities: `[B]` non-negative priorities, e.g. |n-step TD error| from the actor.
          streams: int `[B]` the env stream of each transition (needed by frame storage).

        Returns:
          int64 `[B]` ids of the transitions written; None if the replay was closed while
          waiting (nothing written).
        """
        if np.ndim(priorities) != 1:
            raise ValueError(f"priorities must be one-dimensional [B], got shape "
                             f"{np.shape(priorities)}")
        batch_size = len(priorities)
        scaled = self._scaled(_check_priorities(priorities, batch_size))
        # Checked here, not in the tree: everything is validated before anything is written.
        self._tree.check_priorities(scaled)
        if batch_size > self.capacity:
            raise ValueError(f"a batch of {batch_size} transitions exceeds capacity "
                             f"{self.capacity}")
        prepared = self.storage.prepare(transitions, streams)  # validation, hashing: no lock
        if len(next(iter(transitions.values()))) != batch_size:
            raise ValueError(f"transitions hold {len(next(iter(transitions.values())))} "
                             f"entries but priorities {batch_size}")
        if self.rate_limiter is not None and not self.rate_limiter.await_insert(batch_size):
            return None
        with self._lock:
            ids = self._next_id + np.arange(batch_size, dtype=np.int64)
            slots = ids % self.capacity
            victims = self.storage.write_prepared(slots, prepared)
            overwritten = int(np.count_nonzero(self._ids[slots] >= 0))
            self._ids[slots] = ids
            self._tree.set(slots, scaled)
            victims = victims[self._ids[victims] >= 0]
            self._ids[victims] = -1
            self._tree.set(victims, np.zeros(len(victims)))
            self._next_id += batch_size
            self._size += batch_size - overwritten - len(victims)
            self._counters["added"] += batch_size
            self._counters["evicted"] += overwritten + len(victims)
        if self.rate_limiter is not None:
            self.rate_limiter.inserted(batch_size)
        return ids

    def _draw(self, batch_size: int) -> tuple[np.ndarray, ...]:
        """Under the lock: stratified slots' ids, scaled priorities, probabilities, importance
        weights, and a storage handle."""
        total = self._tree.total
        if total <= 0.0:
            raise ValueError("cannot sample from an empty replay; add transitions first")
        slots = self._tree.sample(batch_size, self._rng)
        priorities = self._tree.get(slots)
        # The largest weight any transition can get belongs to the least likely one.
        weights = (priorities / self._tree.min) ** -self._beta
        return (self._ids[slots], priorities, priorities / total, weights,
                self.storage.locate(slots))

    def sample(self, batch_size: int) -> Sample | None:
        """Samples `batch_size` transitions with P(i) proportional to p_i^alpha, once the rate
        limiter allows it; None if the replay was closed while waiting.

        Stratified: one draw in each of `batch_size` equal segments of the priority mass.
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if self.rate_limiter is not None and not self.rate_limiter.await_sample(batch_size):
            return None
        with self._lock:
            ids, priorities, probabilities, weights, handle = self._draw(batch_size)
        transitions = self.storage.gather(handle)
        rows = np.arange(batch_size)  # the rows `handle` points at
        for _ in range(_MAX_REDRAWS):
            with self._lock:
                overwritten = self._ids[ids[rows] % self.capacity] != ids[rows]
                raced = overwritten | ~self.storage.intact(handle)
                if not raced.any():
                    self._counters["sampled"] += batch_size
                    break
                rows = rows[raced]
                self._counters["redrawn"] += len(rows)
                (ids[rows], priorities[rows], probabilities[rows], weights[rows],
                 handle) = self._draw(len(rows))
            redrawn = self.storage.gather(handle)
            for name, array in transitions.items():
                array[rows] = redrawn[name]
        else:
            raise RuntimeError(f"sampling raced with adds {_MAX_REDRAWS} times in a row; the "
                               "replay is far too small for its add rate")
        if self.rate_limiter is not None:
            self.rate_limiter.sampled(batch_size)
        return Sample(ids, transitions, weights.astype(np.float32), probabilities, priorities)

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets new priorities for sampled transitions; ids overwritten since are ignored.

        Args:
          ids: int64 `[B]` ids from `Sample.ids`.
          priorities: `[B]` non-negative new priorities (e.g. |TD error|).

        Returns:
          How many priorities were applied (the rest were stale).
        """
        ids = np.asarray(ids)
        if ids.ndim != 1:
            raise ValueError(f"ids must be one-dimensional, got shape {ids.shape}")
        if ids.size and ids.dtype.kind not in "iu":
            raise ValueError(f"ids must be integers (from Sample.ids), got dtype {ids.dtype}")
        ids = ids.astype(np.int64, copy=False)
        # The sum tree checks `scaled` before it writes; nothing else changes before it does.
        scaled = self._scaled(_check_priorities(priorities, len(ids)))
        with self._lock:
            if np.any((ids < 0) | (ids >= self._next_id)):
                raise ValueError("ids must come from this replay's add or sample")
            slots = ids % self.capacity
            fresh = self._ids[slots] == ids
            self._tree.set(slots[fresh], scaled[fresh])
            applied = int(np.count_nonzero(fresh))
            self._counters["updates_applied"] += applied
            self._counters["updates_stale"] += len(ids) - applied
        return applied

    def _filled(self) -> int:
        """Slots ever written: id i goes to slot i % capacity, ids in order, so `[0, filled)`."""
        return min(self._next_id, self.capacity)

    def _live_state(self) -> dict[str, np.ndarray]:
        """The state as views of the live arrays; the caller holds the lock.

        Only the slots ever written are in it (`_filled`), and of the frame ring only the rows
        written: the arrays are preallocated for the whole capacity, and a replay that is still
        filling (any run's first hours) would otherwise be saved at its full size.
        """
        filled = self._filled()
        tree = self._tree.state_dict()
        state = {"tree/capacity": tree["capacity"], "tree/priorities": tree["priorities"][:filled]}
        state.update({f"storage/{k}": v for k, v in self.storage.state_dict(filled).items()})
        state.update({
            "ids": self._ids[:filled], "next_id": np.int64(self._next_id),
            "size": np.int64(self._size),
            "alpha": np.float64(self.alpha), "beta": np.float64(self._beta),
            "rng": np.array(json.dumps(self._rng.bit_generator.state)),
            **{f"counters/{k}": np.int64(v) for k, v in self._counters.items()}})
        return state

    def _saved_slots(self, state: dict[str, np.ndarray]) -> int:
        """How many slots `state` holds; a ValueError unless it is every slot written by its
        `next_id` and at most the capacity."""
        ids, next_id = np.asarray(state["ids"]), np.asarray(state["next_id"])
        if next_id.shape != () or next_id.dtype.kind not in "iu" or int(next_id) < 0:
            raise ValueError(f"checkpoint next_id must be an integer >= 0, got {next_id!r}")
        written = min(int(next_id), self.capacity)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or not written <= len(ids) <= self.capacity:
            raise ValueError(f"checkpoint holds {ids.shape} slot ids; this replay has capacity "
                             f"{self.capacity} and the checkpoint wrote {written} slots "
                             f"(next_id {int(next_id)})")
        return len(ids)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The replay's contents as plain NumPy arrays, no pickled objects: the slots written
        so far (and their frames), not the empty rest of the capacity."""
        with self._lock:
            return {k: np.array(v, copy=True) for k, v in self._live_state().items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restores a `state_dict()` into this replay (same capacity, alpha and storage).

        The state holds the slots written, `[0, min(next_id, capacity))` (one saved whole, by
        an earlier version, holds all of them); the slots past them are emptied. Everything is
        checked before anything is replaced: a state that raises leaves the replay as it was.
        """
        required = ({"alpha", "beta", "ids", "next_id", "size", "rng"}
                    | {f"counters/{k}" for k in self._counters})
        missing = sorted(required - set(state))
        if missing:
            raise ValueError(f"replay state is missing {missing}; it was not written by "
                             "PrioritizedReplay.state_dict")
        if float(state["alpha"]) != self.alpha:
            raise ValueError(f"checkpoint alpha={float(state['alpha'])} differs from this "
                             f"replay's alpha={self.alpha}; priorities would be inconsistent")
        slots = self._saved_slots(state)
        tree_state = {k[len("tree/"):]: v for k, v in state.items() if k.startswith("tree/")}
        capacity = np.asarray(tree_state.get("capacity"))
        if capacity.shape != () or capacity.dtype.kind not in "iu" \
                or int(capacity) != self.capacity:
            raise ValueError(f"checkpoint sum tree has capacity {capacity}; this replay "
                             f"has {self.capacity}")
        priorities = np.asarray(tree_state.get("priorities"))
        if priorities.shape != (slots,):
            raise ValueError(f"checkpoint holds {priorities.shape} priorities for {slots} slots")
        tree = SumTree.from_state_dict(dict(capacity=capacity, priorities=np.concatenate(
            [priorities, np.zeros(self.capacity - slots, priorities.dtype)])))
        storage_state = {k[len("storage/"):]: v for k, v in state.items()
                         if k.startswith("storage/")}
        self.storage.check_state_dict(storage_state, slots)
        try:
            rng_state = json.loads(str(state["rng"]))
            np.random.default_rng().bit_generator.state = rng_state  # validates it
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"replay state holds an invalid sampler state: {e}") from None
        beta = float(state["beta"])
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"checkpoint beta must be in [0, 1], got {beta}")
        with self._lock:
            self._tree = tree
            self.storage.load_state_dict(storage_state, slots)
            self._ids = np.full(self.capacity, -1, np.int64)
            self._ids[:slots] = state["ids"]
            self._next_id, self._size = int(state["next_id"]), int(state["size"])
            self._beta = beta
            self._rng.bit_generator.state = rng_state
            self._counters = {k: int(state[f"counters/{k}"]) for k in self._counters}
        if self.rate_limiter is not None:  # a resumed run keeps its warm-up and ratio
            self.rate_limiter.restore(self._counters["added"], self._counters["sampled"])

    def save(self, path: str) -> None:
        """Writes the state to an `.npz` file atomically (temporary file, then rename).

        The live arrays are written under the lock rather than copied first: a copy of a full
        Atari replay would double its many gigabytes of memory. Adds and samples wait meanwhile.
        """
        tmp = f"{path}.tmp"
        # O_NOFOLLOW: a link planted under the temporary's name is refused, not written through.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with open(fd, "wb") as f, self._lock:
            np.savez(f, **self._live_state())
        os.replace(tmp, path)

    def load(self, path: str) -> None:
        """Restores from a file written by `save`; runs no code from the file."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if not hasattr(data, "files"):
                    raise ValueError("it holds a single array, not an .npz archive")
                state = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            # NumPy calls any file it cannot parse "pickled data"; say what it really is.
            raise ValueError(f"{path} is not a readable replay archive (.npz written by "
                             f"PrioritizedReplay.save): {type(e).__name__}: {e}") from None
        self.load_state_dict(state)
