"""The Ape-X replay: one prioritized replay, or one shard of it, with its rate limiter.

Horgan et al. 2018 (arXiv:1803.00933), Sec. 3: actors add n-step transitions with initial
priorities, the learner samples by priority (Schaul et al. 2016) and writes new ones back. On
Ray every shard lives in a process of its own, so this module imports neither JAX nor envpool:
a shard process starts without loading them (`tests/agents/apex/test_ray_backend.py` checks).
"""

import socket

import numpy as np

from agents.apex.config import ApexConfig
from agents.run import host_memory
from agents.run.envs import EnvInfo
from agents.run.seeds import run_seeds
from replay.frames import FrameStackStorage
from replay.prioritized import PrioritizedReplay, Sample
from replay.rate_limiter import MinSize, SampleToInsertRatio


def make_rate_limiter(config: ApexConfig) -> MinSize:
    """The rate limiter of the replay (or of each of its shards, with one shard's share of the
    warm-up): the warm-up alone, or a samples-per-insert ratio."""
    min_size = -(-config.min_replay_size // config.replay_shards)
    if config.samples_per_insert <= 0:
        return MinSize(min_size)
    return SampleToInsertRatio(
        config.samples_per_insert, min_size,
        tolerance=max(config.batch_size, config.samples_per_insert * config.local_buffer_size))


def make_replay(config: ApexConfig, info: EnvInfo, shard: int = 0) -> PrioritizedReplay:
    """The replay (or shard `shard` of `config.replay_shards`, holding its share of the
    capacity) with its rate limiter; Atari frame stacks are stored one frame at a time.

    Raises:
      ValueError: naming replay_capacity, if the replay once full would not fit in the memory
        this process can still take (`check_fits_in_memory`).
    """
    available = host_memory.available_bytes()  # before the replay maps anything
    replay = _build_replay(config, info, shard)
    check_fits_in_memory(replay.nbytes, available, config)
    return replay


def check_fits_in_memory(shard_nbytes: int, available: int | None, config: ApexConfig,
                         shards_here: int = 1) -> None:
    """Raises a ValueError naming replay_capacity if `shards_here` replay shards (the whole
    replay if the run has one) of `shard_nbytes` each once full need more than the `available`
    bytes of their host (None: unknown, nothing checked).

    The replay's arrays are mapped lazily and fill over hours, so a replay too large for the
    host is otherwise found by the kernel's OOM killer once it fills, and again after every
    `--resume` (which loads it whole). Only the replay is counted, not the rest of the run.
    """
    if available is None or shard_nbytes * shards_here <= available:
        return
    per_transition = shard_nbytes / -(-config.replay_capacity // config.replay_shards)
    # The sum tree pads its leaves to a power of two (32-64 bytes a transition): 64 bytes more
    # a transition keeps the capacity offered below the limit at any size.
    fits = (int(available / shards_here / (per_transition + 64)) * config.replay_shards
            // 1000 * 1000)
    if config.replay_shards == 1:
        what, where = "the replay takes", "this process"
    elif shards_here == 1:
        what, where = "each replay shard takes", "its process"
    else:
        what, where = f"{shards_here} replay shards on one host take", "that host"
    raise ValueError(
        f"replay_capacity={config.replay_capacity} does not fit in memory: {what} "
        f"{_size(shard_nbytes * shards_here)} once full ({per_transition:,.0f} bytes a "
        f"transition) and {where} can take {_size(available)} more (the host's available "
        f"memory, or its cgroup's limit); use replay_capacity <= {fits:,} or free memory")


def check_shards_fit(footprints: list[tuple[str, int, int | None]], config: ApexConfig) -> None:
    """`check_fits_in_memory` for every host of the shards' `ReplayShard.footprint`s: shards
    that share a host share its memory, though each alone would fit."""
    hosts: dict[str, list[tuple[int, int | None]]] = {}
    for host, nbytes, available in footprints:
        hosts.setdefault(host, []).append((nbytes, available))
    for shards in hosts.values():
        known = [available for _, available in shards if available is not None]
        check_fits_in_memory(max(nbytes for nbytes, _ in shards), min(known, default=None),
                             config, shards_here=len(shards))


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _build_replay(config: ApexConfig, info: EnvInfo, shard: int) -> PrioritizedReplay:
    try:
        return _allocate_replay(config, info, shard)
    except MemoryError as e:  # an array larger than the host could ever map (a mistyped size)
        raise ValueError(f"replay_capacity={config.replay_capacity} does not fit in memory: "
                         f"{e}; use a smaller replay_capacity") from None


def _allocate_replay(config: ApexConfig, info: EnvInfo, shard: int) -> PrioritizedReplay:
    capacity = -(-config.replay_capacity // config.replay_shards)
    obs = (info.obs_shape, info.obs_dtype)
    spec = dict(obs=obs, action=((), np.int32), reward=((), np.float32),
                discount=((), np.float32), next_obs=obs)
    kwargs = dict(alpha=config.priority_exponent, beta=config.importance_exponent,
                  seed=run_seeds(config).sampler(shard), rate_limiter=make_rate_limiter(config))
    if info.is_atari:
        storage = FrameStackStorage(spec, capacity, stack_axis=0)
        return PrioritizedReplay(capacity, storage=storage, **kwargs)
    return PrioritizedReplay(capacity, spec, **kwargs)


class ReplayShard:
    """A Ray actor holding shard `index` of the run's replay (see `make_replay`)."""

    def __init__(self, config: ApexConfig, info: EnvInfo, index: int):
        # Not checked here: the driver checks the shards of each host together.
        self._available = host_memory.available_bytes()  # before the replay maps anything
        self.replay = _build_replay(config, info, index)

    def footprint(self) -> tuple[str, int, int | None]:
        """(this shard's host, the bytes it takes once full, the bytes its process could
        still take when it started), for `check_shards_fit`."""
        return socket.gethostname(), self.replay.nbytes, self._available

    def add(self, transitions: dict[str, np.ndarray], priorities: np.ndarray,
            streams: np.ndarray) -> bool:
        """Adds a batch once the replay's rate limiter allows it; False if released meanwhile."""
        return self.replay.add(transitions, priorities, streams) is not None

    def sample(self, batch_size: int) -> Sample | None:
        """A batch once the replay's rate limiter allows it; None if released meanwhile."""
        return self.replay.sample(batch_size)

    def priority_mass(self) -> tuple[float, float]:
        return self.replay.priority_mass()

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> int:
        return self.replay.update_priorities(ids, priorities)

    def stats(self) -> dict[str, int]:
        return self.replay.stats()

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.replay.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.replay.load_state_dict(state)

    def release(self) -> None:
        """Wakes every waiting add and sample: the run is stopping."""
        self.replay.close()
