"""Ape-X throughput, each path against its bare peer in the same run, and CartPole to solved.

- actor: frames/s of the full actor (epsilon-greedy, n-step builder and priorities, local buffer,
  replay adds into frame storage) against a bare loop of the same envpool config and the same
  jitted Nature-torso policy that only acts. Target: ratio >= 0.95.
- learner: updates/s of the full learner (prefetch thread sampling the replay, host-to-device
  transfer, update, priority write-back, parameter publish) against the bare jitted update on a
  batch already on the device. Target: ratio >= 0.9.
- networks: the bare jitted update (batch 32) of the Pong configs' networks, timed in turns:
  the dueling Nature network (`apex_pong_cpu.cfg`) against the IMPALA shallow torso with
  256-unit dueling streams (`apex_pong_cpu_shallow.cfg`), with and without GroupNorm after
  each conv (`apex_pong_cpu_group_norm.cfg`). Record only.
- batches: the bare jitted update of the shallow network at batch 32, 64 and 128, timed in
  turns: updates/s and sampled transitions/s, the price of a larger batch. Record only.
- cartpole: wall time and env steps until greedy evaluation reaches 475, median of 3 seeds.

    python benchmarks/bench_apex.py [--parts actor,learner,networks,batches,cartpole]
                                    [--seconds 20]
"""

import dataclasses
import statistics
import threading
import time

import timing
from agent_parts import bare_actor_fps, fill_replay, solve_cartpole

import jax
import numpy as np

from agents.parallel import sharding
from agents.apex.agent import ApexAgent
from agents.apex.builder import make_actor, make_network
from agents.apex.replay import make_replay
from agents.apex.config import ApexConfig
from agents.apex.learner import ApexLearner, init_state, make_optimizer, make_update
from agents.run.envs import actor_env_settings, env_info
from agents.run.param_server import ParamServer
from agents.run.stats import RunStats

ATARI = ApexConfig(env="Pong-v5", num_actors=1, envs_per_actor=16, actor_batch_size=8,
                   replay_capacity=100_000, min_replay_size=2_000, batch_size=32,
                   dueling=True, head_hidden_sizes=(512,))
# The networks of the Pong CPU configs, as changes to ATARI.
NETWORKS = {
    "nature, dueling streams 512": {},
    "impala_shallow, dueling streams 256": dict(torso="impala_shallow", head_hidden_sizes=(256,)),
    "impala_shallow + GroupNorm, streams 256": dict(torso="impala_shallow",
                                                    head_hidden_sizes=(256,), norm="group"),
}


def full_actor_fps(config, policy, param_server, info, seconds):
    replay, stats = make_replay(config, info), RunStats()
    # A run's steady state: the replay full, so every page of its frame ring is mapped. A fresh
    # ring costs a page fault per 4 KB written, which a run pays for its first fill only.
    fill_replay(replay, info, config.replay_capacity, np.random.default_rng(0))
    actor = make_actor(config, info, 0, policy, replay, param_server, stats)  # as the agent's
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,))
    thread.start()
    time.sleep(1.0)  # past envpool start-up
    before, start = stats.get("env_steps"), time.perf_counter()
    time.sleep(seconds)
    fps = (stats.get("env_steps") - before) * 4 / (time.perf_counter() - start)
    stop.set()
    thread.join()
    return fps


def actor_part(seconds):
    config, info = ATARI, env_info(actor_env_settings(ATARI, 0))
    network = make_network(config, info)
    params = network.init(jax.random.PRNGKey(0), np.zeros((1,) + info.obs_shape, np.uint8))
    policy = jax.jit(network.apply)
    server = ParamServer()
    server.publish(params)
    bare, full = [], []
    for _ in range(2):  # alternated, so drift in machine load hits both
        bare.append(bare_actor_fps(config, lambda obs: np.argmax(
            np.asarray(policy(params, obs)), axis=-1).astype(np.int32), seconds))
        full.append(full_actor_fps(config, policy, server, info, seconds))
    ratio = statistics.median(full) / statistics.median(bare)
    return [["actor frames/s (Pong, Nature, 16 envs, batch 8)", statistics.median(full),
             statistics.median(bare), ratio, timing.verdict(ratio, 0.95)]]


def bare_update(config, network, state, replay, mesh):
    """A call that applies the jitted update once to one batch already on the device and
    returns its new priorities (not waited for); the learner state is carried between calls."""
    update, zero = make_update(network, config, mesh, state.params)
    sample = replay.sample(config.batch_size)
    batch = sharding.put_batch(dict(sample.transitions, weights=sample.weights), mesh)
    carried = [zero.place_state(jax.tree.map(np.copy, state), mesh)]

    def step():
        carried[0], _, priorities = update(carried[0], batch)
        return priorities

    return step


