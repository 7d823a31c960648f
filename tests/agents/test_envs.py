"""Tests for agents.run.envs: settings validation, envpool kwargs, spaces and an async loop."""

import dataclasses

import numpy as np
import pytest

from agents.run.envs import EnvSettings, env_info, is_atari, make_env


def test_cartpole_shapes_and_no_atari_kwargs():
    settings = EnvSettings("CartPole-v1", num_envs=3, batch_size=3, seed=1)
    assert not settings.is_atari
    assert set(settings.envpool_kwargs()) == {"num_envs", "batch_size", "seed"}
    info = env_info(settings)
    assert info.obs_shape == (4,) and info.obs_dtype == np.float32 and info.num_actions == 2
    assert not info.is_atari and not info.channels_first and info.max_episode_steps == 500
    obs, _ = make_env(settings).reset()
    assert obs.shape == (3, 4) and obs.dtype == np.float32


def test_cartpole_max_episode_steps_override_reaches_envpool():
    settings = EnvSettings("CartPole-v1", 1, 1, seed=0, max_episode_steps=5)
    env = make_env(settings)
    assert env.config["max_episode_steps"] == 5 and env_info(settings).max_episode_steps == 5


def test_pong_settings_reach_envpool():
    settings = EnvSettings("Pong-v5", num_envs=2, batch_size=2, seed=7, num_threads=1)
    env = make_env(settings)
    config = env.config
    assert config["episodic_life"] is True and config["reward_clip"] is True
    assert config["noop_max"] == 30 and config["repeat_action_probability"] == 0.0
    assert config["frame_skip"] == 4 and config["stack_num"] == 4
    assert config["max_episode_steps"] == 27_000  # 108K frames / frame skip 4
    assert config["img_height"] == config["img_width"] == 84
    assert config["seed"] == 7 and config["num_threads"] == 1
    info = env_info(settings)
    assert info.obs_shape == (4, 84, 84) and info.obs_dtype == np.uint8
    assert info.num_actions == 6 and info.is_atari and info.channels_first
    obs, _ = env.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8


def test_non_default_atari_settings_reach_envpool():
    settings = EnvSettings("Pong-v5", 1, 1, seed=0, episodic_life=False, reward_clip=False,
                           noop_max=5, repeat_action_probability=0.25, frame_skip=2,
                           stack_num=2, max_episode_frames=1_000, img_size=64)
    config = make_env(settings).config
    assert config["episodic_life"] is False and config["reward_clip"] is False
    assert config["noop_max"] == 5 and config["repeat_action_probability"] == 0.25
    assert config["frame_skip"] == 2 and config["max_episode_steps"] == 500
    assert env_info(settings).obs_shape == (2, 64, 64)


def lives_lost_on_noops(fire_reset: bool, episodic_life: bool, steps: int = 300) -> int:
    """Breakout played with NOOP only: its ball is launched by FIRE alone."""
    env = make_env(EnvSettings("Breakout-v5", 1, 1, seed=0, noop_max=1, fire_reset=fire_reset,
                               episodic_life=episodic_life))
    try:
        env.reset()
        lives = []
        for _ in range(steps):
            *_, info = env.step(np.zeros(1, np.int32))
            lives.append(int(info["lives"][0]))
    finally:
        env.close()
    return int(np.sum(np.diff(lives) < 0))


def test_fire_reset_is_off_by_default_as_in_the_papers_and_presses_fire_when_on():
    assert EnvSettings("Breakout-v5", 1, 1, seed=0).envpool_kwargs()["use_fire_reset"] is False
    assert lives_lost_on_noops(fire_reset=False, episodic_life=True) == 0  # the ball never moves
    assert lives_lost_on_noops(fire_reset=False, episodic_life=False) == 0
    # on: FIRE after the reset and, with life-loss episodes, after every lost life
    assert lives_lost_on_noops(fire_reset=True, episodic_life=True) >= 5
    assert lives_lost_on_noops(fire_reset=True, episodic_life=False) == 1  # only at the start


def test_max_episode_frames_counts_frames():
    # 40 frames at frame skip 4 are 10 agent steps; envpool's max_episode_steps counts steps.
    env = make_env(EnvSettings("Pong-v5", 1, 1, seed=0, max_episode_frames=40))
    env.reset()
    for step in range(1, 11):
        _, _, terminated, truncated, info = env.step(np.zeros(1, np.int32))
        assert truncated[0] == (step == 10) and not terminated[0]
    assert info["elapsed_step"][0] == 10


def test_evaluation_settings_report_real_scores():
    train = EnvSettings("Pong-v5", num_envs=8, batch_size=4, seed=100, noop_max=10)
    evaluation = train.for_evaluation(num_envs=3)
    assert not evaluation.episodic_life and not evaluation.reward_clip
    assert evaluation.num_envs == evaluation.batch_size == 3
    assert evaluation.seed == 108  # after the training envs' seeds 100..107
    assert evaluation.noop_max == 10 and evaluation.max_episode_frames == 108_000
    assert train.for_evaluation(4, batch_size=2, seed=5).seed == 5
    config = make_env(evaluation).config
    assert config["episodic_life"] is False and config["reward_clip"] is False


def test_is_atari():
    assert is_atari("Pong-v5") and is_atari("Breakout-v5")
    assert not is_atari("CartPole-v1") and not is_atari("NoSuchEnv-v0")


@pytest.mark.parametrize("change, match", [
    (dict(env_id="Pongg-v5"), r"env_id 'Pongg-v5'.*Pong-v5"),
    (dict(num_envs=0), "num_envs"),
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=5), "batch_size"),
    (dict(seed=-1), "seed"),
    (dict(seed=2**31 - 2), "seed"),
    (dict(num_threads=0), "num_threads"),
    (dict(noop_max=0), "noop_max"),
    (dict(noop_max=-3), "noop_max"),
    (dict(repeat_action_probability=1.5), "repeat_action_probability"),
    (dict(frame_skip=0), "frame_skip"),
    (dict(stack_num=0), "stack_num"),
    (dict(img_size=0), "img_size"),
    (dict(max_episode_frames=3), "max_episode_frames"),
    (dict(max_episode_steps=100), "max_episode_frames instead"),
])
def test_validation(change, match):
    base = dict(env_id="Pong-v5", num_envs=4, batch_size=2, seed=0)
    with pytest.raises(ValueError, match=match):
        EnvSettings(**(base | change))


def test_validation_classic_control_and_frozen():
    with pytest.raises(ValueError, match="max_episode_steps"):
        EnvSettings("CartPole-v1", 1, 1, 0, max_episode_steps=0)
    EnvSettings("CartPole-v1", 1, 1, 0, noop_max=0)  # Atari settings are ignored here
    settings = EnvSettings("CartPole-v1", 1, 1, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 3


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pong-v5"])
def test_async_loop_with_batch_smaller_than_pool(env_id):
    settings = EnvSettings(env_id, num_envs=4, batch_size=2, seed=0)
    info = env_info(settings)
    env = make_env(settings)
    env.async_reset()
    seen = set()
    for _ in range(40):
        obs, rewards, terminated, truncated, step_info = env.recv()
        env_ids = step_info["env_id"]
        assert obs.shape == (2,) + info.obs_shape and obs.dtype == info.obs_dtype
        assert rewards.shape == terminated.shape == truncated.shape == (2,)
        seen.update(env_ids.tolist())
        env.send(np.zeros(2, np.int32), env_ids)
    assert seen == {0, 1, 2, 3}
