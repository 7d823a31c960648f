"""The torsos' convolutions on CPU: `ops.strided_conv` against XLA's convolution, side by side.

For the Nature and IMPALA shallow torsos (GroupNorm, as the CPU configs), one jitted call of:
  - "train": the forward and backward pass (gradient of a scalar of the features with respect
    to the parameters) over a learner's frames: IMPALA's 21 x 8 (unroll 20 + 1, batch 8) and
    an Ape-X batch of 64 (online and target network: 2 x 64 frames forward, one backward);
  - "act": the forward pass over an actor's batch of 8 and of 16 frames.
Each row times the same torso with the two convolutions in turns (`timing.interleaved_medians`),
so that the machine's load hits them alike; the ratio is XLA's time over ours (> 1: ours is
faster). The parameters are the same; the outputs agree to float32 rounding (checked here).

    .venv/bin/python benchmarks/bench_strided_conv.py [--repeats 30]
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np

import networks
import timing  # benchmarks/timing.py, beside this script
from networks import _conv_utils
from ops.strided_conv import conv2d_valid


def xla_conv(x, kernel, stride):
    return jax.lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def traced_with(conv, fn):
    """`fn` jitted with the torsos' convolution set to `conv` while it is traced."""
    jitted = jax.jit(lambda *args: fn(*args))  # its own trace cache, not fn's

    def call(*args):
        _conv_utils.conv2d_valid = conv
        try:
            return jitted(*args)
        finally:
            _conv_utils.conv2d_valid = conv2d_valid
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per contender")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = [("impala_shallow", "train", 21 * 8), ("nature", "train", 2 * 64),
             ("impala_shallow", "act", 8), ("impala_shallow", "act", 16),
             ("nature", "act", 8), ("nature", "act", 16)]
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, GroupNorm (8 groups), "
          f"uint8 frames, median of {args.repeats} calls each")
    rows = []
    for torso, mode, frames in cases:
        module = networks.make_torso(torso, norm="group", num_groups=8)
        x = jnp.asarray(rng.integers(0, 256, (frames, 84, 84, 4), np.uint8))
        params = module.init(jax.random.key(0), x)
        if mode == "train":
            fn = jax.grad(lambda p, x: jnp.sum(jnp.square(module.apply(p, x))))
        else:
            fn = module.apply
        ours, xla = traced_with(conv2d_valid, fn), traced_with(xla_conv, fn)
        out_ours, out_xla = ours(params, x), xla(params, x)
        error = max(float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))
                    for a, b in zip(jax.tree.leaves(out_ours), jax.tree.leaves(out_xla)))
        seconds = timing.interleaved_medians(
            {"ours": lambda: ours(params, x), "xla": lambda: xla(params, x)},
            repeats=args.repeats)
        rows.append([torso, mode, frames, f"{seconds['xla'] * 1e3:.2f}",
                     f"{seconds['ours'] * 1e3:.2f}", f"{seconds['xla'] / seconds['ours']:.2f}",
                     f"{error:.1e}"])
    timing.print_table(["torso", "pass", "frames", "XLA conv ms", "ours ms", "XLA / ours",
                        "max rel. difference"], rows)


if __name__ == "__main__":
    main()
