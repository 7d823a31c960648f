"""Every random stream of a run, derived from `config.seed` in one place.

Each role draws from its own child of `np.random.SeedSequence(seed)`, addressed by a spawn key
`(role, index, restart)`: the network's initialization, each actor's exploration or action
sampling (fresh at each restart), each replay shard's sampler, the split of batches over
shards. Distinct spawn keys give independent 128-bit streams, so no two roles share one
whatever the actor, shard and restart counts.

envpool seeds env i of a pool with `base + i` (int32), so env seeds are handed out as disjoint
blocks above one base drawn from the sequence: first the evaluation envs, then every actor's
envs, restart after restart:

    base + [0, eval_envs)                          evaluation
    base + eval_envs + b * envs_per_actor + [0, envs_per_actor),  b = restart * actors + actor

`actors` counts every actor of the run, over all processes (`global_actor` numbers them).

The evaluation protocol's envs (`agents.run.evaluation`: a fixed number of episodes for each
evaluated checkpoint, e.g. by the reproduction harness) take their seeds from the top
2**24 int32 values, which training blocks never reach, one block of `episodes` seeds per
evaluation:

    PROTOCOL_START + offset + evaluation * episodes + [0, episodes)
"""

import numpy as np

_INT32_LIMIT = 2**31
_BASE_LIMIT = 2**30  # bases below it leave 2**30 - 2**24 seeds of blocks for training
PROTOCOL_START = _INT32_LIMIT - 2**24  # training env seeds stay below, protocol seeds above
_PROTOCOL_OFFSETS = 2**22  # a run's protocol offset is below it; evaluations fill the rest

(_NETWORK, _EXPLORATION, _SAMPLER, _ENVS, _SHARD_SPLIT, _EVAL_ACTIONS, _PROTOCOL_ENVS,
 _PROTOCOL_ACTIONS) = range(8)


class RunSeeds:
    """The seeds of one run.

    Args:
      seed: the run's `config.seed` (an integer >= 0).
      num_actors: actors of the whole run (all processes).
      envs_per_actor: envs in each actor's pool.
      eval_envs: envs in the evaluation pool.
    """

    def __init__(self, seed: int, num_actors: int, envs_per_actor: int, eval_envs: int):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.seed = int(seed)
        self.num_actors, self.envs_per_actor = int(num_actors), int(envs_per_actor)
        self.eval_envs = int(eval_envs)
        self._env_base = int(self._child(_ENVS).generate_state(1)[0]) % _BASE_LIMIT

    def _child(self, *key: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=key)

    def network(self) -> int:
        """The seed of the network's initialization (`jax.random.PRNGKey(...)`)."""
        return int(self._child(_NETWORK).generate_state(1)[0]) % _INT32_LIMIT

    def exploration(self, actor: int, restart: int = 0) -> np.random.SeedSequence:
        """Actor `actor`'s own stream (epsilon-greedy draws, or its policy's sampling key),
        fresh for each restart of that actor."""
        return self._child(_EXPLORATION, actor, restart)

    def exploration_key(self, actor: int, restart: int = 0) -> int:
        """`exploration` as one integer, for `jax.random.PRNGKey`."""
        return int(self.exploration(actor, restart).generate_state(1)[0]) % _INT32_LIMIT

    def sampler(self, shard: int = 0) -> np.random.SeedSequence:
        """Replay shard `shard`'s sampling stream."""
        return self._child(_SAMPLER, shard)

    def shard_split(self) -> np.random.SeedSequence:
        """The stream that splits each batch over several replay shards."""
        return self._child(_SHARD_SPLIT)

    def eval_envs_seed(self) -> int:
        """The seed of evaluation env 0 (env i gets it + i)."""
        return self._env_base

    def actor_envs_seed(self, actor: int, restart: int = 0) -> int:
        """The seed of env 0 of actor `actor`'s pool (env i gets it + i) at its `restart`."""
        if not 0 <= actor < self.num_actors:
            raise ValueError(f"actor must be in [0, {self.num_actors}), got {actor}")
        block = restart * self.num_actors + actor
        seed = self._env_base + self.eval_envs + block * self.envs_per_actor
        if seed + self.envs_per_actor > PROTOCOL_START:
            raise ValueError(f"restart {restart} of actor {actor} runs past envpool's int32 "
                             "env seeds; start a new run with another seed")
        return seed

    def eval_actions(self) -> np.random.SeedSequence:
        """The training run's evaluator's stream for its action rule (epsilon, sampling)."""
        return self._child(_EVAL_ACTIONS)

    def protocol_envs_seed(self, evaluation: int, episodes: int) -> int:
        """The seed of env 0 of the protocol's pool for evaluation number `evaluation` (env i
        gets it + i): above every training env seed, a block apart for each evaluation."""
        if evaluation < 0 or episodes < 1:
            raise ValueError(f"evaluation must be >= 0 and episodes >= 1, got {evaluation} and "
                             f"{episodes}")
        offset = int(self._child(_PROTOCOL_ENVS).generate_state(1)[0]) % _PROTOCOL_OFFSETS
        seed = PROTOCOL_START + offset + evaluation * episodes
        if seed + episodes > _INT32_LIMIT:
            raise ValueError(f"evaluation {evaluation} of {episodes} episodes runs past "
                             "envpool's int32 env seeds")
        return seed

    def protocol_actions(self, evaluation: int) -> np.random.SeedSequence:
        """The protocol's action-rule stream for evaluation number `evaluation`."""
        return self._child(_PROTOCOL_ACTIONS, evaluation)


def run_seeds(config) -> RunSeeds:
    """The seeds of the run `config` describes (an agent config: seed, actors, envs)."""
    return RunSeeds(config.seed, config.actors_in_run, config.envs_per_actor,
                    config.eval_episodes)


def global_actor(process_id: int, actors_per_process: int, actor: int) -> int:
    """The run-wide index of actor `actor` of process `process_id`."""
    return process_id * actors_per_process + actor
