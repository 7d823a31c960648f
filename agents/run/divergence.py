"""Divergence: a loss or parameters that are no longer finite end the run, never a checkpoint.

A learning rate too large for the problem (or a bad batch) makes the loss and then every
parameter NaN or inf within a few updates; training on from there only writes NaN checkpoints
over the good ones. So:

  - each learner's jitted update also returns `health(loss, params)`, `[2]` float32: the loss
    and the parameters' global norm (one reduction over the parameters the update wrote anyway);
  - the learner reads it where it syncs with the device anyway (Ape-X: with the priorities it
    writes back) or, where it does not (IMPALA), through a `DivergenceWatch`, which reads each
    update's health once the device has finished it, waiting only when many are pending;
  - the first non-finite one stops the run, and the driver reports it (`Diverged`);
  - every checkpoint save checks the state on the host (`nonfinite_leaves`) and refuses a
    non-finite one, so a save that comes between the update and its check writes nothing and
    prunes nothing.
"""

import collections
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents.parallel.sharding import local_copy


class Diverged(RuntimeError):
    """The training state went non-finite; the message says what, at which update, and which
    checkpoint is kept."""


def health(loss: jax.Array, params: Any) -> jax.Array:
    """Inside a jitted update: `[2]` float32 (loss, global norm of `params`). Both are finite
    exactly when the loss and every parameter are (a NaN or inf anywhere reaches the norm)."""
    return jnp.stack([jnp.asarray(loss, jnp.float32),
                      optax.global_norm(params).astype(jnp.float32)])


def describe(update: int, values: np.ndarray) -> str | None:
    """The message for an update's `health` values on the host; None if both are finite."""
    loss, norm = (float(v) for v in np.asarray(values).reshape(2))
    if np.isfinite(loss) and np.isfinite(norm):
        return None
    if not np.isfinite(loss) and not np.isfinite(norm):
        what = f"the loss is {loss} and the parameters' norm is {norm}"
    elif not np.isfinite(loss):
        what = f"the loss is {loss}"
    else:
        what = f"the parameters' norm is {norm}"
    return f"{what} at update {update:,}"


class DivergenceWatch:
    """Checks updates' `health` without a device sync per update.

    `add` keeps each update's device array and reads those the device has finished
    (`is_ready`), in order; only when more than `max_pending` are unread does it wait for the
    oldest (a learner far ahead of its device). `drain` waits for all of them.

    Args:
      max_pending: unread updates kept before `add` waits for the oldest.
    """

    def __init__(self, max_pending: int = 16):
        self.max_pending = max_pending
        self._pending: collections.deque = collections.deque()
        self.diverged: str | None = None

    def add(self, update: int, values: jax.Array) -> str | None:
        """Adds update `update`'s health; returns the first non-finite update's message once
        read (and from then on), else None."""
        self._pending.append((update, values))
        while self._pending and self.diverged is None and (
                len(self._pending) > self.max_pending or _ready(self._pending[0][1])):
            self._read()
        return self.diverged

    def drain(self) -> str | None:
        """Reads every pending update (waiting for the device); the first non-finite one's
        message, or None."""
        while self._pending and self.diverged is None:
            self._read()
        self._pending.clear()
        return self.diverged

    def _read(self) -> None:
        update, values = self._pending.popleft()
        # A learner spanning processes: this process's replica of the replicated values.
        self.diverged = describe(update, np.asarray(local_copy(values)))


def _ready(values: Any) -> bool:
    is_ready = getattr(values, "is_ready", None)
    return is_ready() if is_ready is not None else True


def nonfinite_leaves(tree: Any) -> list[str]:
    """Paths (`a/b/0`) of the float leaves of `tree` holding NaN or inf, sorted; [] if none.
    Integer leaves (counters) and non-array leaves are skipped."""
    found = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        array = np.asarray(leaf) if isinstance(leaf, (np.ndarray, np.generic, jax.Array)) \
            else None
        if array is not None and array.dtype.kind in "fc" and not np.isfinite(array).all():
            found.append("/".join(_key(k) for k in path))
    return sorted(found)


def _key(entry: Any) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)
