"""Input checks shared by the per-env stream builders (Ape-X n-step, IMPALA unrolls)."""

import numpy as np


def check_shape(name: str, x, shape: tuple[int, ...]) -> np.ndarray:
    """`x` as an array, or a ValueError naming `name` unless it has exactly `shape`."""
    x = np.asarray(x)
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    return x


def check_recv(env_ids, obs, num_envs: int, obs_shape: tuple[int, ...],
               obs_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Validates one envpool recv batch: unique env ids in range, observations `[B, *obs_shape]`.

    Returns:
      (env_ids `[B]`, obs `[B, *obs_shape]`) as arrays.
    """
    env_ids = np.asarray(env_ids)
    if env_ids.ndim != 1 or not np.issubdtype(env_ids.dtype, np.integer):
        raise ValueError(f"env_ids must be a 1-D integer array [B], got dtype "
                         f"{env_ids.dtype} shape {env_ids.shape}")
    batch = len(env_ids)
    if batch and (env_ids.min() < 0 or env_ids.max() >= num_envs):
        raise ValueError(f"env_ids must be in [0, num_envs={num_envs}), got "
                         f"{env_ids[(env_ids < 0) | (env_ids >= num_envs)][:3]}")
    if len(np.unique(env_ids)) != batch:
        raise ValueError(f"env_ids must be unique within a batch, got {env_ids}")
    obs = check_shape("obs", obs, (batch,) + tuple(obs_shape))
    if not np.can_cast(obs.dtype, obs_dtype, casting="same_kind"):
        raise ValueError(f"obs has dtype {obs.dtype}; the builder stores {obs_dtype}")
    return env_ids, obs


def check_builder_args(gamma: float, **counts) -> None:
    """ValueErrors for a builder's counts (each an integer >= 1) and discount (in [0, 1])."""
    for name, value in counts.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not 0.0 <= gamma <= 1.0:  # also rejects NaN
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
