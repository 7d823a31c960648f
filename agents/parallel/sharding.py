"""Data parallelism over the learner devices: one mesh axis, batch split, gradients averaged."""

from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

BATCH_AXIS = "batch"


def learner_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh named `BATCH_AXIS` over `devices` (default: every local device)."""
    devices = list(jax.local_devices() if devices is None else devices)
    if not devices:
        raise ValueError("learner devices must not be empty")
    return Mesh(np.array(devices), (BATCH_AXIS,))


def check_divisible(batch_size: int, mesh: Mesh, name: str = "batch_size") -> None:
    """Raises a ValueError unless `batch_size` splits evenly over the mesh's devices."""
    count = mesh.devices.size
    if batch_size % count:
        raise ValueError(f"{name}={batch_size} does not split over {count} learner devices; "
                         f"use a multiple of {count}")


def data_parallel(fn: Callable, mesh: Mesh, *, state_spec: Any = P(), donate_state: bool = True,
                  per_example_output: bool = True) -> Callable:
    """jit(shard_map(fn)): `fn(state, batch)` sees its device's batch shard, full state.

    `fn` must reduce what it needs over `BATCH_AXIS` (`jax.lax.pmean` / `psum`) so that its first
    two outputs (new state, metrics) are the same on every device; a third output, if
    `per_example_output`, is per-example and stays split along the batch. `state_spec` (a
    pytree prefix of the state) places partitioned parts, such as ZeRO's optimizer state.
    """
    out_specs = (state_spec, P(), P(BATCH_AXIS)) if per_example_output else (state_spec, P())
    mapped = jax.shard_map(fn, mesh=mesh, in_specs=(state_spec, P(BATCH_AXIS)),
                           out_specs=out_specs)
    return jax.jit(mapped, donate_argnums=(0,) if donate_state else ())


def per_device(tree: Any) -> Any:
    """Inside `data_parallel`: treat replicated values (parameters) as each device's own.

    Differentiating with respect to a replicated input makes shard_map sum the gradient over
    the devices implicitly; marking the parameters per-device first gives each device the
    gradient of its own shard, which the caller then averages explicitly with `pmean`.
    """
    return jax.lax.pcast(tree, BATCH_AXIS, to="varying")


def put_global(tree: Any, mesh: Mesh, spec: P) -> Any:
    """Places host arrays, the same in every process, as global arrays laid out by `spec`.

    Each process fills only its own devices' parts, so this also works when the mesh spans
    several processes (`jax.distributed`).
    """
    sharding = NamedSharding(mesh, spec)

    def place(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(place, tree)


def put_replicated(tree: Any, mesh: Mesh) -> Any:
    """Copies `tree` to every device of the mesh."""
    return put_global(tree, mesh, P())


def put_batch(tree: Any, mesh: Mesh) -> Any:
    """Splits every array of `tree` along its leading axis over the mesh; with several
    processes, `tree` is this process's share and the global batch joins them in order."""
    sharding = NamedSharding(mesh, P(BATCH_AXIS))
    if jax.process_count() == 1:  # one transfer call for the whole tree: less dispatch per leaf
        return jax.device_put(tree, sharding)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), tree)


def local_copy(tree: Any) -> Any:
    """This process's copy of replicated global arrays, as single-device arrays (host arrays
    and arrays this process holds whole pass through)."""
    return jax.tree.map(lambda x: x if getattr(x, "is_fully_addressable", True)
                        else x.addressable_data(0), tree)
