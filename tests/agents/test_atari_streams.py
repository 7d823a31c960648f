"""The actors' data on a real Atari game, checked against the game itself.

Each actor runs as in a run (async envpool, its jitted policy, its stream builder); then each
env's recorded actions are replayed in a fresh synchronous env seeded as that env was: the
recorded frames and rewards must be the game's own, step for step. This is what CartPole
cannot show (its reward is 1 at every step, and its observations are tiny): a frame paired
with the wrong action, or a reward with the wrong step, would only show on a game.
"""

import threading

import dataclasses
import jax
import numpy as np

from agents.apex.builder import make_actor as make_apex_actor
from agents.apex.builder import make_network as make_q_network
from agents.apex.config import ApexConfig
from agents.impala.actor import make_policy
from agents.impala.builder import make_actors, make_network, make_queue
from agents.impala.config import ImpalaConfig
from agents.run.envs import actor_env_settings, env_info, make_env
from agents.run.param_server import ParamServer
from agents.run.stats import RunStats

ATARI = dict(env="Pong-v5", num_actors=1, envs_per_actor=4, actor_batch_size=2,
             noop_max=30, max_episode_frames=108_000, run_dir="unused")


def replay_in_fresh_env(config, env_index: int, actions: np.ndarray):
    """(frames [len(actions) + 1, 4, 84, 84], rewards [len(actions)]) of env `env_index` of
    actor 0, replayed with `actions` from its reset in a synchronous env with its seed."""
    settings = actor_env_settings(config, 0)
    env = make_env(dataclasses.replace(settings, num_envs=1, batch_size=1,
                                       seed=settings.seed + env_index))
    try:
        obs, _ = env.reset()
        frames, rewards = [obs[0]], []
        for action in actions:
            obs, reward, terminated, truncated, _ = env.step(np.array([action], np.int32))
            assert not (terminated[0] or truncated[0])  # a Pong episode outlasts this test
            frames.append(obs[0])
            rewards.append(reward[0])
        return np.stack(frames), np.array(rewards, np.float32)
    finally:
        env.close()


def run_actor(actor, stop_when, timeout_s: float = 120.0) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,))
    thread.start()
    try:
        deadline = threading.Event()
        for _ in range(int(timeout_s / 0.05)):
            if stop_when():
                break
            deadline.wait(0.05)
        else:
            raise AssertionError("the actor produced too little within the timeout")
    finally:
        stop.set()
        thread.join(30)


def test_impala_unrolls_on_pong_are_the_games_own_frames_and_rewards():
    config = ImpalaConfig(**ATARI, torso="impala_shallow", unroll_length=20)
    info = env_info(actor_env_settings(config, 0))
    network = make_network(config, info)
    server = ParamServer()
    server.publish(network.init(jax.random.PRNGKey(0), np.zeros((1, *info.obs_shape),
                                                                 info.obs_dtype)))
    unrolls = make_queue(dataclasses.replace(config, queue_size=64))
    [actor] = make_actors(config, info, make_policy(network), unrolls, server, RunStats())
    run_actor(actor, lambda: len(unrolls) >= 4 * 3)
    by_env: dict[int, list] = {}
    while len(unrolls):
        unroll = unrolls.get_batch(1, threading.Event())
        by_env.setdefault(int(unroll.env_ids[0]), []).append(unroll)
    for env_index, parts in by_env.items():
        assert all(p.masks.all() for p in parts)  # no episode end: every step is real
        actions = np.concatenate([p.actions[0] for p in parts])  # [n * T]
        frames = np.concatenate([parts[0].obs[0, :1]] + [p.obs[0, 1:] for p in parts])
        rewards = np.concatenate([p.rewards[0] for p in parts])
        game_frames, game_rewards = replay_in_fresh_env(config, env_index, actions)
        np.testing.assert_array_equal(frames, game_frames, err_msg=f"env {env_index} frames")
        np.testing.assert_array_equal(rewards, game_rewards, err_msg=f"env {env_index}")
    assert sum(len(p) for p in by_env.values()) >= 12


def test_apex_transitions_on_pong_are_the_games_own_frames_and_rewards():
    """Ape-X's n-step transitions: obs, action and next_obs n steps later, with the discounted
    sum of the n rewards in between, each as the game gives them."""
    config = ApexConfig(**ATARI, torso="nature", n_step=3, discount=0.99,
                        local_buffer_size=8, actor_update_period=1000)
    info = env_info(actor_env_settings(config, 0))
    network = make_q_network(config, info)
    server = ParamServer()
    server.publish(network.init(jax.random.PRNGKey(0), np.zeros((1, *info.obs_shape),
                                                                 info.obs_dtype)))

    class Recorder:  # stands in for the replay: keeps every batch the actor adds
        def __init__(self):
            self.adds = []

        def add(self, transitions, priorities, streams):
            self.adds.append((transitions, streams))

    recorder = Recorder()
    actor = make_apex_actor(config, info, 0, jax.jit(network.apply), recorder, server,
                            RunStats())
    run_actor(actor, lambda: len(recorder.adds) >= 30)
    transitions = {k: np.concatenate([t[k] for t, _ in recorder.adds])
                   for k in recorder.adds[0][0]}
    streams = np.concatenate([s for _, s in recorder.adds])
    checked = 0
    for env_index in np.unique(streams):
        mine = {k: v[streams == env_index] for k, v in transitions.items()}
        # Consecutive transitions of one env start one step apart: their actions are the
        # env's action sequence from its reset.
        actions = mine["action"]
        game_frames, game_rewards = replay_in_fresh_env(config, int(env_index), actions)
        n = config.n_step
        for t in range(len(actions) - n):
            np.testing.assert_array_equal(mine["obs"][t], game_frames[t])
            np.testing.assert_array_equal(mine["next_obs"][t], game_frames[t + n])
            expected = sum(config.discount ** k * game_rewards[t + k] for k in range(n))
            np.testing.assert_allclose(mine["reward"][t], expected, rtol=1e-6)
            checked += 1
    assert checked >= 50
