"""Ape-X on one host: wires actors, replay, learner and evaluator threads, and runs them.

Horgan et al. 2018 (arXiv:1803.00933). The main thread only watches (`agents.driver`).
"""

import functools
import os
from typing import Callable

import jax
import numpy as np

from agents import checkpoint, sharding
from agents.apex.actor import ApexActor, exploration_epsilons
from agents.apex.config import ApexConfig
from agents.apex.learner import ApexLearner, init_state, make_optimizer
from agents.apex.network import QNetwork
from agents.apex.nstep import NStepBuilder
from agents.driver import Driver
from agents.envs import EnvInfo, actor_env_settings, env_info, make_env
from agents.evaluation import Evaluator
from agents.param_server import ParamServer
from agents.rate_limiter import SampleToInsertRatio
from agents.runner import ThreadRunner
from agents.stats import RunStats
from replay.frames import FrameStackStorage
from replay.prioritized import PrioritizedReplay


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


def make_replay(config: ApexConfig, info: EnvInfo) -> PrioritizedReplay:
    """The shared replay; Atari frame stacks are stored one frame at a time."""
    obs = (info.obs_shape, info.obs_dtype)
    spec = dict(obs=obs, action=((), np.int32), reward=((), np.float32),
                discount=((), np.float32), next_obs=obs)
    kwargs = dict(alpha=config.priority_exponent, beta=config.importance_exponent,
                  seed=config.seed)
    if info.is_atari:
        storage = FrameStackStorage(spec, config.replay_capacity, stack_axis=0)
        return PrioritizedReplay(config.replay_capacity, storage=storage, **kwargs)
    return PrioritizedReplay(config.replay_capacity, spec, **kwargs)


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
        self.info = env_info(actor_env_settings(config, 0))
        self.network = make_network(config, self.info)
        learner_devices, actor_devices = config.devices()
        self.mesh = sharding.learner_mesh(learner_devices)
        sharding.check_divisible(config.batch_size, self.mesh)
        self.replay = make_replay(config, self.info)
        self.stats = RunStats()
        self.checkpoint_dir = os.path.join(config.run_dir, "checkpoints")
        state = init_state(self.network, make_optimizer(config),
                           np.zeros(self.info.obs_shape, self.info.obs_dtype),
                           jax.random.PRNGKey(config.seed))
        self.resumed_from = None
        if config.resume:
            state, self.resumed_from = checkpoint.resume_run(
                self.checkpoint_dir, state, self.stats,
                self.replay if config.checkpoint_replay else None)
        self.limiter = None
        if config.samples_per_insert > 0:
            self.limiter = SampleToInsertRatio(
                config.samples_per_insert, config.min_replay_size,
                tolerance=max(config.batch_size,
                              config.samples_per_insert * config.local_buffer_size))
            replay_stats = self.replay.stats()  # a resumed run keeps its ratio
            self.limiter.inserted(replay_stats["added"])
            self.limiter.sampled(replay_stats["sampled"])
        self.param_server = ParamServer(actor_devices)
        self.learner = ApexLearner(config, self.network, self.replay, self.param_server, state,
                                   self.mesh, self.limiter)
        self.policy = jax.jit(self.network.apply)

    def _actors(self) -> list[ApexActor]:
        config, info = self.config, self.info
        epsilons = exploration_epsilons(config.num_envs, config.epsilon_base,
                                        config.epsilon_alpha)
        actors = []
        for i in range(config.num_actors):
            settings = actor_env_settings(config, i)
            own = slice(i * config.envs_per_actor, (i + 1) * config.envs_per_actor)
            builder = NStepBuilder(config.envs_per_actor, config.n_step, config.discount,
                                   info.obs_shape, info.obs_dtype)
            actors.append(ApexActor(
                i, lambda s=settings: make_env(s), self.policy, epsilons[own], builder,
                self.replay, self.param_server, self.stats, config.local_buffer_size,
                config.actor_update_period, seed=config.seed * 1_000 + i, limiter=self.limiter,
                device_index=i))
        return actors

    def save(self) -> str:
        """Checkpoints learner state, optimizer state, counters and the replay contents."""
        return checkpoint.save_run(self.checkpoint_dir, self.learner.host_state(), self.stats,
                                   self.config,
                                   self.replay if self.config.checkpoint_replay else None)

    def run(self) -> dict:
        """Trains until the budget, the solved line, Ctrl-C or a thread failure."""
        config = self.config
        eval_settings = actor_env_settings(config, 0).for_evaluation(config.eval_episodes)
        evaluator = Evaluator(lambda: make_env(eval_settings), self.policy, self.param_server,
                              lambda: self.learner.updates, lambda: self.stats.get("env_steps"),
                              config.eval_period, config.solved_return)
        runner = ThreadRunner()
        runner.start("prefetch", self.learner.prefetch)
        runner.start("learner", self.learner.run)
        for actor in self._actors():
            runner.start(f"actor-{actor.actor_id}", actor.run)
        runner.start("evaluator", evaluator.run)
        if self.resumed_from:
            self.print(f"resumed from {self.resumed_from}")
        driver = Driver("apex", config, self.stats, self.learner, evaluator, self.save,
                        lambda: dict(replay_size=len(self.replay)), self.print)
        return driver.run(runner)
