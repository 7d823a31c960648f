"""IMPALA on one host: wires actor threads, the unroll queue, learner and evaluator, and runs them.

Espeholt et al. 2018 (arXiv:1802.01561). The main thread only watches (`agents.driver`).
"""

import functools
import os
import queue
from typing import Callable

import jax
import numpy as np

from agents import checkpoint, distributed, run_folder, sharding
from agents.driver import Driver
from agents.envs import EnvInfo, actor_env_settings, env_info, eval_env_settings, make_env
from agents.evaluation import Evaluator
from agents.impala.actor import ImpalaActor, make_policy
from agents.impala.config import ImpalaConfig
from agents.impala.learner import ImpalaLearner, init_state, make_optimizer
from agents.impala.network import PolicyValueNetwork
from agents.impala.unroll import UnrollBuilder
from agents.param_server import ParamServer
from agents.runner import ThreadRunner
from agents.seeds import global_actor, run_seeds
from agents.stats import RunStats


def make_network(config: ImpalaConfig, info: EnvInfo) -> PolicyValueNetwork:
    if config.torso == "mlp":
        torso_kwargs = dict(hidden_sizes=config.mlp_hidden_sizes)
    else:
        torso_kwargs = dict(norm=config.norm, num_groups=config.num_groups)
    return PolicyValueNetwork(info.num_actions, config.torso, tuple(torso_kwargs.items()),
                              stack_axis_first=info.channels_first)


class ImpalaAgent:
    """Everything of one IMPALA run; `run()` trains until a stop condition, returns a summary.

    Args:
      config: the run's settings (its learner_devices, actor_devices and zero_stage place the
        learner and the actors).
      print_fn: where progress lines go.
    """

    def __init__(self, config: ImpalaConfig,
                 print_fn: Callable = functools.partial(print, flush=True)):
        self.config, self.print = config, print_fn
        self.chief = jax.process_index() == 0
        # First: an unusable run_dir or a resume that does not fit fails before anything starts.
        self.resumed_from = run_folder.prepare_run_folder(config, print_fn, chief=self.chief)
        self.info = env_info(actor_env_settings(config, 0))
        self.network = make_network(config, self.info)
        learner_devices, actor_devices = config.devices()
        if jax.process_count() > 1:  # one learner over every process's learner devices
            learner_devices = distributed.global_learner_devices(config.learner_devices)
        self.mesh = sharding.learner_mesh(learner_devices)
        self.stats = RunStats()
        self.checkpoint_dir = os.path.join(config.run_dir, "checkpoints")
        state = init_state(self.network, make_optimizer(config),
                           np.zeros(self.info.obs_shape, self.info.obs_dtype),
                           jax.random.PRNGKey(run_seeds(config).network()))
        if self.resumed_from:
            state = checkpoint.resume_run(self.resumed_from, state, self.stats)
        self.unrolls: queue.Queue = queue.Queue(maxsize=config.queue_size)
        self.param_server = ParamServer(actor_devices)
        spec = UnrollBuilder(1, config.unroll_length, config.discount, self.info.obs_shape,
                             self.info.obs_dtype, self.info.num_actions).spec
        self.learner = ImpalaLearner(config, self.network, self.unrolls, self.param_server,
                                     state, self.mesh, spec)
        self.policy = make_policy(self.network)
        self.greedy_scores = jax.jit(lambda params, obs: self.network.apply(params, obs)[0])

    def _actors(self) -> list[ImpalaActor]:
        config, info, seeds = self.config, self.info, run_seeds(self.config)
        first = global_actor(config.process_id, config.num_actors, 0)
        return [ImpalaActor(
            i, lambda s=actor_env_settings(config, first + i): make_env(s), self.policy,
            UnrollBuilder(config.envs_per_actor, config.unroll_length, config.discount,
                          info.obs_shape, info.obs_dtype, info.num_actions,
                          check_inputs=False),
            self.unrolls, self.param_server, self.stats, seed=seeds.exploration_key(first + i),
            device_index=i)
            for i in range(config.num_actors)]

    def save(self) -> str:
        """Checkpoints learner state, optimizer state and counters."""
        return checkpoint.save_run(self.checkpoint_dir, self.learner.host_state(), self.stats,
                                   self.config)

    def run(self) -> dict:
        """Trains until the budget, the solved line, Ctrl-C or a thread failure."""
        config = self.config
        eval_settings = eval_env_settings(config)
        evaluator = Evaluator(lambda: make_env(eval_settings), self.greedy_scores,
                              self.param_server, lambda: self.learner.updates,
                              lambda: self.stats.get("env_steps"), config.eval_period,
                              config.solved_return)
        runner = ThreadRunner()
        runner.start("learner", self.learner.run)
        for actor in self._actors():
            runner.start(f"actor-{actor.actor_id}", actor.run)
        if self.chief:
            runner.start("evaluator", evaluator.run)
        if self.resumed_from:
            self.print(f"resumed from {self.resumed_from}")
        driver = Driver("impala", config, self.stats, self.learner, evaluator, self.save,
                        lambda: dict(queue=self.unrolls.qsize(),
                                     policy_lag=self.learner.lag["policy_lag_mean"]),
                        self.print, chief=self.chief, env_step_budget=(
                            config.total_env_steps // config.num_processes))
        return driver.run(runner)
