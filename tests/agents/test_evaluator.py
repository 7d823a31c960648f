"""The in-run evaluation thread: it plays when an evaluation falls due, with
`eval_from_return` it skips those that fall due while the training return is below it, and with
a confirmation it stops the run only when more games with the same parameters also reach the
solved line."""

import dataclasses
import math
import threading

import numpy as np
import pytest

from agents.impala.config import ImpalaConfig
from agents.run.envs import EnvSettings, eval_env_settings, make_env
from agents.run.evaluation import (Episodes, Evaluator, _result, config_protocol,
                                   confirm_protocol, play_episodes)
from agents.run.protocol_play import protocol_envs
from agents.run.seeds import run_seeds

PERIOD = 10


class LatestParams:
    def latest(self):
        return 0, None


def always_left(params, obs):
    return np.tile([1.0, 0.0], (len(obs), 1))  # CartPole falls within a few dozen steps


def start(updates, policy=always_left, solved_return=math.inf, **kwargs):
    """Starts an evaluator thread on 2 CartPole envs and returns once it has read the update
    count `updates[0]` (its first evaluation is then due at PERIOD)."""
    counted = threading.Event()

    def count():
        counted.set()
        return updates[0]

    evaluator = Evaluator(lambda: make_env(EnvSettings("CartPole-v1", 2, 2, seed=0)),
                          policy, LatestParams(), count, lambda: 0, PERIOD, solved_return,
                          **kwargs)
    stop = threading.Event()
    thread = threading.Thread(target=evaluator.run, args=(stop,), daemon=True)
    thread.start()
    assert counted.wait(30), "the evaluator never started"
    return evaluator, stop, thread


def test_evaluations_due_below_the_training_return_are_skipped():
    updates, train = [0], [-5.0]
    asked = threading.Event()

    def train_return():
        asked.set()
        return train[0]

    evaluator, stop, thread = start(updates, train_return=train_return, from_return=0.0)
    try:
        updates[0] = PERIOD
        assert asked.wait(30), "the evaluator never looked at the training return"
        train[0] = 1.0
        updates[0] = 2 * PERIOD
        first = evaluator.results.get(timeout=60)
        assert first["updates"] == 2 * PERIOD  # the one due at PERIOD (return -5) was skipped
        assert first["mean_return"] > 0
    finally:
        stop.set()
        thread.join(30)


def test_without_a_threshold_evaluations_start_before_any_training_episode():
    updates = [0]
    evaluator, stop, thread = start(updates, train_return=lambda: math.nan)
    try:
        updates[0] = PERIOD
        assert evaluator.results.get(timeout=60)["updates"] == PERIOD
    finally:
        stop.set()
        thread.join(30)


def test_an_evaluations_row_holds_the_spread_of_its_games_and_their_lengths():
    row = _result(7, 70, Episodes(np.array([1.0, 3.0, 8.0]), np.array([100, 200, 27_000])))
    assert (row["mean_return"], row["min_return"], row["max_return"]) == (4.0, 1.0, 8.0)
    assert row["std_return"] == pytest.approx(np.sqrt(13.0))  # sample std: (9 + 1 + 16) / 2
    assert row["episodes"] == 3
    assert (row["mean_steps"], row["max_steps"]) == (9_100.0, 27_000.0)  # one game at the cap
    one = _result(7, 70, Episodes(np.array([5.0]), np.array([40])))
    assert one["min_return"] == one["mean_return"] == one["max_return"] == 5.0
    assert math.isnan(one["std_return"])  # one game has no spread, not a spread of 0


def test_eval_from_return_rejects_nan():
    with pytest.raises(ValueError, match="eval_from_return must be a number or -inf, got nan"):
        ImpalaConfig(eval_from_return=math.nan)


def balance(params, obs):
    """Pushes the cart under the pole: CartPole games of hundreds of steps."""
    push_right = obs[:, 2] + 0.5 * obs[:, 3] > 0  # pole angle and angular velocity
    return np.stack([~push_right, push_right], axis=1).astype(np.float32)


def balance_pairs_only(params, obs):
    """Balances in the 2-env in-run evaluation, falls at once in the 5-env confirmation."""
    return balance(params, obs) if len(obs) == 2 else always_left(params, obs)


def confirming_evaluator(policy):
    """An evaluator thread, started, with an evaluation due, confirmed by 5 more games."""
    def confirm(params, stop):
        env = make_env(EnvSettings("CartPole-v1", 5, 5, seed=100))
        try:
            return play_episodes(env, policy, params, stop=stop)
        finally:
            env.close()

    updates = [0]
    evaluator, stop, thread = start(updates, policy, solved_return=50.0, confirm=confirm)
    updates[0] = PERIOD
    return evaluator, stop, thread


def test_a_solved_evaluation_confirmed_by_more_games_stops_the_run():
    evaluator, stop, thread = confirming_evaluator(balance)
    thread.join(120)
    assert not thread.is_alive() and evaluator.solved.is_set() and stop.is_set()
    first, confirmation = evaluator.results.get_nowait(), evaluator.results.get_nowait()
    assert (first["episodes"], confirmation["episodes"]) == (2, 5)
    assert first["updates"] == confirmation["updates"] == PERIOD
    assert first["mean_return"] >= 50 and confirmation["mean_return"] >= 50
    # CartPole pays 1 a step: each evaluation's games last as long as they score
    assert first["mean_steps"] == first["mean_return"]
    assert confirmation["max_steps"] == confirmation["max_return"]
    assert evaluator.solved_at == (PERIOD, 0, None)  # updates, env_steps, params


def test_a_solved_evaluation_the_confirmation_does_not_reach_leaves_the_run_going():
    evaluator, stop, thread = confirming_evaluator(balance_pairs_only)
    try:
        first, confirmation = evaluator.results.get(timeout=60), evaluator.results.get(timeout=60)
        assert first["mean_return"] >= 50 and first["episodes"] == 2
        assert confirmation["mean_return"] < 50 and confirmation["episodes"] == 5
        assert not evaluator.solved.is_set() and not stop.is_set() and thread.is_alive()
        assert evaluator.solved_at is None
    finally:
        stop.set()
        thread.join(30)


def test_the_confirmation_plays_the_protocols_games_on_envs_of_their_own():
    config = ImpalaConfig(env="Pong-v5", solved_confirm_episodes=30, eval_action="sample")
    protocol = confirm_protocol(config)
    assert protocol == dataclasses.replace(config_protocol(config), episodes=30)
    settings, _ = protocol_envs(config, protocol)
    assert settings.num_envs == 30 and not settings.episodic_life and not settings.reward_clip
    assert settings.seed == run_seeds(config).protocol_envs_seed(0, 30)
    assert settings.seed > eval_env_settings(config).seed + config.eval_episodes
    assert confirm_protocol(ImpalaConfig()) is None


def test_solved_confirm_episodes_must_be_zero_or_more():
    with pytest.raises(ValueError, match="solved_confirm_episodes must be >= 0, got -1"):
        ImpalaConfig(solved_confirm_episodes=-1)
