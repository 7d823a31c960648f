"""What an Ape-X run is built of: its network and actors (its replay: `agents.apex.replay`).

Horgan et al. 2018 (arXiv:1803.00933). The runtimes (`agents.run.actor_threads` for threads,
`agents.apex.ray_backend` for a Ray cluster) build their parts here; where they run is theirs.
"""

from typing import Any, Callable

from agents.apex.actor import ApexActor, exploration_epsilons
from agents.apex.config import ApexConfig
from agents.apex.network import QNetwork
from agents.apex.nstep import NStepBuilder
from agents.run.envs import EnvInfo, actor_env_settings, make_env
from agents.run.param_server import ParamServer
from agents.run.seeds import run_seeds
from agents.run.stats import RunStats


def make_network(config: ApexConfig, info: EnvInfo) -> QNetwork:
    """The Q-network for `info`'s observations and actions."""
    config.check_torso_fits(info)  # a ValueError naming --torso, not the torso's own
    torso_kwargs = config.torso_kwargs()
    if config.torso != "mlp" and config.dueling and config.head_hidden_sizes:
        # With dueling streams of their own the torso ends at the convs, as in Wang et al. 2016.
        torso_kwargs["hidden_size"] = None
    return QNetwork(info.num_actions, config.torso, tuple(torso_kwargs.items()), config.dueling,
                    config.head_hidden_sizes, stack_axis_first=info.channels_first)


def make_actor(config: ApexConfig, info: EnvInfo, actor_id: int, policy: Callable,
               replay: Any, param_server: ParamServer, stats: RunStats,
               restart: int = 0) -> ApexActor:
    """Actor `actor_id` of the run: its envs' exploration rates and seeds, its n-step builder.

    `restart` (how often this actor was restarted) gives it fresh envs and exploration.
    """
    own = slice(actor_id * config.envs_per_actor, (actor_id + 1) * config.envs_per_actor)
    epsilons = exploration_epsilons(config.num_envs, config.epsilon_base,
                                    config.epsilon_alpha)[own]
    settings = actor_env_settings(config, actor_id, restart)
    # Envpool and the jitted policy produce well-formed arrays: no per-step argument checks.
    builder = NStepBuilder(config.envs_per_actor, config.n_step, config.discount,
                           info.obs_shape, info.obs_dtype, check_inputs=False)
    return ApexActor(actor_id, lambda: make_env(settings), policy, epsilons, builder, replay,
                     param_server, stats, config.local_buffer_size, config.actor_update_period,
                     seed=run_seeds(config).exploration(actor_id, restart),
                     device_index=actor_id)
