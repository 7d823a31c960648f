"""Greedy evaluation episodes on a separate envpool instance."""

from typing import Any, Callable

import numpy as np


def evaluate(env: Any, policy: Callable, params: Any) -> np.ndarray:
    """Plays one greedy episode in each env of a synchronous envpool; returns `[num_envs]` returns.

    Each env's return stops counting at its first episode end (envpool resets it on the next
    step, which is then ignored).
    """
    obs, _ = env.reset()
    returns = np.zeros(env.num_envs)
    done = np.zeros(env.num_envs, bool)
    while not done.all():
        actions = np.argmax(np.asarray(policy(params, obs)), axis=-1).astype(np.int32)
        obs, reward, terminated, truncated, _ = env.step(actions)
        returns += np.where(done, 0.0, reward)
        done |= terminated | truncated
    return returns