def bare_updates(variants, seconds):
    """Median seconds per bare update of each config in `variants` (name: changes to ATARI),
    timed in turns, and each network's parameter count."""
    info = env_info(actor_env_settings(ATARI, 0))
    mesh = sharding.learner_mesh(jax.local_devices()[:1])
    replay = make_replay(ATARI, info)
    fill_replay(replay, info, 5_000, np.random.default_rng(0))
    steps, sizes = {}, {}
    for name, changes in variants.items():
        config = dataclasses.replace(ATARI, **changes)
        network = make_network(config, info)
        state = init_state(network, make_optimizer(config), np.zeros(info.obs_shape, np.uint8),
                           jax.random.PRNGKey(0))
        sizes[name] = sum(p.size for p in jax.tree.leaves(state.params))
        steps[name] = bare_update(config, network, state, replay, mesh)
    # About `seconds` of the slowest variant's updates, all variants in turns.
    repeats = max(10, int(seconds * 5))
    return timing.interleaved_medians(steps, repeats=repeats), sizes


def networks_part(seconds):
    medians, sizes = bare_updates(NETWORKS, seconds)
    first = next(iter(NETWORKS))
    return [[name, f"{sizes[name]:,}", 1 / medians[name], medians[first] / medians[name]]
            for name in NETWORKS]


def batches_part(seconds):
    shallow = NETWORKS["impala_shallow, dueling streams 256"]
    batches = {size: dict(shallow, batch_size=size) for size in (32, 64, 128)}
    medians, _ = bare_updates(batches, seconds / 2)
    return [[size, 1 / medians[size], size / medians[size], medians[size] / medians[32]]
            for size in batches]


def learner_part(seconds):
    config, info = ATARI, env_info(actor_env_settings(ATARI, 0))
    network = make_network(config, info)
    mesh = sharding.learner_mesh(jax.local_devices()[:1])
    replay = make_replay(config, info)
    fill_replay(replay, info, 20_000, np.random.default_rng(0))
    state = init_state(network, make_optimizer(config), np.zeros(info.obs_shape, np.uint8),
                       jax.random.PRNGKey(0))

    # Bare: the jitted update alone on one batch already on the device.
    step = bare_update(config, network, state, replay, mesh)
    step()  # compiles
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        priorities = step()
        count += 1
    jax.block_until_ready(priorities)
    bare_ups = count / (time.perf_counter() - start)

    # Full: the learner's own threads, sampling, transferring and writing priorities back.
    learner = ApexLearner(config, network, replay, ParamServer(), state, mesh,
                          rate_limiter=replay.rate_limiter)
    stop = threading.Event()
    threads = [threading.Thread(target=f, args=(stop,)) for f in (learner.prefetch, learner.run)]
    for t in threads:
        t.start()
    while learner.updates < 3:  # past compilation
        time.sleep(0.05)
    before, start = learner.updates, time.perf_counter()
    time.sleep(seconds)
    full_ups = (learner.updates - before) / (time.perf_counter() - start)
    stop.set()
    for t in threads:
        t.join()
    ratio = full_ups / bare_ups
    return [[f"learner updates/s (Nature, batch {config.batch_size})", full_ups, bare_ups, ratio,
             timing.verdict(ratio, 0.9)]]


def cartpole_part():
    return [solve_cartpole(ApexAgent, ApexConfig, "apex", seed) for seed in range(3)]


def main():
    parts, seconds = timing.parse_parts(__doc__, "actor,learner,cartpole")
    if "networks" in parts:
        timing.print_table(["network (Pong, batch 32)", "params", "updates/s", "x nature"],
                           networks_part(seconds))
    if "batches" in parts:
        timing.print_table(["batch (shallow network)", "updates/s", "transitions/s",
                            "x batch 32 time"], batches_part(seconds))
    rows = []
    if "actor" in parts:
        rows += actor_part(seconds)
    if "learner" in parts:
        rows += learner_part(seconds)
    if rows:
        timing.print_table(["path", "full", "bare", "ratio full/bare", "target"], rows)
    if "cartpole" in parts:
        runs = cartpole_part()
        print(f"CartPole to solved (median of 3 seeds): wall "
              f"{statistics.median(r[1] for r in runs):.0f} s, env steps "
              f"{statistics.median(r[2] for r in runs):,.0f}, solved {sum(r[0] for r in runs)}/3")


if __name__ == "__main__":
    main()
