"""Transition specs: the field names, per-item shapes and dtypes a replay stores."""

from typing import Any, Mapping

import numpy as np

# A mapping from field name to its per-transition (shape, dtype); values may also be anything
# with `.shape` and `.dtype` (a NumPy array, `jax.ShapeDtypeStruct`).
TransitionSpec = Mapping[str, Any]


def flatten_spec(spec: TransitionSpec) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Normalizes a spec to `{name: (shape, dtype)}`, validating it."""
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"spec must be a non-empty mapping of field name to (shape, dtype), "
                         f"got {spec!r}")
    out = {}
    for name, field in spec.items():
        shape, dtype = (field.shape, field.dtype) if hasattr(field, "dtype") else field
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"spec[{name!r}] has a negative dimension: {shape}")
        out[str(name)] = (shape, np.dtype(dtype))
    return out


def check_batch(spec: Mapping[str, tuple[tuple[int, ...], np.dtype]],
                transitions: Mapping[str, np.ndarray], batch_size: int) -> None:
    """Raises ValueError unless `transitions` holds exactly the spec's fields as `[B, ...]`."""
    if set(transitions) != set(spec):
        raise ValueError(f"transitions has fields {sorted(transitions)}; the spec has "
                         f"{sorted(spec)}")
    for name, (shape, dtype) in spec.items():
        got = np.shape(transitions[name])
        if got != (batch_size,) + shape:
            raise ValueError(f"transitions[{name!r}] has shape {got}; expected "
                             f"{(batch_size,) + shape} (batch {batch_size}, spec {shape})")
        if not np.can_cast(np.asarray(transitions[name]).dtype, dtype, casting="same_kind"):
            raise ValueError(f"transitions[{name!r}] has dtype "
                             f"{np.asarray(transitions[name]).dtype}; the spec says {dtype}")
