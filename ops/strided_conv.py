"""A VALID 2-D convolution computed as one matrix product over space-to-depth blocks.

The DQN and IMPALA torsos open with large strided convolutions (8x8 stride 4, 4x4 stride 2,
Mnih et al. 2015; Espeholt et al. 2018, Fig. 3). XLA's CPU backend runs their gradients slowly
(on a 2-core CPU the shallow torso's forward and backward pass over one IMPALA batch of
21 x 8 frames took 2.4x as long through `lax.conv_general_dilated` as through this op;
`benchmarks/bench_strided_conv.py`). The same function, rewritten:

1. Space to depth: a stride-s convolution with an (m*s)x(m*s) kernel over `[N, H, W, C]` is
   a stride-1 convolution with an m x m kernel over the `[N, H/s, W/s, s*s*C]` image of
   s x s blocks (the block layout of TensorFlow's `SpaceToDepth` op: a block's rows, then its
   columns, then the channels).
2. Shift and add: a stride-1 m x m convolution is one matrix product of every block with all
   m*m kernel taps at once, `[N*h*w, s*s*C] @ [s*s*C, m*m*F]`, followed by the sum over taps
   of the product's m*m shifted windows.

Both steps are reshapes, slices, one dot and adds, so the gradient is one dot more and no
convolution at all. A kernel whose size is not a multiple of the stride is padded with zero
taps (and the input with zeros they multiply), so every kernel, stride and size works.

>>> import jax, numpy as np
>>> x = jax.random.normal(jax.random.key(0), (2, 84, 84, 4))
>>> w = jax.random.normal(jax.random.key(1), (8, 8, 4, 16))
>>> y = conv2d_valid(x, w, 4)
>>> y.shape
(2, 20, 20, 16)
>>> reference = jax.lax.conv_general_dilated(x, w, (4, 4), "VALID",
...                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))
>>> np.testing.assert_allclose(y, reference, rtol=1e-4, atol=1e-4)
"""

import jax
import jax.numpy as jnp


def conv2d_valid(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    """VALID convolution (cross-correlation, as `lax.conv_general_dilated`), NHWC and HWIO.

    Args:
      x: inputs `[N, H, W, C]`.
      kernel: weights `[K, K, C, F]` (square).
      stride: the same stride along H and W, >= 1.

    Returns:
      outputs `[N, (H - K) // stride + 1, (W - K) // stride + 1, F]`, x's dtype promoted with
      the kernel's.
    """
    k, k_w, c, f = kernel.shape
    if k != k_w:
        raise ValueError(f"conv2d_valid: kernel must be square [K, K, C, F], got {kernel.shape}")
    if x.ndim != 4 or x.shape[-1] != c:
        raise ValueError(f"conv2d_valid: x must be [N, H, W, {c}] for a kernel {kernel.shape}, "
                         f"got {x.shape}")
    if stride < 1:
        raise ValueError(f"conv2d_valid: stride must be >= 1, got {stride}")
    n, height, width, _ = x.shape
    if height < k or width < k:
        raise ValueError(f"conv2d_valid: x's H and W {x.shape[1:3]} must be >= the kernel's {k}")
    out_h, out_w = (height - k) // stride + 1, (width - k) // stride + 1
    taps = -(-k // stride)  # m: kernel blocks per side
    padded = taps * stride
    kernel = jnp.pad(kernel, ((0, padded - k), (0, padded - k), (0, 0), (0, 0)))
    # The rows and columns the outputs read, as whole blocks: crop the rest, or add zeros
    # that only the zero taps ever meet.
    rows, cols = (out_h + taps - 1) * stride, (out_w + taps - 1) * stride
    x = x[:, :rows, :cols]
    x = jnp.pad(x, ((0, 0), (0, rows - x.shape[1]), (0, cols - x.shape[2]), (0, 0)))
    blocks_h, blocks_w, depth = rows // stride, cols // stride, stride * stride * c
    # [N, h, s, w, s, C] -> [N, h, w, s, s, C]: each block's pixels, channels last.
    x = x.reshape(n, blocks_h, stride, blocks_w, stride, c).transpose(0, 1, 3, 2, 4, 5)
    # [m, s, m, s, C, F] -> [s, s, C, m, m, F]: rows match a block's pixels, columns the taps.
    kernel = kernel.reshape(taps, stride, taps, stride, c, f).transpose(1, 3, 4, 0, 2, 5)
    products = jnp.dot(x.reshape(n * blocks_h * blocks_w, depth),
                       kernel.reshape(depth, taps * taps * f))
    products = products.reshape(n, blocks_h, blocks_w, taps, taps, f)
    return sum(products[:, i:i + out_h, j:j + out_w, i, j]
               for i in range(taps) for j in range(taps))
