"""Ape-X on one host: wires actors, replay, learner and evaluator threads, and runs them.

Horgan et al. 2018 (arXiv:1803.00933). The main thread only watches (`agents.driver`).
"""

import functools
import os
from typing import Any, Callable

import jax
import numpy as np

from agents import checkpoint, run_folder, sharding
from agents.apex.actor import ApexActor, exploration_epsilons
from agents.apex.config import ApexConfig
from agents.apex.learner import ApexLearner, init_state, make_optimizer
from agents.apex.network import QNetwork
from agents.apex.nstep import NStepBuilder
from agents.driver import Driver
from agents.envs import EnvInfo, actor_env_settings, env_info, eval_env_settings, make_env
from agents.evaluation import Evaluator
from agents.param_server import ParamServer
from agents.runner import ThreadRunner
from agents.seeds import run_seeds
from agents.stats import RunStats
from replay.frames import FrameStackStorage
from replay.prioritized import PrioritizedReplay
from replay.rate_limiter import MinSize, SampleToInsertRatio


def make_network(config: ApexConfig, info: EnvInfo) -> QNetwork:
    if config.torso == "mlp":
        torso_kwargs = dict(hidden_sizes=config.mlp_hidden_sizes)
    else:
        # With dueling streams of their own the torso ends at the convs, as in Wang et al. 2016.
        torso_kwargs = dict(norm=config.norm, num_groups=config.num_groups,
                            **(dict(hidden_size=None) if config.dueling
                               and config.head_hidden_sizes else {}))
    return QNetwork(info.num_actions, config.torso, tuple(torso_kwargs.items()), config.dueling,
                    config.head_hidden_sizes, stack_axis_first=info.channels_first)


def make_rate_limiter(config: ApexConfig) -> MinSize:
    """The rate limiter of the replay (or of each of its shards, with one shard's share of the
    warm-up): the warm-up alone, or a samples-per-insert ratio."""
    min_size = -(-config.min_replay_size // config.replay_shards)
    if config.samples_per_insert <= 0:
        return MinSize(min_size)
    return SampleToInsertRatio(
        config.samples_per_insert, min_size,
        tolerance=max(config.batch_size, config.samples_per_insert * config.local_buffer_size))


def make_replay(config: ApexConfig, info: EnvInfo, shard: int = 0) -> PrioritizedReplay:
    """The replay (or shard `shard` of `config.replay_shards`, holding its share of the
    capacity) with its rate limiter; Atari frame stacks are stored one frame at a time."""
    capacity = -(-config.replay_capacity // config.replay_shards)
    obs = (info.obs_shape, info.obs_dtype)
    spec = dict(obs=obs, action=((), np.int32), reward=((), np.float32),
                discount=((), np.float32), next_obs=obs)
    kwargs = dict(alpha=config.priority_exponent, beta=config.importance_exponent,
                  seed=run_seeds(config).sampler(shard), rate_limiter=make_rate_limiter(config))
    if info.is_atari:
        storage = FrameStackStorage(spec, capacity, stack_axis=0)
        return PrioritizedReplay(capacity, storage=storage, **kwargs)
    return PrioritizedReplay(capacity, spec, **kwargs)


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
    builder = NStepBuilder(config.envs_per_actor, config.n_step, config.discount,
                           info.obs_shape, info.obs_dtype)
    return ApexActor(actor_id, lambda: make_env(settings), policy, epsilons, builder, replay,
                     param_server, stats, config.local_buffer_size, config.actor_update_period,
                     seed=run_seeds(config).exploration(actor_id, restart),
                     device_index=actor_id)


class ApexAgent:
    """Everything of one Ape-X run; `run()` trains until a stop condition and returns a summary.

    Args:
      config: the run's settings (its learner_devices, actor_devices and zero_stage place the
        learner and the actors).
      print_fn: where progress lines go.
    """

    def __init__(self, config: ApexConfig,
                 print_fn: Callable = functools.partial(print, flush=True)):
        self.config, self.print = config, print_fn
        # First: an unusable run_dir or a resume that does not fit fails before anything starts.
        self.resumed_from = run_folder.prepare_run_folder(config, print_fn)
        self.info = env_info(actor_env_settings(config, 0))
        self.network = make_network(config, self.info)
        self.backend = None
        if config.backend == "ray":  # first: Ray starts its processes before JAX's threads
            from agents.apex.ray_backend import RayBackend  # Ray only when asked for

            self.backend = RayBackend(config, self.info, print_fn)
            self.replay = self.backend.replay
        else:
            self.replay = make_replay(config, self.info)
        try:
            self._build_learner()
        except BaseException:
            self.close()
            raise

    def _build_learner(self) -> None:
        config = self.config
        learner_devices, actor_devices = config.devices()
        self.mesh = sharding.learner_mesh(learner_devices)
        sharding.check_divisible(config.batch_size, self.mesh)
        self.stats = RunStats()
        self.checkpoint_dir = os.path.join(config.run_dir, "checkpoints")
        state = init_state(self.network, make_optimizer(config),
                           np.zeros(self.info.obs_shape, self.info.obs_dtype),
                           jax.random.PRNGKey(run_seeds(config).network()))
        if self.resumed_from:
            state = checkpoint.resume_run(self.resumed_from, state, self.stats,
                                          self.replay if config.checkpoint_replay else None)
        self.param_server = ParamServer(actor_devices)
        self.learner = ApexLearner(config, self.network, self.replay, self.param_server, state,
                                   self.mesh)
        self.policy = jax.jit(self.network.apply)

    def save(self) -> str:
        """Checkpoints learner state, optimizer state, counters and the replay contents."""
        return checkpoint.save_run(self.checkpoint_dir, self.learner.host_state(), self.stats,
                                   self.config,
                                   self.replay if self.config.checkpoint_replay else None)

    def run(self) -> dict:
        """Trains until the budget, the solved line, Ctrl-C or a failure of any thread or
        Ray worker."""
        config = self.config
        eval_settings = eval_env_settings(config)
        evaluator = Evaluator(lambda: make_env(eval_settings), self.policy, self.param_server,
                              lambda: self.learner.updates, lambda: self.stats.get("env_steps"),
                              config.eval_period, config.solved_return)
        runner = ThreadRunner()
        runner.on_stop(self.replay.close)  # releases adds and samples waiting on the replay
        runner.start("prefetch", self.learner.prefetch)
        runner.start("learner", self.learner.run)
        if self.backend:
            runner.start("ray-actors", functools.partial(
                self.backend.run_actors, self.param_server, self.stats))
        else:
            for i in range(config.num_actors):
                actor = make_actor(config, self.info, i, self.policy, self.replay,
                                   self.param_server, self.stats)
                runner.start(f"actor-{i}", actor.run)
        runner.start("evaluator", evaluator.run)
        if self.resumed_from:
            self.print(f"resumed from {self.resumed_from}")
        driver = Driver("apex", config, self.stats, self.learner, evaluator, self.save,
                        self._status, self.print)
        try:
            return driver.run(runner)
        finally:
            self.close()

    def _status(self) -> dict[str, float]:
        status = dict(replay_size=len(self.replay))
        if self.backend:
            status["actor_restarts"] = self.stats.get("actor_restarts")
        return status

    def close(self) -> None:
        """Stops the Ray workers and shards (and a local cluster); nothing for threads."""
        if self.backend:
            self.backend.close()
