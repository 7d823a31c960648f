"""Versioned parameters handed from the learner to the actors."""

import threading
from typing import Any

import jax
import jax.numpy as jnp


class ParamServer:
    """Holds the latest published parameters and their version.

    `publish` runs in the learner's thread and places the parameters on the actors' device
    there, once per publish, so actor threads never issue transfers that could queue behind the
    learner's device work; actors only read a reference.

    Args:
      device: the device actors run their policy on (None: where the parameters already are).
    """

    def __init__(self, device: jax.Device | None = None):
        self._device = device
        self._lock = threading.Lock()
        self._params: Any = None
        self._version = 0

    def publish(self, params: Any) -> int:
        """Makes `params` the latest; returns the new version (1 for the first publish)."""
        # Always a fresh copy: the learner donates its own buffers to its next update, and a
        # transfer to a device that already holds a shard of them may alias that shard.
        params = jax.tree.map(jnp.copy, jax.device_put(params, self._device))
        with self._lock:
            self._params = params
            self._version += 1
            return self._version

    def latest(self) -> tuple[int, Any]:
        """(version, params); version 0 and None before the first publish."""
        with self._lock:
            return self._version, self._params
