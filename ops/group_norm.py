"""Group Normalization (Wu & He 2018, arXiv:1803.08494) for channels-last inputs.

Each sample is normalized over its spatial axes and a group of C/G channels (eq. 1-4, Sec. 3.1),
so the output never depends on the other samples in the batch. Every axis before the spatial ones
is a batch axis, so the learner's time-major `[T, B, H, W, C]` needs no reshape.

One group is LayerNorm over (H, W, C); C groups (group_size=1) is InstanceNorm:

>>> import jax, jax.numpy as jnp, numpy as np
>>> from ops.group_norm import group_norm
>>> x = jax.random.normal(jax.random.key(0), (2, 5, 5, 8))
>>> layer_norm = (x - x.mean((1, 2, 3), keepdims=True)) / jnp.sqrt(
...     x.var((1, 2, 3), keepdims=True) + 1e-5)
>>> np.testing.assert_allclose(group_norm(x, num_groups=1), layer_norm, atol=1e-5)
>>> instance_norm = (x - x.mean((1, 2), keepdims=True)) / jnp.sqrt(
...     x.var((1, 2), keepdims=True) + 1e-5)
>>> np.testing.assert_allclose(group_norm(x, num_groups=8), instance_norm, atol=1e-5)
>>> np.testing.assert_allclose(group_norm(x, None, group_size=1), instance_norm, atol=1e-5)

`[T, B, H, W, C]` is the same as `[T * B, H, W, C]`:

>>> xs = jax.random.normal(jax.random.key(1), (3, 2, 4, 4, 16))
>>> np.testing.assert_allclose(
...     group_norm(xs, 4), group_norm(xs.reshape(6, 4, 4, 16), 4).reshape(xs.shape), atol=1e-6)
"""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _resolve_num_groups(channels: int, num_groups: int | None, group_size: int | None) -> int:
    """Returns G after checking that exactly one of num_groups / group_size is set and divides C."""
    if group_size is not None:
        if num_groups is not None:
            raise ValueError(
                f"pass num_groups or group_size, not both; got num_groups={num_groups} and "
                f"group_size={group_size} (set num_groups=None to use group_size)")
        if not _is_int(group_size) or group_size <= 0:
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        if channels % group_size:
            raise ValueError(f"group_size={group_size} does not divide {channels} channels; "
                             f"use one of {_divisors(channels)}")
        return channels // group_size
    if num_groups is None:
        raise ValueError("one of num_groups or group_size must be given; both are None")
    if not _is_int(num_groups) or num_groups <= 0:
        raise ValueError(f"num_groups must be a positive int, got {num_groups!r}")
    if channels % num_groups:
        raise ValueError(f"num_groups={num_groups} does not divide {channels} channels; "
                         f"use one of {_divisors(channels)}")
    return num_groups


