"""ZeRO data parallelism: the optimizer state (stage 1) and gradients (stage 2) partitioned.

Rajbhandari et al. 2019 (arXiv:1910.02054), Sec. 5: with N data-parallel devices, stage 1 keeps
1/N of the optimizer state on each device, updates that 1/N of the parameters and all-gathers
them; stage 2 also reduce-scatters the gradients, so each device only ever holds the gradient
share it updates. Stage 0 is plain data parallelism. All three give the same parameters.

How: the parameters are flattened into one vector of P numbers, padded to N * S, and the
optimizer (any optax transformation that acts element by element, such as Adam or RMSProp, and
that needs no parameters in `update`) runs on a vector of S numbers per device. In stages 1 and
2 its state leaves are stored with a leading device axis, `[N, *leaf]`, split over the mesh, so
every leaf (a moment vector `[S]`, a step count `[]`) is partitioned or repeated without special
cases; in stage 0 the state of the whole vector is replicated.
Global-norm clipping needs the norm of the whole gradient, so it is done here, not inside the
wrapped optimizer.

Use inside `jax.shard_map` over `axis` (see `agents.parallel.sharding.data_parallel`):

    zero = ZeroOptimizer(optax.adam(1e-3), params, num_devices=4, stage=2, max_grad_norm=40.0)
    opt_state = zero.init(params)  # single-device arrays; stages 1 and 2: leaves [N, *leaf]
    opt_state = put_global(opt_state, mesh, zero.state_spec)  # global arrays on the mesh
    # (a training state with a canonical `opt_state`: `zero.place_state(state, mesh)`)
    ...inside the mapped update, with this device's gradient `grads` of the mean loss:
    params, opt_state, grad_norm = zero.step(params, grads, opt_state)
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from jax.sharding import PartitionSpec as P

from agents.parallel.sharding import BATCH_AXIS, local_copy, put_global

STAGES = (0, 1, 2)


class ZeroOptimizer:
    """An optax optimizer run data-parallel with ZeRO stage 0, 1 or 2.

    Args:
      optimizer: element-wise optax transformation (no gradient clipping inside it).
      params: a parameter pytree (its shapes define the flat layout).
      num_devices: N, the devices of the mesh axis.
      stage: 0 (replicated state), 1 (partitioned state), 2 (also partitioned gradients).
      max_grad_norm: clip the whole gradient to this global norm (inf: no clipping).
      grad_reduction: "mean" when each device's gradient is of its shard's mean loss (the
        devices' gradients are averaged), "sum" when of its shard's summed loss (added).
      axis: the mesh axis name.
    """

    def __init__(self, optimizer: optax.GradientTransformation, params: Any, num_devices: int,
                 stage: int, max_grad_norm: float = float("inf"), grad_reduction: str = "mean",
                 axis: str = BATCH_AXIS):
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        if grad_reduction not in ("mean", "sum"):
            raise ValueError(f"grad_reduction must be 'mean' or 'sum', got {grad_reduction!r}")
        self.grad_reduction = grad_reduction
        if num_devices < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices}")
        flat, self._unravel = ravel_pytree(params)
        self.optimizer, self.stage, self.axis = optimizer, stage, axis
        self.num_devices, self.max_grad_norm = num_devices, max_grad_norm
        self.size = flat.size  # P
        # Stage 0 keeps one whole copy per device; stages 1 and 2 one shard of S each.
        self.shard = self.size if stage == 0 else -(-self.size // num_devices)  # S
        self.padded = self.shard * (1 if stage == 0 else num_devices)

    @property
    def state_spec(self) -> Any:
        """The partition spec of every optimizer-state leaf: replicated in stage 0, else split
        along the leading device axis."""
        return P(self.axis) if self.stage else P()

    def _flat(self, tree: Any) -> jax.Array:
        flat, _ = ravel_pytree(tree)
        return jnp.pad(flat, (0, self.padded - self.size))  # [padded]

    def init(self, params: Any) -> Any:
        """The optimizer state as single-device arrays (on the default device, not yet laid out
        on the mesh): in stage 0 the state of the whole vector, in stages 1 and 2 leaves
        `[N, *leaf]`, device i's part at row i. Lay it out with `zero.state_spec` (for example
        `put_global`) before passing it to the mapped update."""
        flat = self._flat(params)
        if self.stage == 0:
            return self.optimizer.init(flat)
        return jax.vmap(self.optimizer.init)(flat.reshape(-1, self.shard))  # over [N, S]

    def step(self, params: Any, grads: Any, opt_state: Any) -> tuple[Any, Any, jax.Array]:
        """One update inside shard_map.

        Args:
          params: the full parameters (replicated).
          grads: this device's gradient of its own batch shard's loss (see grad_reduction).
          opt_state: this device's state (stages 1 and 2: its rows, leaves `[1, *leaf]`).

        Returns:
          (new full parameters, new state rows, global norm of the averaged gradient).
        """
        scale = 1.0 / self.num_devices if self.grad_reduction == "mean" else 1.0
        local = self._flat(grads)  # [padded]
        if self.stage == 2:
            # Each device receives only the sum of its own shard over all devices.
            g = jax.lax.psum_scatter(local, self.axis, scatter_dimension=0, tiled=True) * scale
            norm = jnp.sqrt(jax.lax.psum(jnp.sum(jnp.square(g)), self.axis))  # [S] -> []
        else:
            full = jax.lax.psum(local, self.axis) * scale  # [padded]
            norm = jnp.sqrt(jnp.sum(jnp.square(full)))
            g = full if self.stage == 0 else jax.lax.dynamic_slice_in_dim(
                full, jax.lax.axis_index(self.axis) * self.shard, self.shard)
        g = g * jnp.minimum(1.0, self.max_grad_norm / jnp.maximum(norm, 1e-12))
        state = jax.tree.map(lambda x: x[0], opt_state) if self.stage else opt_state
        flat_params = self._flat(params)
        mine = flat_params if self.stage == 0 else jax.lax.dynamic_slice_in_dim(
            flat_params, jax.lax.axis_index(self.axis) * self.shard, self.shard)
        updates, state = self.optimizer.update(g, state)
        mine = mine + updates  # [S]
        if self.stage:
            # An all-gather written as a sum of zero-padded shards: shard_map can then prove the
            # parameters are the same on every device (its `all_gather` result is typed as
            # per-device), at the price of an all-reduce instead of an all-gather.
            placed = jax.lax.dynamic_update_slice_in_dim(
                jnp.zeros(self.padded, mine.dtype), mine,
                jax.lax.axis_index(self.axis) * self.shard, 0)
            mine = jax.lax.psum(placed, self.axis)  # [padded]
        new_params = self._unravel(mine[:self.size])
        if self.stage:
            state = jax.tree.map(lambda x: x[None], state)
        return new_params, state, norm

    def to_canonical(self, opt_state: Any) -> Any:
        """Host arrays independent of stage and N: vector leaves `[P]`, others device 0's."""
        def merge(leaf):
            leaf = np.asarray(leaf)
            if self.stage == 0:
                return leaf[:self.size] if leaf.shape == (self.shard,) else leaf
            if leaf.ndim == 2 and leaf.shape[1] == self.shard:  # a per-parameter vector
                return leaf.reshape(-1)[:self.size]
            return leaf[0]
        return jax.tree.map(merge, opt_state)

    def from_canonical(self, canonical: Any) -> Any:
        """The inverse of `to_canonical` for this optimizer's stage and N."""
        template = jax.eval_shape(self.init, self._unravel(jnp.zeros(self.size)))

        def split(leaf, like):
            leaf = np.asarray(leaf)
            vector = like.shape[-1:] == (self.shard,) and like.ndim == (2 if self.stage else 1)
            if vector:
                padded = np.pad(leaf, (0, self.padded - self.size))
                return padded.reshape(like.shape)
            return np.broadcast_to(leaf, like.shape).copy()
        return jax.tree.map(split, canonical, template)

    def state_specs(self, state_cls: type) -> Any:
        """Partition specs for a training-state NamedTuple: its `opt_state` field as this
        optimizer keeps it, every other field replicated."""
        return state_cls(**{f: self.state_spec if f == "opt_state" else P()
                            for f in state_cls._fields})

    def place_state(self, state: Any, mesh: jax.sharding.Mesh) -> Any:
        """Moves a training state with a canonical `opt_state` onto the mesh, partitioned."""
        specs = self.state_specs(type(state))
        state = state._replace(opt_state=self.from_canonical(state.opt_state))
        return jax.tree.map(lambda spec, part: put_global(part, mesh, spec),
                            specs, state, is_leaf=lambda x: isinstance(x, P))

    def host_state(self, state: Any) -> Any:
        """A host copy of a placed training state, with its `opt_state` in canonical form."""
        state = jax.device_get(local_copy(state) if self.stage == 0 else state)
        return state._replace(opt_state=self.to_canonical(state.opt_state))


def canonical_opt_state(optimizer: optax.GradientTransformation, params: Any) -> Any:
    """A fresh optimizer state in `ZeroOptimizer`'s canonical form (of the flat parameters)."""
    flat, _ = ravel_pytree(params)
    return jax.device_get(optimizer.init(flat))
