"""The papers' evaluation protocol on real envpool Atari: no-op starts, the frame cap, whole
unclipped games, a fixed episode count on seeds apart from training, and the action rules."""

import itertools
import threading

import numpy as np
import pytest

from agents.registry import paper_protocol
from agents.run.envs import EnvSettings, make_env
from agents.run.evaluation import (
    EvalProtocol,
    config_protocol,
    play_episodes,
    select_actions,
)
from agents.run.seeds import PROTOCOL_START, RunSeeds

TRAIN = EnvSettings("Pong-v5", num_envs=4, batch_size=2, seed=0, episodic_life=True,
                    reward_clip=True, noop_max=30)


def random_policy(num_actions, seed=0):
    rng = np.random.default_rng(seed)
    return lambda params, obs: rng.normal(size=(len(obs), num_actions))


def test_protocol_envs_are_whole_unclipped_games_with_noops_and_the_cap():
    protocol = paper_protocol("apex")
    settings = protocol.env_settings(TRAIN, seed=123)
    kwargs = settings.envpool_kwargs()
    assert (protocol.episodes, protocol.noop_max, protocol.max_episode_frames) == (30, 30,
                                                                                   108_000)
    assert kwargs["num_envs"] == kwargs["batch_size"] == 30  # one episode per env, synchronous
    assert kwargs["episodic_life"] is False and kwargs["reward_clip"] is False
    assert kwargs["noop_max"] == 30 and kwargs["max_episode_steps"] == 27_000  # 108K frames / 4
    assert kwargs["use_fire_reset"] is False  # the papers press no FIRE for the agent
    fired = EvalProtocol(fire_reset=True).env_settings(TRAIN, seed=123).envpool_kwargs()
    assert fired["use_fire_reset"] is True
    env = make_env(settings)
    try:
        assert env.config["episodic_life"] is False and env.config["reward_clip"] is False
        assert env.config["noop_max"] == 30 and env.config["max_episode_steps"] == 27_000
    finally:
        env.close()


def test_noop_starts_make_different_first_frames_and_one_noop_does_not():
    def first_frames(noop_max):
        env = make_env(EvalProtocol(episodes=8, noop_max=noop_max).env_settings(TRAIN, seed=7))
        try:
            obs, _ = env.reset()
        finally:
            env.close()
        return {obs[i].tobytes() for i in range(len(obs))}

    assert len(first_frames(1)) == 1  # every env starts after the same single no-op
    assert len(first_frames(30)) > 1  # random 1..30 no-ops: different starts


def test_the_cap_ends_every_episode_at_its_frame_count():
    protocol = EvalProtocol(episodes=3, action_rule="sample", max_episode_frames=400)
    env = make_env(protocol.env_settings(TRAIN, seed=11))
    try:
        out = protocol.play(env, random_policy(env.action_space.n), None,
                            np.random.default_rng(0))
    finally:
        env.close()
    # 400 frames = 100 agent steps; a random Pong player loses no game that fast.
    np.testing.assert_array_equal(out.steps, [100, 100, 100])
    assert np.all(out.returns <= 0) and np.all(out.returns >= -21)


def lives_at_first_end(settings, seed=0):
    """Breakout (5 lives) with random actions: `lives` when the first episode ends."""
    env = make_env(settings)
    rng = np.random.default_rng(seed)
    try:
        env.reset()
        while True:
            _, _, terminated, truncated, info = env.step(rng.integers(4, size=1).astype(np.int32))
            if terminated[0] or truncated[0]:
                return int(info["lives"][0])
    finally:
        env.close()


def test_a_lost_life_ends_a_training_episode_but_not_an_evaluation_episode():
    import dataclasses

    train = dataclasses.replace(TRAIN, env_id="Breakout-v5", num_envs=1, batch_size=1)
    assert lives_at_first_end(train) == 4  # training: episodic life
    protocol = EvalProtocol(episodes=1)
    assert lives_at_first_end(protocol.env_settings(train, seed=5)) == 0  # the whole game


