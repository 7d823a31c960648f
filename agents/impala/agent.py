"""IMPALA on one host, or its learner across several (jax.distributed).

Espeholt et al. 2018 (arXiv:1802.01561). The run sequence is `agents.run.agent.Agent`'s; this
supplies IMPALA's parts: the policy-value network, actor threads sending unrolls into a bounded
queue, and the V-trace learner with dynamic batching.
"""

import functools
from typing import Callable

import jax

from agents.impala.actor import make_policy
from agents.impala.builder import (
    make_actors,
    make_network,
    make_channel,
    make_unroll_spec,
)
from agents.impala.config import ImpalaConfig
from agents.impala.learner import ImpalaLearner, init_state, make_optimizer
from agents.impala.spec import SPEC
from agents.impala.unroll_queue import UnrollQueue
from agents.impala.unroll_replay import UnrollReplay
from agents.parallel import distributed
from agents.run.actor_threads import ActorThreads
from agents.run.agent import Agent
from agents.run.interfaces import Runtime


class ImpalaAgent(Agent):
    """Everything of one IMPALA run; `run()` trains until a stop condition, returns a summary.

    Args:
      config: the run's settings (its learner_devices, actor_devices and zero_stage place the
        learner and the actors; num_processes > 1 spans one learner over several processes).
      print_fn: where progress lines go.
    """

    name = SPEC.name
    config: ImpalaConfig

    @property
    def unrolls(self) -> UnrollQueue | UnrollReplay:
        """The actor-to-learner channel of unrolls."""
        return self.runtime.channel

    def make_network(self):
        return make_network(self.config, self.info)

    def make_runtime(self) -> Runtime:
        config, info, policy = self.config, self.info, make_policy(self.network)
        unrolls = make_channel(config, info)
        return ActorThreads(unrolls, functools.partial(make_actors, config, info, policy,
                                                       unrolls), status=unrolls.status)

    def learner_devices(self) -> list:
        if jax.process_count() > 1:  # one learner over every process's learner devices
            return distributed.global_learner_devices(self.config.learner_devices)
        return super().learner_devices()

    def init_state(self, key: jax.Array):
        return init_state(self.network, make_optimizer(self.config), self.sample_obs(), key)

    def make_learner(self, state) -> ImpalaLearner:
        return ImpalaLearner(self.config, self.network, self.unrolls, self.param_server, state,
                             self.mesh, make_unroll_spec(self.config, self.info), self.stats)

    def eval_scores(self) -> Callable:
        return jax.jit(lambda params, obs: SPEC.scores(self.network.apply(params, obs)))

    def status(self) -> dict[str, float]:
        return self.runtime.status() | dict(policy_lag=self.learner.lag["policy_lag_mean"])
