"""The accelerator paths in one short run, for a GPU host (envpool optional).

1. jax: platform, devices, a matmul on each device.
2. Ape-X learner: updates/s of the jitted double-Q update at the paper's batch 512 (dueling
   Nature network, Pong-shaped frames), data-parallel over all local devices, ZeRO stages 0
   and 2, against the paper's learner: 19 updates/s of batch 512 (Horgan et al. 2018, Sec. 4).
3. IMPALA learner: agent steps/s the V-trace update consumes at the paper's T=20, B=32, deep
   ResNet torso, over all local devices (record).
4. Atari actor, only where envpool is installed: `bench_apex.actor_part` (frames/s of the full
   actor against a bare loop with the same policy, target ratio >= 0.9).
5. The papers' Atari configs as a user runs them, only where envpool is installed:
   `paper_runs.py`, IMPALA then Ape-X for --run_seconds each with as many actor threads as
   help on the host (`paper_runs.actor_threads`), frames/s and learner updates/s against the anchors.

    python benchmarks/bench_gpu.py [--seconds 10] [--run_seconds 120]

With the defaults it takes about 7 minutes on one GPU.
"""

import argparse
import dataclasses
import os
import time

import timing

import jax
import jax.numpy as jnp
import numpy as np

from agents.parallel import sharding
from agents.apex import learner as apex_learner
from agents.apex.builder import make_network as apex_network
from agents.apex.config import ApexConfig
from agents.run.envs import EnvInfo
from agents.impala import learner as impala_learner
from agents.impala.builder import make_network as impala_network
from agents.impala.config import ImpalaConfig

PONG = EnvInfo(obs_shape=(4, 84, 84), obs_dtype=np.dtype(np.uint8), num_actions=6,
               is_atari=True, channels_first=True, max_episode_steps=27_000)
PAPER_APEX_UPDATES_PER_S = 19.0


def updates_per_s(update, state, batch, seconds: float) -> float:
    """Steady-state rate of `state, *_ = update(state, batch)`, compilation excluded."""
    for _ in range(2):
        state, *outputs = update(state, batch)
    jax.block_until_ready(outputs)
    count, start = 0, time.perf_counter()
    while count < 3 or time.perf_counter() - start < seconds:
        state, *outputs = update(state, batch)
        jax.block_until_ready(outputs)
        count += 1
    return count / (time.perf_counter() - start)


def learner_rate(learner, network, config, mesh, batch, seconds: float) -> float:
    """Updates/s of `learner.make_update` (the Ape-X or IMPALA module) from fresh parameters."""
    state = learner.init_state(network, learner.make_optimizer(config),
                               np.zeros(PONG.obs_shape, np.uint8), jax.random.PRNGKey(0))
    update, zero = learner.make_update(network, config, mesh, state.params)
    return updates_per_s(update, zero.place_state(state, mesh), batch, seconds)


def devices_part() -> None:
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}")
    for device in jax.local_devices():
        x = jax.device_put(jnp.ones((1024, 1024)), device)
        assert float((x @ x)[0, 0]) == 1024.0, device


def apex_part(mesh, seconds: float) -> list[list]:
    rng, rows = np.random.default_rng(0), []
    size = 512
    frames = lambda: rng.integers(0, 256, (size,) + PONG.obs_shape, dtype=np.uint8)  # noqa: E731
    batch = sharding.put_batch(dict(
        obs=frames(), next_obs=frames(), action=rng.integers(0, 6, size).astype(np.int32),
        reward=rng.normal(size=size).astype(np.float32),
        discount=np.full(size, 0.97, np.float32), weights=np.ones(size, np.float32)), mesh)
    for stage in (0, 2):
        config = ApexConfig(batch_size=size, zero_stage=stage)
        rate = learner_rate(apex_learner, apex_network(config, PONG), config, mesh, batch,
                            seconds)
        rows.append([f"Ape-X update, batch 512, ZeRO {stage}", rate, PAPER_APEX_UPDATES_PER_S,
                     rate / PAPER_APEX_UPDATES_PER_S])
        print(rows[-1], flush=True)
    return rows


def impala_part(mesh, seconds: float) -> list[list]:
    config = ImpalaConfig(torso="impala_resnet")
    rng, (T, B) = np.random.default_rng(0), (config.unroll_length, config.batch_size)
    batch = sharding.put_batch(dict(
        obs=rng.integers(0, 256, (B, T + 1) + PONG.obs_shape, dtype=np.uint8),
        actions=rng.integers(0, 6, (B, T)).astype(np.int32),
        rewards=rng.normal(size=(B, T)).astype(np.float32),
        discounts=np.full((B, T), 0.99, np.float32), episode_ends=np.zeros((B, T), bool),
        masks=np.ones((B, T), np.float32),
        behaviour_logits=rng.normal(size=(B, T, 6)).astype(np.float32)), mesh)
    rows = []
    for norm in ("none", "group"):
        config = dataclasses.replace(config, norm=norm)
        rate = learner_rate(impala_learner, impala_network(config, PONG), config, mesh, batch,
                            seconds)
        rows.append([f"IMPALA update, ResNet, norm {norm}, T=20 B=32", rate * T * B, "", ""])
        print(rows[-1], flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--run_seconds", type=float, default=120.0,
                        help="seconds of each paper-config run (0: none)")
    args = parser.parse_args()
    devices_part()
    mesh = sharding.learner_mesh(jax.local_devices())
    rows = apex_part(mesh, args.seconds) + impala_part(mesh, args.seconds)
    timing.print_table(["learner (synthetic Pong batches, all local devices)",
                        "updates/s or steps/s", "paper", "ratio"], rows)
    try:
        import envpool  # noqa: F401
    except ImportError:
        print("envpool is not installed: no actor figures")
        return
    from bench_apex import actor_part
    timing.print_table(["path", "full", "bare", "ratio full/bare", "target >= 0.9"],
                       actor_part(args.seconds))
    if args.run_seconds > 0:
        import paper_runs
        paper_runs.run_and_print(["impala", "apex"], args.run_seconds,
                                 paper_runs.actor_threads(os.cpu_count() or 1))


if __name__ == "__main__":
    main()
