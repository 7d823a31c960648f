"""The actor loop both agents share, and the checks of the envpool streams it feeds.

One actor thread steps one asynchronous envpool: `recv` a batch of envs, pull parameters when
due, dispatch the policy for the batch, record the previous batch while XLA computes, turn the
policy's output into actions, `send` them. The loop is written once here; an agent's actor
supplies its three steps, the way Acme's environment loop calls an actor's `select_action` and
`observe` (Hoffman et al. 2020, arXiv:2006.00979):

  * `act(params, obs, step)`: dispatch the jitted policy for `obs` `[B, ...]` (not waited for);
  * `actions(pending, env_ids)`: the actions `[B]` to send, and what the agent keeps with
    them (Ape-X: Q-values; IMPALA: behaviour logits);
  * `observe(batch, actions, extras, version, stop)`: record one batch (Ape-X: n-step
    transitions into the replay; IMPALA: unrolls into the queue); False if the run stopped
    while the channel was full.

When parameters are pulled is the agent's too (`PullEvery`: Ape-X's period in agent steps;
`PullWhenBehind`: IMPALA's refresh period in versions).
"""

import threading
from typing import Any, Callable, NamedTuple

import numpy as np

from agents.run.param_server import ParamServer
from agents.run.stats import EpisodeReturns, RunStats


class RecvBatch(NamedTuple):
    """One envpool recv: `[B]` env ids, observations `[B, ...]`, rewards, terminated and
    truncated flags, and whether each observation starts an episode (`elapsed_step == 0`)."""

    env_ids: np.ndarray
    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    first: np.ndarray


class PullEvery:
    """Pull the latest parameters after every `steps` agent steps of the actor (Horgan et al.
    2018: every 400 frames)."""

    def __init__(self, steps: int):
        self.steps = steps

    def due(self, server: ParamServer, device: int, held: int,
            steps_since_pull: int) -> tuple[int, Any] | None:
        return server.latest(device) if steps_since_pull >= self.steps else None


class PullWhenBehind:
    """Pull once the published parameters are `versions` newer than the held ones (1: the
    latest at every step; more: a controlled policy lag, Espeholt et al. 2018, Sec. 5.2.2)."""

    def __init__(self, versions: int):
        if versions < 1:
            raise ValueError(f"refresh_period must be >= 1, got {versions}")
        self.versions = versions

    def due(self, server: ParamServer, device: int, held: int,
            steps_since_pull: int) -> tuple[int, Any] | None:
        latest = server.latest(device)  # a reference read under the server's lock
        return latest if latest[0] >= held + self.versions else None


class ActorLoop:
    """One actor thread over one envpool instance; subclasses supply `act`, `actions` and
    `observe`.

    Args:
      actor_id: index of this actor.
      make_env: returns this actor's envpool env (gymnasium API, async).
      num_envs: envs of that env.
      param_server: source of parameters.
      pull: when to pull them (`PullEvery`, `PullWhenBehind`).
      stats: shared counters (env steps, episodes and their returns).
      device_index: which of the param server's actor devices this actor's policy runs on.
    """

    def __init__(self, actor_id: int, make_env: Callable, num_envs: int,
                 param_server: ParamServer, pull: PullEvery | PullWhenBehind, stats: RunStats,
                 device_index: int = 0):
        self.actor_id, self.num_envs = actor_id, num_envs
        self._make_env, self._param_server, self._pull = make_env, param_server, pull
        self._stats, self._device_index = stats, device_index

    def act(self, params: Any, obs: np.ndarray, step: int) -> Any:
        raise NotImplementedError

    def actions(self, pending: Any, env_ids: np.ndarray) -> tuple[np.ndarray, Any]:
        raise NotImplementedError

    def observe(self, batch: RecvBatch, actions: np.ndarray, extras: Any, version: int,
                stop: threading.Event) -> bool:
        raise NotImplementedError

    def run(self, stop: threading.Event) -> None:
        """Acts until `stop`. Each recv batch is recorded while the policy computes the next
        one: JAX dispatches the jitted policy and returns at once, so the recording runs on
        the host while XLA's threads evaluate the network, instead of after it (a batch's data
        reach the channel one recv later)."""
        env = self._make_env()
        returns = EpisodeReturns(self.num_envs, self._stats)
        version, params = self._param_server.latest(self._device_index)
        step = steps_since_pull = 0
        recorded = None  # the previous batch with its actions, extras and version
        env.async_reset()
        try:
            while not stop.is_set():
                obs, reward, terminated, truncated, info = env.recv()
                env_ids = info["env_id"]
                pulled = self._pull.due(self._param_server, self._device_index, version,
                                        steps_since_pull)
                if pulled is not None:
                    (version, params), steps_since_pull = pulled, 0
                pending = self.act(params, obs, step)  # dispatched, not yet computed
                if recorded is not None:
                    if not self.observe(*recorded, stop):
                        return
                    batch = recorded[0]
                    returns.step(batch.env_ids, batch.reward, batch.terminated | batch.truncated)
                actions, extras = self.actions(pending, env_ids)
                env.send(actions, env_ids)
                step += 1
                steps_since_pull += len(env_ids)
                recorded = (RecvBatch(env_ids, obs, reward, terminated, truncated,
                                      info["elapsed_step"] == 0), actions, extras, version)
        finally:
            env.close()


# Checks of envpool recv streams, shared by the per-env stream builders (Ape-X n-step, IMPALA
# unrolls). Actors turn them off (envpool and the jitted policies make well-formed arrays);
# the builders check every argument when used on their own.

def check_shape(name: str, x, shape: tuple[int, ...]) -> np.ndarray:
    """`x` as an array, or a ValueError naming `name` unless it has exactly `shape`."""
    x = np.asarray(x)
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    return x


def check_recv(env_ids, obs, num_envs: int, obs_shape: tuple[int, ...],
               obs_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Validates one envpool recv batch: unique env ids in range, observations `[B, *obs_shape]`.

    Returns:
      (env_ids `[B]`, obs `[B, *obs_shape]`) as arrays.
    """
    env_ids = np.asarray(env_ids)
    if env_ids.ndim != 1 or not np.issubdtype(env_ids.dtype, np.integer):
        raise ValueError(f"env_ids must be a 1-D integer array [B], got dtype "
                         f"{env_ids.dtype} shape {env_ids.shape}")
    batch = len(env_ids)
    if batch and (env_ids.min() < 0 or env_ids.max() >= num_envs):
        raise ValueError(f"env_ids must be in [0, num_envs={num_envs}), got "
                         f"{env_ids[(env_ids < 0) | (env_ids >= num_envs)][:3]}")
    if len(np.unique(env_ids)) != batch:
        raise ValueError(f"env_ids must be unique within a batch, got {env_ids}")
    obs = check_shape("obs", obs, (batch,) + tuple(obs_shape))
    if not np.can_cast(obs.dtype, obs_dtype, casting="same_kind"):
        raise ValueError(f"obs has dtype {obs.dtype}; the builder stores {obs_dtype}")
    return env_ids, obs


def check_builder_args(gamma: float, **counts) -> None:
    """ValueErrors for a builder's counts (each an integer >= 1) and discount (in [0, 1])."""
    for name, value in counts.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not 0.0 <= gamma <= 1.0:  # also rejects NaN
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
