"""Forward-pass cost of the conv torsos, and what GroupNorm / LayerNorm add to it.

Measures one jitted forward pass (`module.apply`, no gradient) of each conv torso (Nature DQN,
IMPALA shallow, IMPALA ResNet) with norm="none" | "group" | "layer" on a uint8 batch
[32, 84, 84, 4] (one actor step of 32 envs, or one Ape-X learner batch of 32 without the
backward pass). Each configuration is compiled and warmed up first; the figure is the median
wall time of `--repeats` calls, each ended with `block_until_ready`. The peer named in each
row's ratio is the same torso with norm="none" from the same run; the three norms of a torso
are timed in turns (none, group, layer, none, ...) so that other jobs' load hits them alike.

Group norm uses num_groups=8 for every torso: 8 divides every conv width (16, 32, 64), so one
setting serves all three (GroupNorm's default of 32 does not divide the ResNet's 16).

Run from the repository root:
    .venv/bin/python benchmarks/bench_torsos.py [--repeats 100] [--batch 32]
"""
import argparse

import jax
import numpy as np

import networks
import timing  # benchmarks/timing.py, beside this script: the shared interleaved timer.

TORSOS = ("nature", "impala_shallow", "impala_resnet")
NORMS = ("none", "group", "layer")
NUM_GROUPS = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=100, help="timed calls per configuration")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls (compile) first")
    parser.add_argument("--batch", type=int, default=32, help="frames per forward pass")
    args = parser.parse_args()

    frames = np.random.default_rng(0).integers(0, 256, size=(args.batch, 84, 84, 4),
                                               dtype=np.uint8)
    x = jax.device_put(frames)
    print(f"jax {jax.__version__}, device {jax.devices()[0].device_kind}, input uint8 "
          f"{frames.shape}, median of {args.repeats} calls, group num_groups={NUM_GROUPS}")
    rows = []
    for name in TORSOS:
        calls, num_params = {}, {}
        for norm in NORMS:
            module = networks.make_torso(name, norm=norm, num_groups=NUM_GROUPS)
            variables = module.init(jax.random.key(0), x)
            num_params[norm] = sum(p.size for p in jax.tree.leaves(variables))
            apply = jax.jit(module.apply)
            calls[norm] = lambda apply=apply, variables=variables: apply(variables, x)
        # The three norms of one torso in turns, so that other jobs' load hits them alike.
        seconds = timing.interleaved_medians(calls, repeats=args.repeats, warmup=args.warmup)
        for norm in NORMS:
            rows.append([name, norm, f"{num_params[norm]:,}", f"{seconds[norm] * 1e3:.2f}",
                         f"{args.batch / seconds[norm]:,.0f}",
                         f"{seconds[norm] / seconds['none']:.2f}"])
    timing.print_table(["torso", "norm", "params", "ms/forward", "frames/s", "vs none"], rows)


if __name__ == "__main__":
    main()
