"""Transition storage behind `PrioritizedReplay`: where the bytes of each slot live.

The replay owns priorities, slots and locking; a storage owns the transition data. Two kinds
share one protocol: `ArrayStorage` (a preallocated array per field, any transition) and
`FrameStackStorage` (Atari frame stacks stored one frame at a time, in `replay/frames.py`).

Locking contract (the replay enforces it): `prepare` (validation and any per-batch work that
touches no shared state) and `gather` (the bulk copy of sampled bytes) run outside the replay's
lock, so neither blocks the other threads; `write_prepared`, `locate`, `intact` and `state_dict`
run under it. A `gather` may race with a later `write`; the replay then asks `intact` (and checks slot
generations) under the lock and samples again for anything that was overwritten.
"""

from typing import Any, Protocol

import numpy as np

from replay.spec import TransitionSpec, check_batch, flatten_spec


class Storage(Protocol):
    """What `PrioritizedReplay` needs from a transition store of `capacity` slots."""

    capacity: int
    nbytes: int  # of its arrays once every slot is written (they may be mapped lazily)

    def prepare(self, transitions: dict[str, np.ndarray], streams: np.ndarray | None) -> Any:
        """Validates a batch (fields `[B, ...]`, streams `[B]` or None); raises ValueError."""

    def write_prepared(self, slots: np.ndarray, prepared: Any) -> np.ndarray:
        """Stores a prepared batch at `slots` `[B]`; returns slots `[K]` whose data this write
        destroyed besides `slots` themselves (to be evicted)."""

    def locate(self, slots: np.ndarray) -> Any:
        """A small handle that `gather` can read `slots` `[B]` from without the lock."""

    def gather(self, handle: Any) -> dict[str, np.ndarray]:
        """The transitions of a handle, fields `[B, ...]`, as freshly allocated arrays."""

    def intact(self, handle: Any) -> np.ndarray:
        """bool `[B]`: whether the bytes `gather` read for the handle were not overwritten."""

    def state_dict(self, filled: int | None = None) -> dict[str, np.ndarray]:
        """Plain arrays of the contents: of slots `[0, filled)` only when given (the slots
        ever written; what a checkpoint needs), else of every slot."""

    def check_state_dict(self, state: dict[str, np.ndarray], slots: int | None = None) -> None:
        """Raises the ValueError `load_state_dict(state, slots)` would raise; changes nothing.
        `slots`: how many slots the state holds (None: all of them)."""

    def load_state_dict(self, state: dict[str, np.ndarray], slots: int | None = None) -> None:
        """Restores a `state_dict(filled=slots)`; slots past it are emptied."""


class ArrayStorage:
    """One preallocated NumPy array `[capacity, ...]` per field of a `TransitionSpec`."""

    def __init__(self, spec: TransitionSpec, capacity: int):
        self.spec = flatten_spec(spec)
        self.capacity = capacity
        self.data = {name: np.zeros((capacity,) + shape, dtype)
                     for name, (shape, dtype) in self.spec.items()}

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in self.data.values())

    def prepare(self, transitions, streams=None):
        batch = len(next(iter(transitions.values()))) if transitions else 0
        check_batch(self.spec, transitions, batch)
        return transitions

    def write_prepared(self, slots, prepared):
        if len(slots) != len(next(iter(prepared.values()))):
            raise ValueError(f"slots has {len(slots)} entries for a batch of "
                             f"{len(next(iter(prepared.values())))}")
        for name, array in self.data.items():
            array[slots] = prepared[name]
        return np.empty((0,), np.int64)

    def write(self, slots, transitions, streams=None):
        """`write_prepared(slots, prepare(transitions, streams))`."""
        return self.write_prepared(slots, self.prepare(transitions, streams))

    def locate(self, slots):
        return slots

    def gather(self, handle):
        return {name: array[handle] for name, array in self.data.items()}

    def intact(self, handle):
        # A slot is only rewritten by `write`, which also bumps the replay's generation counter,
        # so the replay's generation check already covers this storage.
        return np.ones(len(handle), bool)

    def state_dict(self, filled=None):
        rows = slice(None) if filled is None else slice(0, filled)
        return {f"data/{name}": array[rows] for name, array in self.data.items()}

    def check_state_dict(self, state, slots=None):
        slots = self.capacity if slots is None else slots
        for name, array in self.data.items():
            if f"data/{name}" not in state:
                raise ValueError(f"checkpoint has no field {name!r}")
            saved = state[f"data/{name}"]
            expected = (slots,) + array.shape[1:]
            if saved.shape != expected or saved.dtype != array.dtype:
                raise ValueError(
                    f"checkpoint field {name!r} has shape {saved.shape} and dtype {saved.dtype}; "
                    f"this replay expects {expected} {array.dtype}")

    def load_state_dict(self, state, slots=None):
        self.check_state_dict(state, slots)  # every field first: a bad one changes nothing
        slots = self.capacity if slots is None else slots
        for name, array in self.data.items():
            array[:slots] = state[f"data/{name}"]
            array[slots:] = 0