@jax.custom_jvp
def _channel_moments(xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean and biased variance over axis -2 of `[*batch, S, C]`, each `[*batch, C]`.

    E[x^2] - E[x]^2 keeps no digit of the variance once |mean| / std reaches ~1e3 in float32:
    x^2 rounds away what tells the values apart. Squaring the distance to a value of the same
    channel, s, keeps them, leaving only errors linear in |mean| / std, the size of the rounding
    x itself carries. Both reductions still read x once each, with no temporary array.
    """
    shift = xs[..., :1, :]  # [*batch, 1, C]
    mean = jnp.mean(xs, axis=-2)  # [*batch, C]
    var = jnp.mean(jnp.square(xs - shift), axis=-2) - jnp.square(mean - shift[..., 0, :])
    # Rounding can leave the variance of a constant channel slightly negative.
    return mean, jnp.maximum(var, 0.0)


@_channel_moments.defjvp
def _channel_moments_jvp(primals, tangents):
    # The exact derivative, free of s. Autodiff of the shifted form would keep xs - s alive for
    # the backward pass, and XLA:CPU then writes it out as a full-size temporary.
    (xs,), (dxs,) = primals, tangents
    mean, var = _channel_moments(xs)
    dmean = jnp.mean(dxs, axis=-2)
    dvar = 2.0 * jnp.mean((xs - mean[..., None, :]) * dxs, axis=-2)
    return (mean, var), (dmean, dvar)


def group_norm(x: jax.Array,
               num_groups: int | None = 32,
               *,
               group_size: int | None = None,
               epsilon: float = 1e-5,
               scale: jax.Array | None = None,
               bias: jax.Array | None = None,
               spatial_ndim: int = 2) -> jax.Array:
    """Group Normalization, Wu & He 2018 (arXiv:1803.08494) eq. 1-4.

    For each sample i and channel group, S_i is the set of positions with that sample index and a
    channel in the group; y = (x - mu_i) / sqrt(sigma_i^2 + epsilon) * scale + bias, with the
    mean mu_i and biased variance sigma_i^2 over S_i. Statistics and normalization run in at least
    float32 (bf16/float16 inputs are upcast); the result has the dtype of `x`.

    Args:
      x: channels-last `[*batch, *spatial, C]`, `spatial_ndim` spatial axes and at least one batch
        axis: `[B, H, W, C]` or `[T, B, H, W, C]` (spatial_ndim=2), `[B, L, C]` (1), `[B, C]` (0).
      num_groups: G, the number of channel groups; must divide C. Must be None when `group_size`
        is given.
      group_size: channels per group (G = C / group_size), instead of `num_groups`.
      epsilon: non-negative constant added to the variance.
      scale: optional per-channel gamma, `[C]`.
      bias: optional per-channel beta, `[C]`.
      spatial_ndim: number of spatial axes between the batch axes and the channel axis.

    Returns:
      The normalized `x`: same shape and dtype.
    """
    if not _is_int(spatial_ndim) or spatial_ndim < 0:
        raise ValueError(f"spatial_ndim must be an int >= 0, got {spatial_ndim!r}")
    if x.ndim < spatial_ndim + 2:
        raise ValueError(
            f"x must have rank >= spatial_ndim + 2 = {spatial_ndim + 2} (batch axes, "
            f"{spatial_ndim} spatial axes, channels); got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"x must be a floating-point array, got dtype {x.dtype}")
    if not epsilon >= 0:  # `not >=` also rejects NaN
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    channels = x.shape[-1]
    groups = _resolve_num_groups(channels, num_groups, group_size)
    for name, param in (("scale", scale), ("bias", bias)):
        if param is not None and jnp.shape(param) != (channels,):
            raise ValueError(f"{name} must have shape [C] = ({channels},), got {jnp.shape(param)}")

    compute_dtype = jnp.promote_types(x.dtype, jnp.float32)
    batch_shape = x.shape[: x.ndim - 1 - spatial_ndim]
    group_shape = (*batch_shape, groups, channels // groups)
    num_spatial = math.prod(x.shape[len(batch_shape):-1])  # H * W; 1 when spatial_ndim=0
    xs = x.astype(compute_dtype).reshape(*batch_shape, num_spatial, channels)  # [*batch, S, C]

    # Per channel first, then per group: the full-size reductions then run over one axis of the
    # channels-last layout, which XLA:CPU does several times faster than over a [.., G, C/G] view.
    mean_c, var_c = _channel_moments(xs)  # [*batch, C]
    mean_c = mean_c.reshape(group_shape)  # [*batch, G, C/G]
    var_c = var_c.reshape(group_shape)  # [*batch, G, C/G]
    # Law of total variance over equal-sized channels: a sum of non-negative terms, exact.
    mean = jnp.mean(mean_c, axis=-1, keepdims=True)  # [*batch, G, 1]
    var = jnp.mean(var_c + jnp.square(mean_c - mean), axis=-1, keepdims=True)  # [*batch, G, 1]

    # y = x * a + b with a = scale / std, b = bias - mean * a: one multiply-add an element. Folding
    # the mean into b adds an error of eps * |mean| / sqrt(var + epsilon), of the order of the
    # rounding already in x.
    per_group_channel = (*(1,) * len(batch_shape), groups, channels // groups)
    a = jax.lax.rsqrt(var + epsilon)  # [*batch, G, 1]
    if scale is not None:
        a = a * scale.astype(compute_dtype).reshape(per_group_channel)
    a = jnp.broadcast_to(a, group_shape)  # [*batch, G, C/G]
    b = -mean * a
    if bias is not None:
        b = b + bias.astype(compute_dtype).reshape(per_group_channel)
    per_channel = (*batch_shape, *(1,) * spatial_ndim, channels)  # broadcasts over space
    y = x.astype(compute_dtype) * a.reshape(per_channel) + b.reshape(per_channel)
    return y.astype(x.dtype)


class GroupNorm(nn.Module):
    """Group Normalization layer (Wu & He 2018, arXiv:1803.08494) with a learned scale and bias.

    Calls `group_norm`; the module docstring shows the LayerNorm (num_groups=1) and InstanceNorm
    (num_groups=C) equivalences. Unlike `flax.linen.GroupNorm`, any number of leading batch axes
    is allowed without naming reduction axes.

    Attributes:
      num_groups: G, must divide the channels; None when `group_size` is set.
      group_size: channels per group, instead of `num_groups`.
      epsilon: added to the variance.
      spatial_ndim: number of spatial axes between the batch axes and the channel axis.
      use_scale: learn a per-channel "scale" `[C]`.
      use_bias: learn a per-channel "bias" `[C]`.
      scale_init: initializer of "scale".
      bias_init: initializer of "bias".
      param_dtype: dtype of the parameters.
    """

    num_groups: int | None = 32
    group_size: int | None = None
    epsilon: float = 1e-5
    spatial_ndim: int = 2
    use_scale: bool = True
    use_bias: bool = True
    scale_init: nn.initializers.Initializer = nn.initializers.ones
    bias_init: nn.initializers.Initializer = nn.initializers.zeros
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Normalizes `x` `[*batch, *spatial, C]`; returns the same shape and dtype."""
        shape = (x.shape[-1],)
        scale = bias = None
        if self.use_scale:
            scale = self.param("scale", self.scale_init, shape, self.param_dtype)
        if self.use_bias:
            bias = self.param("bias", self.bias_init, shape, self.param_dtype)
        return group_norm(x, self.num_groups, group_size=self.group_size, epsilon=self.epsilon,
                          scale=scale, bias=bias, spatial_ndim=self.spatial_ndim)
