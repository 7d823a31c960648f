"""IMPALA throughput, against bare peers in the same run, and CartPole to solved.

- actor: frames/s of the full IMPALA actor (sampling, unroll building, bounded queue with a
  consumer draining it) against a bare loop of the same envpool config and the same jitted
  policy that only acts. Target: ratio >= 0.95.
- learner: learner frames/s (T x B agent steps per update) of the jitted V-trace update for the
  shallow and deep IMPALA torsos, with and without GroupNorm, at the paper's T=20, B=32.
- cartpole: wall time and env steps until greedy evaluation reaches 475, median of 3 seeds, for
  each agent of `agents.registry` (Ape-X and IMPALA) side by side.

    python benchmarks/bench_impala.py [--parts actor,learner,cartpole] [--seconds 20]
"""

import statistics
import threading
import time

import timing

import jax
import numpy as np

from agents import registry
from agents.parallel import sharding
from agents.run.envs import actor_env_settings, env_info
from agents.impala.actor import make_policy
from agents.impala.builder import make_actors, make_network, make_queue
from agents.impala.config import ImpalaConfig
from agents.impala.learner import init_state, make_optimizer, make_update
from agents.run.param_server import ParamServer
from agents.run.stats import RunStats
from agent_parts import bare_actor_fps, solve_cartpole

ATARI = ImpalaConfig(env="Pong-v5", num_actors=1, envs_per_actor=16, actor_batch_size=8,
                     torso="impala_shallow")


def full_actor_fps(config, info, policy, server, seconds):
    unrolls, stats, stop = make_queue(config), RunStats(), threading.Event()
    actor, = make_actors(config, info, policy, unrolls, server, stats)  # as the agent's

    def drain(stop):  # a learner that never makes the actor wait
        while unrolls.get_batch(1, stop) is not None:
            pass

    threads = [threading.Thread(target=f, args=(stop,)) for f in (actor.run, drain)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    before, start = stats.get("env_steps"), time.perf_counter()
    time.sleep(seconds)
    fps = (stats.get("env_steps") - before) * 4 / (time.perf_counter() - start)
    stop.set()
    for t in threads:
        t.join()
    return fps


def actor_part(seconds):
    config = ATARI
    info = env_info(actor_env_settings(config, 0))
    network = make_network(config, info)
    params = network.init(jax.random.PRNGKey(0), np.zeros((1,) + info.obs_shape, np.uint8))
    policy, server, key = make_policy(network), ParamServer(), jax.random.PRNGKey(0)
    server.publish(params)
    step = [0]

    def act(obs):
        step[0] += 1
        return np.asarray(policy(params, obs, key, step[0])[0])

    bare, full = [], []
    for _ in range(2):  # alternated, so drift in machine load hits both
        bare.append(bare_actor_fps(config, act, seconds))
        full.append(full_actor_fps(config, info, policy, server, seconds))
    ratio = statistics.median(full) / statistics.median(bare)
    return ["actor frames/s (Pong, shallow, 16 envs, batch 8)", statistics.median(full),
            statistics.median(bare), ratio, timing.verdict(ratio, 0.95)]


def learner_part(seconds):
    rows = []
    info = env_info(actor_env_settings(ATARI, 0))
    rng = np.random.default_rng(0)
    T, B = ATARI.unroll_length, ATARI.batch_size
    batch = dict(obs=rng.integers(0, 256, (B, T + 1) + info.obs_shape, dtype=np.uint8),
                 actions=rng.integers(0, info.num_actions, (B, T)).astype(np.int32),
                 rewards=rng.normal(size=(B, T)).astype(np.float32),
                 discounts=np.full((B, T), 0.99, np.float32),
                 episode_ends=np.zeros((B, T), bool), masks=np.ones((B, T), np.float32),
                 behaviour_logits=rng.normal(size=(B, T, info.num_actions)).astype(np.float32))
    mesh = sharding.learner_mesh(jax.local_devices()[:1])
    on_device = sharding.put_batch(batch, mesh)
    for torso in ("impala_shallow", "impala_resnet"):
        for norm in ("none", "group"):
            config = ImpalaConfig(env="Pong-v5", torso=torso, norm=norm, num_groups=8)
            network = make_network(config, info)
            state = init_state(network, make_optimizer(config),
                               np.zeros(info.obs_shape, np.uint8), jax.random.PRNGKey(0))
            update, zero = make_update(network, config, mesh, state.params)
            state = zero.place_state(state, mesh)
            state, metrics = update(state, on_device)
            jax.block_until_ready(metrics)
            count, start = 0, time.perf_counter()
            while count < 2 or time.perf_counter() - start < seconds / 4:
                state, metrics = update(state, on_device)
                jax.block_until_ready(metrics)
                count += 1
            per_update = (time.perf_counter() - start) / count
            rows.append([torso, norm, per_update * 1e3, T * B / per_update])
            print(f"{torso} {norm}: {per_update * 1e3:.0f} ms/update", flush=True)
    return rows


def main():
    parts, seconds = timing.parse_parts(__doc__, "actor,learner,cartpole")
    if "actor" in parts:
        timing.print_table(["path", "full", "bare", "ratio full/bare", "target"],
                           [actor_part(seconds)])
    if "learner" in parts:
        rows = learner_part(seconds)
        timing.print_table(["torso", "norm", "ms/update", "learner frames/s (T x B / s)"],
                           rows)
    if "cartpole" in parts:
        rows = []
        for spec in registry.AGENTS.values():
            runs = [solve_cartpole(spec.agent, spec.config, spec.name, seed) for seed in range(3)]
            rows.append([spec.name, f"{sum(r[0] for r in runs)}/3",
                         statistics.median(r[1] for r in runs),
                         statistics.median(r[2] for r in runs)])
        timing.print_table(["agent", "solved", "median wall s", "median env steps"], rows)


if __name__ == "__main__":
    main()
