"""Pieces every conv torso shares: norm validation and layers, frame scaling, the dense output.

Normalization (`norm="none" | "group" | "layer"`, Wu & He 2018, arXiv:1803.08494, Sec. 3) is
applied to the output of a conv before its ReLU, conv -> norm -> ReLU as in the GroupNorm
paper's ResNets. "layer" is `GroupNorm(num_groups=1)`, LayerNorm over (H, W, C), so both
norms run through one op. Both normalize each sample on its own, so a sample's features never
depend on the rest of its (small, per-device) learner batch or on the actors' batch size.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from ops.group_norm import GroupNorm
from ops.strided_conv import conv2d_valid

NORMS = ("none", "group", "layer")


def check_conv_torso(owner: str, norm: str, num_groups: int, channels: tuple[int, ...],
                     hidden_size: int | None) -> None:
    """Raises a ValueError for a bad `norm`, a `num_groups` that misses a layer, or a bad width.

    Called at construction, not first call, so a bad config fails before any tracing and the
    message names the torso and every conv width; GroupNorm alone would raise only at call
    time, without saying which torso or which layers.

    Args:
      owner: torso class name, for the message.
      norm: "none" | "group" | "layer".
      num_groups: groups for norm="group" (ignored otherwise).
      channels: output channels of every conv the norm follows.
      hidden_size: width of the final dense layer, or None for none.
    """
    if norm not in NORMS:
        raise ValueError(f"{owner}: norm must be one of {NORMS}, got norm={norm!r}.")
    if hidden_size is not None and hidden_size < 1:
        raise ValueError(f"{owner}: hidden_size must be >= 1 or None, got {hidden_size}.")
    if norm != "group":
        return
    if num_groups < 1:
        raise ValueError(f"{owner}: num_groups must be >= 1, got {num_groups}.")
    bad = sorted({c for c in channels if c % num_groups})
    if bad:
        raise ValueError(
            f"{owner}: norm='group' needs num_groups to divide every conv layer's channels "
            f"{tuple(channels)}; num_groups={num_groups} does not divide {bad}.")


def norm_layer(norm: str, num_groups: int, name: str) -> nn.Module | None:
    """The norm applied after one conv: GroupNorm, GroupNorm(1) for "layer", None for "none"."""
    if norm == "none":
        return None
    groups = num_groups if norm == "group" else 1  # One group = LayerNorm over (H, W, C).
    return GroupNorm(num_groups=groups, spatial_ndim=2, name=name)


def frames_to_float(x: jax.Array, owner: str) -> tuple[jax.Array, tuple[int, ...]]:
    """Scales frames to float32 [0, 1] and folds the leading axes into one batch axis.

    uint8 frames are divided by 255 here, so actors and replay keep the 4x smaller uint8
    arrays. Float frames are taken as already scaled: dividing them again would shrink every
    input 255-fold without any error.

    Args:
      x: frames `[..., H, W, C]`, uint8 in [0, 255] or float in [0, 1].
      owner: torso class name, for error messages.

    Returns:
      (frames `[N, H, W, C]` float32 with N = prod(leading axes), the leading axes' shape).
    """
    if x.ndim < 4:
        raise ValueError(f"{owner}: expected frames [..., H, W, C] with at least one batch axis, "
                         f"got shape {x.shape}.")
    if x.dtype == jnp.uint8:
        x = x.astype(jnp.float32) / 255.0
    elif jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    else:
        raise ValueError(f"{owner}: frames must be uint8 (scaled by 1/255 here) or float "
                         f"(taken as already in [0, 1]), got dtype {x.dtype}.")
    batch_shape = x.shape[:-3]
    # Max-pool (lax.reduce_window) wants exactly one batch axis; one reshape serves every layer.
    x = x.reshape((-1,) + x.shape[-3:])  # [N, H, W, C]
    return x, batch_shape


def dense_out(x: jax.Array, batch_shape: tuple[int, ...], hidden_size: int | None) -> jax.Array:
    """Flattens conv features and applies the torso's final dense + ReLU (none if None).

    Call it inside a compact `__call__`, so the Dense belongs to that torso.

    Args:
      x: conv features `[N, h, w, c]`.
      batch_shape: the leading axes folded into N.
      hidden_size: width of the dense layer, or None to return the flat features.

    Returns:
      `[*batch_shape, hidden_size]`, or `[*batch_shape, h * w * c]` if hidden_size is None.
    """
    x = x.reshape(batch_shape + (-1,))  # [..., h * w * c]
    if hidden_size is None:
        return x
    return nn.relu(nn.Dense(hidden_size, name="dense")(x))


class ValidConv(nn.Module):
    """A square VALID convolution with bias: `nn.Conv(features, (k, k), (s, s), "VALID")`'s
    parameters (names, shapes, initializers), computed by `ops.strided_conv` on CPU.

    XLA's CPU backend runs the gradients of the torsos' large strided convolutions slowly; the
    space-to-depth matmul computes the same function (to float32 rounding) in less than half
    the time there (`benchmarks/bench_strided_conv.py`). Other backends keep XLA's convolution.
    The choice is made when the function is traced, from the backend it is traced for.

    Attributes:
      features: output channels F.
      kernel_size: K, for a K x K kernel.
      stride: the stride along H and W.
    """
    features: int
    kernel_size: int
    stride: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`[N, H, W, C]` -> `[N, (H - K) // stride + 1, (W - K) // stride + 1, F]`."""
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (self.kernel_size, self.kernel_size, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        if jax.default_backend() == "cpu":
            y = conv2d_valid(x, kernel, self.stride)
        else:
            y = jax.lax.conv_general_dilated(x, kernel, (self.stride, self.stride), "VALID",
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y + bias.reshape(1, 1, 1, -1)
