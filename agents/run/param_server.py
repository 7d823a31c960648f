"""Versioned parameters handed from the learner to the actors' devices."""

import functools
import threading
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from agents.parallel.sharding import local_copy

# One dispatch for the whole tree (a copy per leaf costs a dispatch each, in the learner's
# thread, at every publish). With several processes each copies leaf by leaf: a jitted
# program launched by one process alone breaks the processes' shared run.
_copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))


class ParamServer:
    """Holds the latest published parameters, one copy per actor device, and their version.

    `publish` runs in the learner's thread and places the parameters on every actor device
    there, once per publish, so actor threads never issue transfers that could queue behind the
    learner's device work; actors only read a reference.

    Args:
      devices: the devices actors run their policies on (None: where the parameters already
        are).
    """

    def __init__(self, devices: Sequence[jax.Device] | None = None):
        self._devices = list(devices) if devices else [None]
        self._lock = threading.Lock()
        self._copies: list[Any] = [None] * len(self._devices)
        self._version = 0

    def publish(self, params: Any) -> int:
        """Makes `params` the latest; returns the new version (1 for the first publish)."""
        # Always fresh copies: the learner donates its own buffers to its next update, and a
        # transfer to a device that already holds a shard of them may alias that shard.
        params = local_copy(params)  # this process's replica when the learner spans processes
        copy = _copy if jax.process_count() == 1 else functools.partial(jax.tree.map, jnp.copy)
        copies = [copy(jax.device_put(params, d)) for d in self._devices]
        with self._lock:
            self._copies = copies
            self._version += 1
            return self._version

    def latest(self, device_index: int = 0) -> tuple[int, Any]:
        """(version, params on actor device `device_index`); version 0, None before a publish."""
        with self._lock:
            return self._version, self._copies[device_index % len(self._copies)]
