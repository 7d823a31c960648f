"""The in-run evaluation thread: it plays when an evaluation falls due, and with
`eval_from_return` it skips those that fall due while the training return is below it."""

import math
import threading

import numpy as np
import pytest

from agents.impala.config import ImpalaConfig
from agents.run.envs import EnvSettings, make_env
from agents.run.evaluation import Evaluator

PERIOD = 10


class LatestParams:
    def latest(self):
        return 0, None


def always_left(params, obs):
    return np.tile([1.0, 0.0], (len(obs), 1))  # CartPole falls within a few dozen steps


def start(train_return, from_return, updates):
    """Starts an evaluator thread and returns once it has read the update count (its first
    evaluation is then due at PERIOD)."""
    counted = threading.Event()

    def count():
        counted.set()
        return updates[0]

    evaluator = Evaluator(lambda: make_env(EnvSettings("CartPole-v1", 2, 2, seed=0)),
                          always_left, LatestParams(), count, lambda: 0, PERIOD,
                          solved_return=math.inf, train_return=train_return,
                          from_return=from_return)
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

    evaluator, stop, thread = start(train_return, 0.0, updates)
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
    evaluator, stop, thread = start(lambda: math.nan, -math.inf, updates)
    try:
        updates[0] = PERIOD
        assert evaluator.results.get(timeout=60)["updates"] == PERIOD
    finally:
        stop.set()
        thread.join(30)


def test_eval_from_return_rejects_nan():
    with pytest.raises(ValueError, match="eval_from_return must be a number or -inf, got nan"):
        ImpalaConfig(eval_from_return=math.nan)
