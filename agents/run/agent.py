"""The run sequence every agent shares, written once; each agent supplies its parts.

Construction, in this order (anything that fails here fails before any thread starts):
  1. the run folder: held against a second run (`run_folder.RunFolderLock`, until `close()`),
     usable, and the checkpoint to resume (`run_folder.prepare_run_folder`);
  2. the environment's spaces, the network and the runtime (where actors and replay run:
     threads, or a Ray cluster, started before JAX's threads);
  3. the learner devices' mesh, fresh or restored training state and counters, the ParamServer
     and the learner.
`run()` then starts the learner's threads, the actors (through the runtime) and the evaluator
under one `ThreadRunner`, and the main thread watches them (`Driver`) until a stop condition.

An agent subclasses `Agent` and supplies `make_network`, `make_runtime`, `init_state`,
`make_learner` and `eval_scores` (see `agents.run.interfaces` for what each part must offer).
"""

import functools
import os
from typing import Any, Callable, ClassVar

import flax.linen as nn
import jax
import numpy as np

from agents.parallel import sharding
from agents.parallel.step_counts import process_share
from agents.run import checkpoint, run_folder
from agents.run.driver import Driver
from agents.run.envs import actor_env_settings, env_info, eval_env_settings, make_env
from agents.run.evaluation import Evaluator, SolvedAt, config_protocol, confirm_protocol
from agents.run.interfaces import Learner, Runtime
from agents.run.logger import plot_learning_curve, truncate_metrics
from agents.run.param_server import ParamServer
from agents.run.protocol_play import play_params
from agents.run.runner import ThreadRunner
from agents.run.seeds import run_seeds
from agents.run.stats import RunStats


