"""Helpers the agent benchmarks share: the bare envpool loop they are measured against, an
Atari-like replay filler, and a CartPole run to the solved line."""

import time

import numpy as np

from agents.run.envs import actor_env_settings, make_env
from agents.run.flags import config_from_flagfile


def bare_actor_fps(config, act, seconds):
    """Frames/s of envpool and `act(obs) -> actions` with nothing else (the bare peer)."""
    env = make_env(actor_env_settings(config, 0))
    env.async_reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, _, _, _, info = env.recv()
        actions = act(obs)
        env.send(actions, info["env_id"])
        steps += len(actions)
    elapsed = time.perf_counter() - start
    env.close()
    return steps * 4 / elapsed  # frames: 4 per agent step


def fill_replay(replay, info, count, rng):
    """Adds `count` transitions of Atari-like streams (each step shifts the stack by a frame)."""
    frames = rng.integers(0, 256, size=(count + 8, 84, 84), dtype=np.uint8)
    for start in range(0, count, 256):
        idx = np.arange(start, min(start + 256, count))
        obs = np.stack([frames[i:i + 4] for i in idx])
        next_obs = np.stack([frames[i + 3:i + 7] for i in idx])
        replay.add(dict(obs=obs, action=rng.integers(0, 6, len(idx)).astype(np.int32),
                        reward=rng.normal(size=len(idx)).astype(np.float32),
                        discount=np.full(len(idx), 0.97, np.float32), next_obs=next_obs),
                   rng.uniform(size=len(idx)), np.zeros(len(idx), np.int64))


def solve_cartpole(agent_cls, config_cls, name, seed):
    config = config_from_flagfile(config_cls, f"experiments/configs/{name}_cartpole.cfg",
                                  seed=seed, log_period_s=30,
                                  run_dir=f"/tmp/bench_{name}_cartpole_{seed}")
    summary = agent_cls(config, print_fn=lambda *a, **k: None).run()
    print(f"{name} seed {seed}: solved={summary['solved']} wall {summary['wall_s']:.0f} s, "
          f"env steps {summary['env_steps']:,}", flush=True)
    return summary["solved"], summary["wall_s"], summary["env_steps"]
