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
from agents.run.actor_loop import ActorLoop, PullWhenBehind, RecvBatch
from agents.run.param_server import ParamServer
from agents.run.stats import RunStats


def make_policy(network: nn.Module) -> Callable:
    """Jitted `(params, obs [B, ...], key, step) -> (actions [B] int32, logits [B, A])`."""

    @jax.jit
    def policy(params, obs, key, step):
        logits, _ = network.apply(params, obs)
        actions = jax.random.categorical(jax.random.fold_in(key, step), logits)
        return actions.astype(jax.numpy.int32), logits

    return policy


class ImpalaActor(ActorLoop):
    """One actor thread over one envpool instance (`agents.run.actor_loop.ActorLoop`): samples
    from the policy, keeps its logits with each step and puts the unrolls it completes.

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
        super().__init__(actor_id, make_env, builder.num_envs, param_server,
                         PullWhenBehind(refresh_period), stats, device_index)
        self._policy, self._builder, self._unrolls = policy, builder, unrolls
        self._key = jax.random.PRNGKey(seed)

    def act(self, params, obs: np.ndarray, step: int):
        return self._policy(params, obs, self._key, step)

    def actions(self, pending, env_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        actions, logits = (np.asarray(x) for x in pending)
        return actions, logits

    def observe(self, batch: RecvBatch, actions: np.ndarray, logits: np.ndarray, version: int,
                stop: threading.Event) -> bool:
        """Feeds the batch, with the actions and logits sent for it, to the unroll builder and
        puts the unrolls it completes; False if the run stopped while the channel was full."""
        done = self._builder.step(batch.env_ids, batch.obs, batch.reward, batch.terminated,
                                  batch.truncated, actions, logits, version)
        return done is None or self._unrolls.put(done, stop)
