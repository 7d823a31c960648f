"""Greedy evaluation episodes on a separate envpool instance."""

import queue
import threading
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


class Evaluator:
    """Evaluation thread: greedy episodes with the latest parameters every `period` updates.

    Args:
      make_env: builds the synchronous evaluation envpool (one episode per env).
      policy: jitted `(params, obs) -> scores [B, A]` whose argmax is the greedy action.
      param_server: source of the latest parameters.
      updates: returns the learner's update count.
      env_steps: returns the run's env step count (logged with each result).
      period: learner updates between evaluations.
      solved_return: a mean return at or above this sets `solved` and stops the run.
    """

    def __init__(self, make_env: Callable, policy: Callable, param_server: Any,
                 updates: Callable[[], int], env_steps: Callable[[], int], period: int,
                 solved_return: float):
        self._make_env, self._policy, self._param_server = make_env, policy, param_server
        self._updates, self._env_steps = updates, env_steps
        self._period, self._solved_return = period, solved_return
        self.results: queue.Queue = queue.Queue()
        self.solved = threading.Event()

    def _next_due(self) -> int:
        return (self._updates() // self._period + 1) * self._period

    def run(self, stop: threading.Event) -> None:
        env = self._make_env()
        due = self._next_due()
        try:
            while not stop.is_set():
                if self._updates() < due:
                    stop.wait(0.05)
                    continue
                updates, env_steps = self._updates(), self._env_steps()
                _, params = self._param_server.latest()
                returns = evaluate(env, self._policy, params)
                self.results.put(dict(updates=updates, env_steps=env_steps,
                                      mean_return=float(np.mean(returns)),
                                      min_return=float(np.min(returns))))
                if np.mean(returns) >= self._solved_return:
                    self.solved.set()
                    stop.set()
                due = self._next_due()
        finally:
            env.close()
