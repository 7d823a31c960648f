"""V-trace: ops.vtrace against rlax.vtrace_td_error_and_advantage (vmapped over B), jitted on CPU.

Both compute V-trace targets and pg advantages for time-major [T, B] inputs; rlax is written for
one series [T], so it is vmapped over B as a user would. Reports the largest absolute difference
and the median time ratio (ours / rlax). Targets: same numbers within 1e-6, time ratio <= 1.0.

    python benchmarks/bench_vtrace.py [--repeats 200]
"""

import argparse

import timing

import jax
import numpy as np
import rlax

from ops.vtrace import vtrace


def make_inputs(rng, T, B):
    v_tm1 = rng.normal(size=(T, B))
    v_t = np.concatenate([v_tm1[1:], rng.normal(size=(1, B))])
    r_t = rng.normal(size=(T, B))
    discount_t = 0.99 * (rng.uniform(size=(T, B)) > 0.05)
    rho_tm1 = np.exp(rng.normal(scale=0.5, size=(T, B)))
    return [jax.device_put(np.float32(a)) for a in (v_tm1, v_t, r_t, discount_t, rho_tm1)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args()

    ours = jax.jit(lambda *a: vtrace(*a)[1:])  # (errors, pg_advantages)
    theirs = jax.jit(lambda *a: jax.vmap(
        rlax.vtrace_td_error_and_advantage, in_axes=1, out_axes=1)(*a)[:2])

    rows = []
    for T, B in [(20, 32), (100, 256)]:
        inputs = make_inputs(np.random.default_rng(0), T, B)
        ours_out, theirs_out = ours(*inputs), theirs(*inputs)
        diff = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                   for a, b in zip(ours_out, theirs_out))
        t = timing.interleaved_medians(
            dict(ours=lambda: ours(*inputs), rlax=lambda: theirs(*inputs)), repeats=args.repeats)
        t_ours, t_theirs = t["ours"], t["rlax"]
        ratio = t_ours / t_theirs
        met = "met" if diff <= 1e-6 and ratio <= 1.0 else "missed"
        rows.append([f"[T={T}, B={B}]", t_ours * 1e6, t_theirs * 1e6, ratio, f"{diff:.1e}", met])
    timing.print_table(
        ["shape", "ours us", "rlax us", "ratio ours/rlax", "max abs diff", "target"], rows)


if __name__ == "__main__":
    main()
