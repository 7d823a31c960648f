"""A run's counters (env steps, episodes) over every process of a jax.distributed job.

Each process's actors count only their own steps, but the run's count, the one logged,
checkpointed and resumed from, is the sum over processes. Every process restores the same
total from the checkpoint; from then on each sends the steps its own actors took since its
start with the stop flag the learners already exchange before every update (`make_sync`), and
adds the others' part to what it reads (`RunStats.set_others`). So the count is exact as of the
last update all processes joined; only steps another process takes after it (its actors'
last few as the run stops) are missing.

The budget is split when a run starts: each process takes its share of what is left of
`total_env_steps` (`process_share`), so a run resumed with another number of processes still
stops at `total_env_steps` in all.
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from agents.parallel import sharding

# Counts travel as int32 (JAX's default integers) in two parts, count = high * _SPLIT + low, so
# a sum over up to 2**7 processes stays exact beyond 2**31 steps.
_SPLIT = 1 << 24


def process_share(total_env_steps: int, done: int, num_processes: int, process_id: int) -> int:
    """This process's env steps for this start: its part of the `total_env_steps - done` left
    (nothing when none is), the first `left % num_processes` processes one step more, so the
    shares add up to what is left."""
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, num_processes={num_processes}), "
                         f"got {process_id}")
    base, extra = divmod(max(total_env_steps - done, 0), num_processes)
    return base + int(process_id < extra)


def encode(counts: list[int]) -> np.ndarray:
    """`[2 * len(counts)]` int32: each count's high and low part, summable across processes."""
    if any(c < 0 or c >= _SPLIT << 31 for c in counts):
        raise ValueError(f"counts must be in [0, 2**55), got {counts}")
    return np.array([part for c in counts for part in divmod(int(c), _SPLIT)], np.int32)


def decode(parts: np.ndarray) -> list[int]:
    """The counts whose `encode`d parts were summed into `parts`."""
    parts = np.asarray(parts, np.int64).reshape(-1, 2)
    return [int(high) * _SPLIT + int(low) for high, low in parts]


def make_sync(mesh: Mesh) -> Callable[[bool, list[int]], tuple[bool, list[int]]]:
    """`sync(stop, counts) -> (stop anywhere, counts summed over processes)`: one collective that
    every process of `mesh` must call the same number of times (the learners do, once before
    every update)."""
    reduce = jax.jit(lambda x: jnp.concatenate([jnp.max(x[:, :1], axis=0),
                                                jnp.sum(x[:, 1:], axis=0)]),
                     out_shardings=NamedSharding(mesh, P()))
    local_devices = len(mesh.local_devices)

    def sync(stop: bool, counts: list[int]) -> tuple[bool, list[int]]:
        rows = np.zeros((local_devices, 1 + 2 * len(counts)), np.int32)
        rows[:, 0] = int(stop)
        rows[0, 1:] = encode(counts)  # one row a process: its counts are added once
        out = np.asarray(sharding.local_copy(reduce(sharding.put_batch(rows, mesh))))
        return bool(out[0]), decode(out[1:])

    return sync
