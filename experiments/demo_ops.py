"""A short tour of the pure building blocks: V-trace targets and a GroupNorm conv torso.

This is `make run` until the Ape-X agent lands. It prints V-trace targets for an off-policy batch
next to the on-policy n-step returns they reduce to, and one forward pass of each conv torso with
GroupNorm on random Atari-sized frames.

    python experiments/demo_ops.py [--unroll_length=20] [--batch_size=4]
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

import networks
from ops.vtrace import vtrace

_UNROLL = flags.DEFINE_integer("unroll_length", 20, "T: steps in the V-trace example.")
_BATCH = flags.DEFINE_integer("batch_size", 4, "B: sequences in the examples.")
_GAMMA = flags.DEFINE_float("discount", 0.99, "gamma for the V-trace example.")


def show_vtrace(rng: np.random.Generator) -> None:
    T, B = _UNROLL.value, _BATCH.value
    v_tm1 = jnp.asarray(rng.normal(size=(T, B)), jnp.float32)
    v_t = jnp.concatenate([v_tm1[1:], jnp.asarray(rng.normal(size=(1, B)), jnp.float32)])
    r_t = jnp.asarray(rng.normal(size=(T, B)), jnp.float32)
    discount_t = jnp.full((T, B), _GAMMA.value, jnp.float32)
    on_policy = vtrace(v_tm1, v_t, r_t, discount_t, jnp.ones((T, B)))
    off_policy = vtrace(v_tm1, v_t, r_t, discount_t,
                        jnp.asarray(np.exp(rng.normal(size=(T, B))), jnp.float32))
    gammas = _GAMMA.value ** np.arange(T)
    n_step = float(np.sum(gammas * np.asarray(r_t[:, 0])) + _GAMMA.value ** T * v_t[-1, 0])
    print(f"V-trace, T={T} B={B}: first target on-policy {float(on_policy.vs[0, 0]):+.4f} "
          f"(n-step return {n_step:+.4f}), off-policy {float(off_policy.vs[0, 0]):+.4f}")


def show_torsos(rng: np.random.Generator) -> None:
    frames = jnp.asarray(rng.integers(0, 256, size=(_BATCH.value, 84, 84, 4)), jnp.uint8)
    for name in ("nature", "impala_shallow", "impala_resnet"):
        torso = networks.make_torso(name, norm="group", num_groups=8)
        params = torso.init(jax.random.PRNGKey(0), frames)
        apply = jax.jit(torso.apply)
        features = jax.block_until_ready(apply(params, frames))
        start = time.perf_counter()
        jax.block_until_ready(apply(params, frames))
        count = sum(x.size for x in jax.tree_util.tree_leaves(params))
        print(f"{name:>15} torso, GroupNorm(8): {count:>9,} params, features {features.shape}, "
              f"{(time.perf_counter() - start) * 1e3:.1f} ms / batch of {_BATCH.value}")


def main(argv):
    del argv
    print(f"JAX {jax.__version__} on {jax.devices()}")
    rng = np.random.default_rng(0)
    show_vtrace(rng)
    show_torsos(rng)


if __name__ == "__main__":
    app.run(main)
