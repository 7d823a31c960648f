"""What an IMPALA run is built of: its network, unroll builders, queue and actors.

Espeholt et al. 2018 (arXiv:1802.01561). The threaded runtime (`agents.run.actor_threads`) runs
the actors built here.
"""

from typing import Callable

import jax
import numpy as np

from agents.impala.actor import ImpalaActor
from agents.impala.config import ImpalaConfig
from agents.impala.network import PolicyValueNetwork
from agents.impala.unroll import UnrollBuilder, unroll_spec
from agents.impala.unroll_queue import UnrollQueue
from agents.impala.unroll_replay import UnrollReplay
from agents.run import host_memory
from agents.run.envs import EnvInfo, actor_env_settings, make_env
from agents.run.param_server import ParamServer
from agents.run.seeds import global_actor, run_seeds
from agents.run.stats import RunStats


def make_network(config: ImpalaConfig, info: EnvInfo) -> PolicyValueNetwork:
    """The policy-value network for `info`'s observations and actions."""
    config.check_torso_fits(info)  # a ValueError naming --torso, not the torso's own
    return PolicyValueNetwork(info.num_actions, config.torso,
                              tuple(config.torso_kwargs().items()),
                              stack_axis_first=info.channels_first)


def make_unroll_builder(config: ImpalaConfig, info: EnvInfo, num_envs: int,
                        check_inputs: bool = True) -> UnrollBuilder:
    return UnrollBuilder(num_envs, config.unroll_length, config.discount, info.obs_shape,
                         info.obs_dtype, info.num_actions, check_inputs=check_inputs)


def make_unroll_spec(config: ImpalaConfig, info: EnvInfo) -> dict:
    """Shape and dtype of every field of this run's unrolls (what the learner stacks)."""
    return unroll_spec(config.unroll_length, info.obs_shape, info.obs_dtype, info.num_actions)


def make_queue(config: ImpalaConfig) -> UnrollQueue:
    """The bounded actor-to-learner queue of single unrolls (backpressure)."""
    return UnrollQueue(config.queue_size)


def make_channel(config: ImpalaConfig, info: EnvInfo) -> UnrollQueue | UnrollReplay:
    """The run's actor-to-learner channel: the queue, or with `replay_proportion > 0` the queue
    with a replay of `replay_unrolls` unrolls (checked against this host's free memory now,
    not found by the OOM killer once the memory fills)."""
    unrolls = make_queue(config)
    if config.replay_proportion == 0:
        return unrolls
    per_unroll = ((config.unroll_length + 1) * int(np.prod(info.obs_shape))
                  * np.dtype(info.obs_dtype).itemsize
                  + config.unroll_length * (4 * info.num_actions + 25))  # logits, the rest
    needed, available = config.replay_unrolls * per_unroll, host_memory.available_bytes()
    if available is not None and needed > available:
        raise ValueError(
            f"replay_unrolls={config.replay_unrolls} needs {needed / 2**30:.1f} GiB "
            f"({per_unroll / 2**20:.2f} MiB an unroll) but this host has "
            f"{available / 2**30:.1f} GiB free; use a smaller replay_unrolls")
    seed = run_seeds(config).sampler(jax.process_index())
    return UnrollReplay(unrolls, config.replay_unrolls, config.replay_proportion, seed)


def make_actors(config: ImpalaConfig, info: EnvInfo, policy: Callable, unrolls: UnrollQueue,
                param_server: ParamServer, stats: RunStats) -> list[ImpalaActor]:
    """This process's actors; with several processes their envs and keys are the run-wide
    actors' (`agents.run.seeds.global_actor`)."""
    seeds = run_seeds(config)
    first = global_actor(config.process_id, config.num_actors, 0)
    # Envpool and the jitted policy produce well-formed arrays: no per-step argument checks.
    return [ImpalaActor(
        i, lambda s=actor_env_settings(config, first + i): make_env(s), policy,
        make_unroll_builder(config, info, config.envs_per_actor, check_inputs=False), unrolls,
        param_server, stats, seed=seeds.exploration_key(first + i), device_index=i,
        refresh_period=config.actor_refresh_period)
        for i in range(config.num_actors)]
