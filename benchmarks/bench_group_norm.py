"""Our GroupNorm module against flax.linen.GroupNorm (num_groups=32), jitted, on the CPU.

Measures, at the IMPALA torso's feature-map shapes [32, 84, 84, 32] and [32, 21, 21, 64]:
  fwd      the module's apply;
  fwd+bwd  the gradient of sum(output * w) with respect to the input and the params. A fixed
           random w stands in for the upstream gradient: with w = 1 XLA folds the constant
           cotangent away and times a backward pass no network runs.
Timings are the median of many calls after warm-up, ours and flax interleaved call by call so
that load from other processes hits both alike. Both get epsilon=1e-5 and the same params.
Target per row: outputs and gradients within 1e-5 (max diff: absolute, relative for gradients
larger than 1) and time ratio ours/flax <= 1.

Run from the repository root:
  .venv/bin/python benchmarks/bench_group_norm.py [--reps 1000] [--warmup 10]
"""
import argparse
import os
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from ops.group_norm import GroupNorm

SHAPES = ((32, 84, 84, 32), (32, 21, 21, 64))
NUM_GROUPS = 32
EPSILON = 1e-5
TARGET_DIFF = 1e-5


def _max_diff(ours, theirs) -> float:
    """Largest |ours - theirs| over all leaves, each divided by max(1, max |theirs|) of its leaf.

    Outputs and input gradients are of order 1, so this is their absolute difference; the
    scale and bias gradients are sums over B * H * W terms of order 1e2, where float32 itself
    only holds about 1e-5 absolute, so they are compared relative to their size.
    """
    def leaf_diff(u, v):
        return float(jnp.max(jnp.abs(u - v)) / jnp.maximum(1.0, jnp.max(jnp.abs(v))))
    return max(jax.tree_util.tree_leaves(jax.tree_util.tree_map(leaf_diff, ours, theirs)))


def _timed_pair(fn_a, fn_b, args_a, args_b, reps: int, warmup: int) -> tuple[float, float]:
    """Median milliseconds per call of two functions, called alternately."""
    for _ in range(warmup):
        jax.block_until_ready(fn_a(*args_a))
        jax.block_until_ready(fn_b(*args_b))
    times_a, times_b = [], []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn_a(*args_a))
        middle = time.perf_counter()
        jax.block_until_ready(fn_b(*args_b))
        times_a.append(middle - start)
        times_b.append(time.perf_counter() - middle)
    return 1e3 * statistics.median(times_a), 1e3 * statistics.median(times_b)


def _passes(module: nn.Module, weights: jax.Array):
    def loss(params, x):
        return jnp.sum(module.apply({"params": params}, x) * weights)

    forward = jax.jit(lambda params, x: module.apply({"params": params}, x))
    forward_backward = jax.jit(jax.grad(loss, argnums=(0, 1)))
    return {"fwd": forward, "fwd+bwd": forward_backward}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000, help="timed calls per row")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls per row")
    args = parser.parse_args()

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} cpus, "
          f"num_groups={NUM_GROUPS}, median of {args.reps} calls")
    header = (f"{'shape':<18} {'pass':<8} {'ours ms':>8} {'flax ms':>8} {'ratio':>6} "
              f"{'max diff':>10}  target")
    print(header)
    print("-" * len(header))
    for shape in SHAPES:
        key_x, key_w, key_scale, key_bias = jax.random.split(jax.random.key(0), 4)
        x = jax.random.normal(key_x, shape) * 2.0 + 0.5
        weights = jax.random.normal(key_w, shape)
        channels = shape[-1]
        # Non-trivial params so the scale and bias paths are compared too.
        params = {"scale": 1.0 + 0.1 * jax.random.normal(key_scale, (channels,)),
                  "bias": 0.1 * jax.random.normal(key_bias, (channels,))}
        ours = _passes(GroupNorm(num_groups=NUM_GROUPS, epsilon=EPSILON), weights)
        flax = _passes(nn.GroupNorm(num_groups=NUM_GROUPS, epsilon=EPSILON), weights)
        for name in ("fwd", "fwd+bwd"):
            diff = _max_diff(ours[name](params, x), flax[name](params, x))
            ours_ms, flax_ms = _timed_pair(ours[name], flax[name], (params, x), (params, x),
                                           args.reps, args.warmup)
            ratio = ours_ms / flax_ms
            met = diff <= TARGET_DIFF and ratio <= 1.0
            print(f"{str(list(shape)):<18} {name:<8} {ours_ms:>8.2f} {flax_ms:>8.2f} "
                  f"{ratio:>6.2f} {diff:>10.2e}  {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