@pytest.mark.parametrize("seed", [0, 5, 2**31 - 1])
@pytest.mark.parametrize("num_actors,envs_per_actor,eval_envs", [(2, 16, 10), (180, 2, 10)])
def test_protocol_seeds_are_disjoint_from_training_and_between_evaluations(
        seed, num_actors, envs_per_actor, eval_envs):
    seeds = RunSeeds(seed, num_actors, envs_per_actor, eval_envs)
    training = [seeds.eval_envs_seed() + eval_envs]
    for restart, actor in itertools.product(range(3), range(num_actors)):
        training.append(seeds.actor_envs_seed(actor, restart) + envs_per_actor)
    assert max(training) <= PROTOCOL_START  # every training seed is below the protocol's
    blocks = [range(seeds.protocol_envs_seed(e, 30), seeds.protocol_envs_seed(e, 30) + 30)
              for e in range(50)]
    flat = np.concatenate([np.arange(b.start, b.stop) for b in blocks])
    assert flat.min() >= PROTOCOL_START and flat.max() < 2**31
    assert len(np.unique(flat)) == len(flat)
    assert seeds.protocol_envs_seed(0, 30) != RunSeeds(seed + 1, 2, 16, 10).protocol_envs_seed(
        0, 30)
    states = {tuple(seeds.protocol_actions(e).generate_state(2)) for e in range(5)}
    assert len(states | {tuple(seeds.eval_actions().generate_state(2))}) == 6


def test_action_rules():
    rng = np.random.default_rng(0)
    scores = np.array([[0.0, 2.0, 1.0]] * 20_000)
    np.testing.assert_array_equal(select_actions(scores, "greedy"), 1)
    np.testing.assert_array_equal(select_actions(scores, "epsilon_greedy", 0.0), 1)
    eps = select_actions(scores, "epsilon_greedy", 0.3, rng)
    # P(not greedy) = epsilon * 2/3
    assert abs(np.mean(eps != 1) - 0.2) < 0.015
    sampled = select_actions(scores, "sample", rng=rng)
    probs = np.exp(scores[0]) / np.exp(scores[0]).sum()
    np.testing.assert_allclose(np.bincount(sampled, minlength=3) / len(sampled), probs,
                               atol=0.015)


def test_bad_protocol_values_raise_naming_them():
    with pytest.raises(ValueError, match="rule must be one of"):
        select_actions(np.zeros((1, 2)), "softmax")
    with pytest.raises(ValueError, match="needs rng"):
        select_actions(np.zeros((1, 2)), "sample")
    with pytest.raises(ValueError, match="episodes must be"):
        EvalProtocol(episodes=0)
    with pytest.raises(ValueError, match="noop_max must be >= 1"):
        EvalProtocol(noop_max=0)
    with pytest.raises(ValueError, match="agent must be one of"):
        paper_protocol("dqn")


def test_each_paper_and_training_runs_get_their_action_rule():
    from agents.apex.config import ApexConfig
    from agents.impala.config import ImpalaConfig

    assert paper_protocol("impala").action_rule == "sample"
    assert paper_protocol("impala", greedy=True).action_rule == "greedy"
    assert (paper_protocol("apex", epsilon=0.05).action_rule,
            paper_protocol("apex", epsilon=0.05).epsilon) == ("epsilon_greedy", 0.05)
    assert paper_protocol("apex").epsilon == 0.001 == ApexConfig().eval_epsilon  # the default
    assert paper_protocol("apex", epsilon=0.0).epsilon == 0.0  # greedy, when asked
    impala = config_protocol(ImpalaConfig(eval_action="sample", eval_episodes=7))
    apex = config_protocol(ApexConfig(eval_epsilon=0.05))
    assert (impala.action_rule, impala.episodes, impala.fire_reset) == ("sample", 7, False)
    assert config_protocol(ImpalaConfig(fire_reset=True)).fire_reset  # as the run trains
    assert (apex.action_rule, apex.epsilon) == ("epsilon_greedy", 0.05)
    with pytest.raises(ValueError, match="eval_action must be one of"):
        ImpalaConfig(eval_action="argmax")


def test_play_episodes_counts_each_env_until_its_first_end():
    env = make_env(EnvSettings("CartPole-v1", num_envs=5, batch_size=5, seed=0))
    try:
        out = play_episodes(env, random_policy(2), None, "greedy")
    finally:
        env.close()
    np.testing.assert_array_equal(out.returns, out.steps)  # CartPole: reward 1 a step
    assert np.all(out.steps >= 8) and np.all(out.steps <= 500)


def test_play_episodes_abandons_the_episodes_once_stop_is_set():
    stop, calls = threading.Event(), []

    def policy(params, obs):
        calls.append(1)
        if len(calls) == 3:
            stop.set()
        return np.zeros((len(obs), 2))

    env = make_env(EnvSettings("CartPole-v1", num_envs=2, batch_size=2, seed=0))
    try:
        assert play_episodes(env, policy, None, "greedy", stop=stop) is None
    finally:
        env.close()
    assert len(calls) == 3  # a CartPole episode lasts at least 8 steps
