"""Ape-X actors: threads that act epsilon-greedily in envpool and feed the shared replay.

Horgan et al. 2018 (arXiv:1803.00933), Algorithm 1: each actor steps its environments with its
own exploration rates, builds n-step transitions with initial priorities from its own Q-values,
buffers them locally and adds them to the replay in batches, and pulls fresh parameters
periodically.
"""

import threading
from typing import Any, Callable

import numpy as np

from agents.apex.nstep import NStepBuilder
from agents.run.actor_loop import ActorLoop, PullEvery, RecvBatch
from agents.run.interfaces import TransitionWriter
from agents.run.param_server import ParamServer
from agents.run.stats import RunStats


def exploration_epsilons(num_envs: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """eps_i = base^(1 + alpha * i / (N - 1)) for i = 0..N-1 (Horgan et al. 2018, Sec. 4.1).

    Args:
      num_envs: N, all environments of all actors.
      base, alpha: the paper's 0.4 and 7.

    Returns:
      `[N]` float64 epsilons, from `base` down to `base^(1 + alpha)`.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if num_envs == 1:
        return np.array([base])
    return base ** (1.0 + alpha * np.arange(num_envs) / (num_envs - 1))


def epsilon_greedy(q_values: np.ndarray, epsilons: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    """`[B]` int32 actions: argmax of `q_values` `[B, A]`, or uniform with prob `epsilons` `[B]`."""
    greedy = np.argmax(q_values, axis=-1)
    explore = rng.uniform(size=len(q_values)) < epsilons
    random_actions = rng.integers(0, q_values.shape[-1], size=len(q_values))
    return np.where(explore, random_actions, greedy).astype(np.int32)


class ApexActor(ActorLoop):
    """One actor thread over one envpool instance (`agents.run.actor_loop.ActorLoop`): acts
    epsilon-greedily with its envs' own rates and feeds n-step transitions to the replay.

    Args:
      actor_id: index of this actor; its envs are global streams
        `actor_id * num_envs + env_id` (for the exploration schedule and the replay).
      make_env: returns this actor's envpool env (gymnasium API, async).
      policy: jitted `(params, obs [B, ...]) -> q [B, A]`.
      epsilons: `[num_envs]` this actor's exploration rates.
      builder: the actor's n-step transition builder.
      replay: where transitions go: the shared replay, or a writer to a Ray shard of it.
      param_server: source of parameters.
      stats: shared counters (env_steps, episodes and returns).
      local_buffer_size: transitions gathered before one replay add.
      update_period: agent steps per env between parameter pulls.
      seed: seed of the exploration generator (an int or a `np.random.SeedSequence`).
      device_index: which of the param server's actor devices this actor's policy runs on.
    """

    def __init__(self, actor_id: int, make_env: Callable, policy: Callable,
                 epsilons: np.ndarray, builder: NStepBuilder, replay: TransitionWriter,
                 param_server: ParamServer, stats: RunStats, local_buffer_size: int,
                 update_period: int, seed: Any, device_index: int = 0):
        num_envs = len(epsilons)
        super().__init__(actor_id, make_env, num_envs, param_server,
                         PullEvery(update_period * num_envs), stats, device_index)
        self._policy, self._epsilons, self._builder = policy, epsilons, builder
        self._replay, self._local_buffer_size = replay, local_buffer_size
        self._stream_offset = actor_id * num_envs
        self._rng = np.random.default_rng(seed)
        self._local: list = []
        self._local_count = 0

    def act(self, params, obs: np.ndarray, step: int):
        return self._policy(params, obs)

    def actions(self, pending, env_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q_values = np.asarray(pending)
        return epsilon_greedy(q_values, self._epsilons[env_ids], self._rng), q_values

    def observe(self, batch: RecvBatch, actions: np.ndarray, q_values: np.ndarray,
                version: int, stop: threading.Event) -> bool:
        """Feeds the batch, with the Q-values and actions sent for it, to the n-step builder and
        the local buffer (flushed into the replay when full)."""
        emitted = self._builder.step(batch.env_ids, batch.obs, batch.reward, batch.terminated,
                                     batch.truncated, batch.first, q_values, actions)
        if emitted is not None:
            transitions, priorities, streams = emitted
            self._local.append((transitions, priorities, streams + self._stream_offset))
            self._local_count += len(priorities)
            if self._local_count >= self._local_buffer_size:
                self._flush()
        return True

    def _flush(self) -> None:
        """One batched add of the local buffer; it waits while the replay's rate limiter holds
        the actors back (and adds nothing if the replay closes meanwhile: the run stops)."""
        parts = list(zip(*self._local))  # (transition dicts, priorities, streams)
        transitions = {k: np.concatenate([t[k] for t in parts[0]]) for k in parts[0][0]}
        self._replay.add(transitions, np.concatenate(parts[1]), np.concatenate(parts[2]))
        self._local, self._local_count = [], 0
