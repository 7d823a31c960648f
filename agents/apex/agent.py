"""Ape-X on one host, or with its actors and replay on a Ray cluster.

Horgan et al. 2018 (arXiv:1803.00933). The run sequence is `agents.run.agent.Agent`'s; this
supplies Ape-X's parts: the Q-network, the runtime (actor threads over one prioritized replay,
or Ray actor workers over replay shards), the double-Q learner with its prefetching sampler.
"""

import functools
from typing import Any, Callable

import jax

from agents.apex.builder import make_actor, make_network
from agents.apex.config import ApexConfig
from agents.apex.learner import ApexLearner, init_state, make_optimizer
from agents.apex.replay import make_replay
from agents.apex.spec import SPEC
from agents.run.actor_threads import ActorThreads
from agents.run.agent import Agent
from agents.run.interfaces import Runtime, TransitionReplay


class ApexAgent(Agent):
    """Everything of one Ape-X run; `run()` trains until a stop condition and returns a summary.

    Args:
      config: the run's settings (its learner_devices, actor_devices and zero_stage place the
        learner and the actors; its backend, the actors and the replay).
      print_fn: where progress lines go.
    """

    name = SPEC.name
    config: ApexConfig

    @property
    def replay(self) -> TransitionReplay:
        """The replay the actors write to and the learner samples (sharded on Ray)."""
        return self.runtime.channel

    @functools.cached_property
    def policy(self) -> Callable:
        """The jitted Q-network `(params, obs [B, ...]) -> Q-values [B, A]`, one for the actors
        and the evaluator (one compilation)."""
        return jax.jit(self.network.apply)

    def make_network(self):
        return make_network(self.config, self.info)

    def make_runtime(self) -> Runtime:
        config, info = self.config, self.info
        if config.backend == "ray":
            # Imported here, not at the top: hosts that only run learners have no Ray.
            from agents.apex.ray_backend import RayBackend

            return RayBackend(config, info, self.print)
        replay = make_replay(config, info)

        def actors(param_server, stats):
            return [make_actor(config, info, i, self.policy, replay, param_server, stats)
                    for i in range(config.num_actors)]

        return ActorThreads(replay, actors, status=lambda: dict(replay_size=len(replay)))

    def init_state(self, key: jax.Array):
        return init_state(self.network, make_optimizer(self.config), self.sample_obs(), key)

    def make_learner(self, state) -> ApexLearner:
        config = self.config
        # A sample from Ray's shards waits on round trips: keep several requests in flight.
        # Each shard's replay holds its own rate limiter there.
        if config.backend == "ray":
            return ApexLearner(config, self.network, self.replay, self.param_server, state,
                               self.mesh, samplers=config.ray_samples_in_flight)
        return ApexLearner(config, self.network, self.replay, self.param_server, state,
                           self.mesh, rate_limiter=self.replay.rate_limiter)

    def eval_scores(self) -> Callable:
        return self.policy

    def checkpointed_replay(self) -> Any:
        return self.replay if self.config.checkpoint_replay else None
