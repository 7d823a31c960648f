"""IMPALA's learner update on this CPU under XLA's CPU options: which way runs it fastest.

The update of the Pong CPU config (`impala_pong_cpu_group_norm_batch8.cfg`: shallow torso with
GroupNorm, T=20, B=8, V-trace, RMSProp) is the bound of a full run on two cores, so its time
per update is the time per 160 agent steps. Each variant runs in its own process (XLA reads its
flags once, at start), all on the same synthetic batch; `xla_conv` is the default with the
torso's convolutions through XLA's convolution instead of `ops.strided_conv` (the torsos' way
on CPU). The variants are run in turn twice (A, B, ..., A, B, ...) so that drift in the
machine's load hits each of them alike. `--configs` times the update of other flagfiles
beside it (an optimizer or a norm changes what one update costs), each under every variant,
against the first config's default.

    python benchmarks/bench_learner_cpu.py [--seconds 20] [--variants default,onednn,...]
    python benchmarks/bench_learner_cpu.py --variants=default --configs=A.cfg,B.cfg,...
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import timing
from agents.run.allocator import TUNABLES

# name -> (XLA_FLAGS additions, extra environment). Flags checked against jaxlib 0.10.
# BENCH_CONV=xla is read by this script's child alone: the torso's convolutions go through
# XLA's convolution instead of `ops.strided_conv` (the torsos' way on CPU), for the ratio.
VARIANTS = {
    "xla_conv": ("", {"BENCH_CONV": "xla"}),
    "default": ("", {}),
    "no_async_dispatch": ("", {"JAX_CPU_ENABLE_ASYNC_DISPATCH": "false"}),
    "onednn": ("--xla_cpu_use_onednn=true", {}),
    "xnnpack": ("--xla_cpu_use_xnnpack=true", {}),
    "fast_math": ("--xla_cpu_enable_fast_math=true", {}),
    "no_thunks": ("--xla_cpu_use_thunk_runtime=false", {}),
    "eigen_one_thread": ("--xla_cpu_multi_thread_eigen=false", {}),
    # glibc keeps freed blocks for reuse (`agents.run.allocator`: the launchers' setting).
    "keep_freed_memory": ("", {"GLIBC_TUNABLES": TUNABLES}),
}
CONFIG = "experiments/configs/impala_pong_cpu_group_norm_batch8.cfg"


def build_update():
    """The config's jitted update on a synthetic batch, in this process: (`one()`, which runs
    one update from a fresh host batch and waits for it, the parameter count, agent steps an
    update)."""
    import jax
    import numpy as np

    from agents.impala.builder import make_network
    from agents.impala.config import ImpalaConfig
    from agents.impala.learner import init_state, make_optimizer, make_update
    from agents.parallel import sharding
    from agents.run.envs import actor_env_settings, env_info
    from agents.run.flags import config_from_flagfile

    if os.environ.get("BENCH_CONV") == "xla":
        from networks import _conv_utils
        _conv_utils.conv2d_valid = lambda x, kernel, stride: jax.lax.conv_general_dilated(
            x, kernel, (stride, stride), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    config = config_from_flagfile(ImpalaConfig, os.environ.get("BENCH_CONFIG", CONFIG))
    info = env_info(actor_env_settings(config, 0))
    rng = np.random.default_rng(0)  # the torch reference's batch too (its make_batch)
    T, B, A = config.unroll_length, config.batch_size, info.num_actions
    batch = dict(obs=rng.integers(0, 256, (B, T + 1) + info.obs_shape, dtype=np.uint8),
                 actions=rng.integers(0, A, (B, T)).astype(np.int32),
                 rewards=rng.normal(size=(B, T)).astype(np.float32),
                 discounts=np.full((B, T), 0.99, np.float32),
                 episode_ends=np.zeros((B, T), bool), masks=np.ones((B, T), np.float32),
                 behaviour_logits=rng.normal(size=(B, T, A)).astype(np.float32))
    mesh = sharding.learner_mesh(jax.local_devices()[:1])
    network = make_network(config, info)
    state = init_state(network, make_optimizer(config), np.zeros(info.obs_shape, np.uint8),
                       jax.random.PRNGKey(0))
    params = sum(x.size for x in jax.tree.leaves(state.params))
    update, zero = make_update(network, config, mesh, state.params)
    box = [zero.place_state(state, mesh)]

    def one():
        on_device = sharding.put_batch(batch, mesh)  # as the learner: a fresh batch each update
        box[0], metrics = update(box[0], on_device)
        jax.block_until_ready(metrics)

    return one, params, T * B


def measure(seconds: float) -> dict:
    """ms per update of the config's jitted update in this process, and per update the page
    faults and the kernel's CPU time (the process's, over the timed updates)."""
    one, _, agent_steps = build_update()
    times = []
    deadline = None
    while deadline is None or time.perf_counter() < deadline or len(times) < 5:
        start = time.perf_counter()
        one()
        if deadline is None:  # the first call compiles
            deadline = time.perf_counter() + seconds
            before = resource.getrusage(resource.RUSAGE_SELF)
        else:
            times.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"ms": 1e3 * statistics.median(times), "updates": len(times),
            "agent_steps": agent_steps,
            "faults": (after.ru_minflt - before.ru_minflt) / len(times),
            "kernel_ms": 1e3 * (after.ru_stime - before.ru_stime) / len(times)}


def variant_env(name: str) -> dict:
    """The environment of a process that runs variant `name` (its XLA_FLAGS and variables;
    glibc's defaults unless the variant sets GLIBC_TUNABLES)."""
    flags, extra = VARIANTS[name]
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env.update(extra)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
    return env


def run_variant(name: str, seconds: float, config: str = CONFIG) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(seconds)],
                         env=variant_env(name) | {"BENCH_CONFIG": config},
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", default=CONFIG,
                        help="IMPALA flagfiles whose updates are timed (the first is the base)")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child)))
        return
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"--variants: unknown {unknown}; allowed: {sorted(VARIANTS)}")
    configs = args.configs.split(",")
    missing = [c for c in configs if not os.path.isfile(c)]
    if missing:
        raise ValueError(f"--configs: no such flagfile {missing}")
    runs = [(c, n) for c in configs for n in names]  # the first config's variants first
    results = {run: [] for run in runs}
    for _ in range(args.rounds):
        for config, name in runs:
            r = run_variant(name, args.seconds, config)
            print(os.path.basename(config), name, r, flush=True)
            results[(config, name)].append(r)
    base_ms = [r["ms"] for r in results.get((configs[0], "default"), []) if "ms" in r]
    base = statistics.median(base_ms) if base_ms else None
    rows = []
    for config, name in runs:
        label = (f"{os.path.splitext(os.path.basename(config))[0]} " if len(configs) > 1 else "") + name
        setting = VARIANTS[name][0] or str(VARIANTS[name][1]) or "-"
        done = [r for r in results[(config, name)] if "ms" in r]
        if not done:
            rows.append([label, setting, results[(config, name)][0]["error"][:60],
                         "-", "-", "-", "-"])
            continue
        ms = statistics.median(r["ms"] for r in done)
        rows.append([label, setting, ms, done[0]["agent_steps"] / ms * 1e3,
                     base / ms if base else "-",
                     statistics.median(r["faults"] for r in done),
                     statistics.median(r["kernel_ms"] for r in done)])
    timing.print_table(["variant", "setting", "ms/update", "agent steps/s",
                        "speed vs default", "page faults/update", "kernel ms/update"], rows)


if __name__ == "__main__":
    main()