class Agent:
    """Everything of one run; `run()` trains until a stop condition and returns a summary.

    Args:
      config: the run's settings (a `RunConfig` with the agent's groups and fields).
      print_fn: where progress lines and notes go.
    """

    name: ClassVar[str]

    def __init__(self, config: Any, print_fn: Callable = functools.partial(print, flush=True)):
        self.config, self.print = config, print_fn
        self.chief = jax.process_index() == 0
        # Only the chief writes the folder, so only it holds the folder's lock.
        self._folder_lock = run_folder.RunFolderLock(config.run_dir, print_fn) \
            if self.chief else None
        try:
            self.resumed_from = run_folder.prepare_run_folder(config, print_fn, chief=self.chief)
            self.info = env_info(actor_env_settings(config, 0))
            self.network = self.make_network()
            self.runtime: Runtime = self.make_runtime()
            try:
                self._build_learner()
            except BaseException:
                self.runtime.close()
                raise
        except BaseException:
            self._release_folder()
            raise

    # The parts each agent supplies.

    def make_network(self) -> nn.Module:
        raise NotImplementedError

    def make_runtime(self) -> Runtime:
        raise NotImplementedError

    def init_state(self, key: jax.Array) -> Any:
        """Fresh training state (with `steps`) for observations shaped like `self.info`'s."""
        raise NotImplementedError

    def make_learner(self, state: Any) -> Learner:
        raise NotImplementedError

    def eval_scores(self) -> Callable:
        """Jitted `(params, obs [B, ...]) -> scores [B, A]` whose argmax is the greedy action."""
        raise NotImplementedError

    # What an agent may refine.

    def learner_devices(self) -> list:
        return self.config.devices()[0]

    def checkpointed_replay(self) -> Any:
        """What checkpoints hold besides the learner state (Ape-X: its replay), or None."""
        return None

    def status(self) -> dict[str, float]:
        return self.runtime.status()

    def env_step_budget(self) -> int:
        """The value of this process's own env-steps count (the run's total restored at this
        start plus its own steps) at which it stops: its share of what is left of
        total_env_steps (with one process, all of it), so the run ends at total_env_steps
        however many processes each start has."""
        return self.start_env_steps + process_share(
            self.config.total_env_steps, self.start_env_steps, jax.process_count(),
            jax.process_index())

    # The sequence itself.

    def _build_learner(self) -> None:
        config = self.config
        self.mesh = sharding.learner_mesh(self.learner_devices())
        self.stats = RunStats()
        self.checkpoint_dir = os.path.join(config.run_dir, "checkpoints")
        state = self.init_state(jax.random.PRNGKey(run_seeds(config).network()))
        if self.resumed_from:
            state = checkpoint.resume_run(self.resumed_from, state, self.stats,
                                          self.checkpointed_replay())
            if self.chief:
                self._truncate_records(int(state.steps))
        self.start_env_steps = self.stats.get("env_steps")  # the run's, over all processes
        self.param_server = ParamServer(config.devices()[1])
        self.learner = self.make_learner(state)

    def _truncate_records(self, step: int) -> None:
        """Drops the metrics rows written after the checkpoint this run resumes from (training
        that is discarded), and redraws the curve from what is left."""
        removed = truncate_metrics(self.config.run_dir, step)
        if removed:
            self.print(f"--resume: removed {removed} metrics rows after update {step:,} from "
                       "train.csv and eval.csv (training after the checkpoint resumed from)")
            plot_learning_curve(self.config.run_dir, target=self.config.solved_return)

    def sample_obs(self) -> np.ndarray:
        """One observation of zeros `[*obs_shape]`, for initializing parameters."""
        return np.zeros(self.info.obs_shape, self.info.obs_dtype)

    def save(self) -> str:
        """Checkpoints learner state, optimizer state, counters (and the agent's replay)."""
        return checkpoint.save_run(self.checkpoint_dir, self.learner.host_state(), self.stats,
                                   self.config, self.checkpointed_replay())

    def save_solved(self, solved: SolvedAt) -> str:
        """Saves the parameters of the evaluation that solved the run (`solved/step_N`): the
        final checkpoint holds those of a few hundred updates later."""
        return checkpoint.save_solved(os.path.join(self.config.run_dir, "solved"), solved,
                                      self.config)

    def confirmation(self) -> Callable | None:
        """The evaluator's `confirm` (None without solved_confirm_episodes): the protocol's
        first evaluation of the run (`play_params`), the games `experiments/evaluate.py`
        plays from the saved `solved/step_N`."""
        protocol = confirm_protocol(self.config)
        if protocol is None:
            return None
        return functools.partial(play_params, self.config, self.eval_scores(),
                                 protocol=protocol)

    def run(self) -> dict:
        """Trains until the budget, the solved line, Ctrl-C or a failure of any thread (or
        remote actor); returns the run's summary."""
        config = self.config
        evaluator = Evaluator(lambda s=eval_env_settings(config): make_env(s), self.eval_scores(),
                              self.param_server, lambda: self.learner.updates,
                              lambda: self.stats.get("env_steps"), config.eval_period,
                              config.solved_return, config_protocol(config),
                              run_seeds(config).eval_actions(),
                              lambda: self.stats.snapshot()["episode_return"],
                              config.eval_from_return, self.confirmation())
        runner = ThreadRunner()
        runner.on_stop(self.runtime.release)  # wakes adds and samples waiting on the replay
        for name, target in self.learner.threads():
            runner.start(name, target)
        runner.start("actors", functools.partial(self.runtime.run_actors, self.param_server,
                                                 self.stats))
        if self.chief:
            runner.start("evaluator", evaluator.run)
        if self.resumed_from:
            self.print(f"resumed from {self.resumed_from}")
        budget = self.env_step_budget()
        if jax.process_count() > 1:
            self.print(f"env steps {self.start_env_steps:,} of total_env_steps="
                       f"{self.config.total_env_steps:,} done; process {jax.process_index()} of "
                       f"{jax.process_count()} takes {budget - self.start_env_steps:,} of what "
                       "is left")
        driver = Driver(self.name, config, self.stats, self.learner, evaluator, self.save,
                        self.status, self.print, chief=self.chief,
                        env_step_budget=budget, save_solved=self.save_solved)
        try:
            return driver.run(runner)
        finally:
            self.close()

    def close(self) -> None:
        """Stops what the runtime started beyond this process and lets another run use the run
        folder."""
        try:
            self.runtime.close()
        finally:
            self._release_folder()

    def _release_folder(self) -> None:
        if self._folder_lock is not None:
            self._folder_lock.release()
