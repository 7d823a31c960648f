"""IMPALA actors: threads that act with the latest policy and send unrolls to the learner.

Espeholt et al. 2018 (arXiv:1802.01561), Sec. 3: an actor runs the behaviour policy mu (the
parameters it last pulled), records its logits with each step, and sends fixed-length unrolls
into a bounded queue; when the learner falls behind, the actor waits instead of piling up data.
"""

import threading
from typing import Callable

import flax.linen as nn
import jax
import numpy as np

from agents.impala.unroll import UnrollBuilder
from agents.impala.unroll_queue import UnrollQueue
from agents.run.param_server import ParamServer
from agents.run.stats import EpisodeReturns, RunStats


def make_policy(network: nn.Module) -> Callable:
    """Jitted `(params, obs [B, ...], key, step) -> (actions [B] int32, logits [B, A])`."""

    @jax.jit
    def policy(params, obs, key, step):
        logits, _ = network.apply(params, obs)
        actions = jax.random.categorical(jax.random.fold_in(key, step), logits)
        return actions.astype(jax.numpy.int32), logits

    return policy


class ImpalaActor:
    """One actor thread over one envpool instance.

    Args:
      actor_id: index of this actor.
      make_env: returns this actor's envpool env (gymnasium API, async).
      policy: from `make_policy`.
      builder: the actor's unroll builder.
      unrolls: the channel to the learner (`UnrollQueue`, or `UnrollReplay` with its replay).
      param_server: source of parameters; read before every step (a reference read).
      stats: shared counters (env_steps, episodes and returns).
      seed: seed of the sampling key.
      device_index: which of the param server's actor devices this actor's policy runs on.
      refresh_period: the actor keeps acting with the parameters it holds until the server's
        are this many versions newer (1: always the latest). A controlled policy lag, for
        studying off-policy corrections (Espeholt et al. 2018, Sec. 5.2.2).
    """

    def __init__(self, actor_id: int, make_env: Callable, policy: Callable,
                 builder: UnrollBuilder, unrolls: UnrollQueue, param_server: ParamServer,
                 stats: RunStats, seed: int, device_index: int = 0, refresh_period: int = 1):
        if refresh_period < 1:
            raise ValueError(f"refresh_period must be >= 1, got {refresh_period}")
        self.actor_id = actor_id
        self._make_env, self._policy, self._builder = make_env, policy, builder
        self._unrolls, self._param_server, self._stats = unrolls, param_server, stats
        self._key = jax.random.PRNGKey(seed)
        self._device_index, self._refresh_period = device_index, refresh_period

    def _record(self, returns: EpisodeReturns, stop: threading.Event, env_ids, obs, reward,
                terminated, truncated, actions, logits, version) -> bool:
        """Feeds one recv batch, with what the policy sent for it, to the unroll builder and the
        episode returns, and puts the unrolls it completes; False if the run stopped while the
        queue was full."""
        done = self._builder.step(env_ids, obs, reward, terminated, truncated, actions, logits,
                                  version)
        returns.step(env_ids, reward, terminated | truncated)
        return done is None or self._unrolls.put(done, stop)

    def run(self, stop: threading.Event) -> None:
        """Acts until `stop`. Each recv batch is recorded while the policy computes the next
        one: JAX dispatches the jitted policy and returns at once, so the unroll builder and the
        queue run on the host while XLA's threads evaluate the network, instead of after it
        (an unroll reaches the queue one recv later)."""
        env = self._make_env()
        returns = EpisodeReturns(self._builder.num_envs, self._stats)
        env.async_reset()
        step, version, params = 0, 0, None
        recorded = None  # the previous recv batch with its actions, logits and version
        try:
            while not stop.is_set():
                obs, reward, terminated, truncated, info = env.recv()
                env_ids = info["env_id"]
                latest = self._param_server.latest(self._device_index)
                if params is None or latest[0] >= version + self._refresh_period:
                    version, params = latest
                pending = self._policy(params, obs, self._key, step)  # dispatched, not computed
                if recorded is not None and not self._record(returns, stop, *recorded):
                    return
                actions, logits = (np.asarray(x) for x in pending)
                env.send(actions, env_ids)
                step += 1
                recorded = (env_ids, obs, reward, terminated, truncated, actions, logits,
                            version)
        finally:
            env.close()
