"""No two roles of a run ever share a seed, for any actor, shard and restart count."""

import itertools

import numpy as np
import pytest

from agents.run.seeds import RunSeeds, global_actor

LAYOUTS = [(1, 1, 1), (2, 8, 10), (2, 16, 8), (7, 3, 30), (180, 2, 10), (360, 1, 10)]


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**31 - 1])
@pytest.mark.parametrize("num_actors,envs_per_actor,eval_envs", LAYOUTS)
def test_env_seed_blocks_of_every_role_are_disjoint(seed, num_actors, envs_per_actor,
                                                    eval_envs):
    seeds = RunSeeds(seed, num_actors, envs_per_actor, eval_envs)
    blocks = [range(seeds.eval_envs_seed(), seeds.eval_envs_seed() + eval_envs)]
    for restart, actor in itertools.product(range(4), range(num_actors)):
        start = seeds.actor_envs_seed(actor, restart)
        blocks.append(range(start, start + envs_per_actor))
    every_env_seed = np.concatenate([np.arange(b.start, b.stop) for b in blocks])
    assert len(np.unique(every_env_seed)) == len(every_env_seed)
    assert every_env_seed.min() >= 0 and every_env_seed.max() < 2**31  # envpool's int32


@pytest.mark.parametrize("seed", [0, 7])
def test_streams_of_every_role_are_distinct(seed):
    seeds = RunSeeds(seed, num_actors=6, envs_per_actor=4, eval_envs=10)
    states = {"network": (seeds.network(),)}
    for actor, restart in itertools.product(range(6), range(5)):
        states[f"exploration {actor}/{restart}"] = tuple(
            seeds.exploration(actor, restart).generate_state(4))
    for shard in range(6):
        states[f"sampler {shard}"] = tuple(seeds.sampler(shard).generate_state(4))
    assert len(set(states.values())) == len(states)
    # Each stream's first draws differ too (the streams are independent, not shifted copies).
    firsts = [np.random.default_rng(seeds.exploration(a)).random() for a in range(6)]
    assert len(set(firsts)) == 6


def test_the_same_seed_gives_the_same_streams_and_another_seed_others():
    a, b, c = RunSeeds(3, 2, 4, 5), RunSeeds(3, 2, 4, 5), RunSeeds(4, 2, 4, 5)
    assert a.actor_envs_seed(1, 2) == b.actor_envs_seed(1, 2) != c.actor_envs_seed(1, 2)
    assert a.exploration_key(0) == b.exploration_key(0) != c.exploration_key(0)
    assert a.network() == b.network() != c.network()


def test_actors_of_several_processes_are_numbered_apart():
    ids = [global_actor(p, 4, i) for p in range(3) for i in range(4)]
    assert ids == list(range(12))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="seed"):
        RunSeeds(-1, 1, 1, 1)
    with pytest.raises(ValueError, match="actor"):
        RunSeeds(0, 2, 1, 1).actor_envs_seed(2)
