"""A trained agent from one of its checkpoints, for notebooks and scripts.

`load("impala", "runs/x/checkpoints/step_000000031248")` rebuilds the run's config, its network
and its parameters from a checkpoint folder (verified against its manifest first). It starts no
run: no run folder is locked or written, no thread, optimizer or replay is made, so a finished
run, one still training, or a checkpoint shipped in `docs/results/` can be looked at as it is.
`evaluate` plays it with the papers' protocol, as the reproduction harness scores a run.

    trained = load("impala", "docs/results/impala_pong_cpu_group_norm_batch8/step_000000031248")
    returns = trained.evaluate(paper_protocol("impala", episodes=4))  # [4] game scores

(`paper_protocol` of `agents.registry`, which names the agents `load` takes.)
"""

import dataclasses
import functools
import math
import typing
from typing import Any, Callable

import flax.linen as nn
import jax
import numpy as np

from agents import registry
from agents.run import checkpoint
from agents.run.envs import EnvInfo, actor_env_settings, env_info
from agents.run.evaluation import Episodes, EvalProtocol
from agents.run.protocol_play import play_params

def config_from_saved(config_cls: type, saved: dict) -> Any:
    """`config_cls` from a checkpoint's `meta.json` config: lists back to tuples, a None
    infinity back to inf; fields it does not record (added since) take the value they had in
    effect then (`RunConfig.former_values`: FIRE pressed in Atari games) or their default."""
    hints = typing.get_type_hints(config_cls)
    values = {}
    for field in dataclasses.fields(config_cls):
        if field.name not in saved:
            continue
        value = saved[field.name]
        if typing.get_origin(hints[field.name]) is tuple:
            value = tuple(value)
        elif hints[field.name] is float and value is None:
            value = math.inf
        values[field.name] = value
    config = config_cls(**values)
    former = {k: v for k, v in config.former_values().items() if k not in saved}
    return dataclasses.replace(config, **former)


@dataclasses.dataclass(frozen=True)
class TrainedAgent:
    """A checkpoint's network and parameters (see `load`).

    Attributes:
      agent: its name in `agents.registry`.
      config: the run's config as the checkpoint recorded it.
      info: the env's observation and action spaces.
      network: the Flax module; `network.apply(params, obs)` as in training.
      params: its variables (host arrays).
      updates: learner updates at the checkpoint.
      env_steps: agent steps of all actors at the checkpoint (4 emulator frames each on Atari).
    """

    agent: str
    config: Any
    info: EnvInfo
    network: nn.Module
    params: Any
    updates: int
    env_steps: int

    @functools.cached_property
    def _scores(self) -> Callable:
        to_scores = registry.get(self.agent).scores
        return jax.jit(lambda params, obs: to_scores(self.network.apply(params, obs)))

    def scores(self, obs: np.ndarray) -> np.ndarray:
        """`[B, A]` Q-values (Ape-X) or policy logits (IMPALA) of observations `[B, ...]`."""
        return np.asarray(self._scores(self.params, obs))

    def play(self, protocol: EvalProtocol, evaluation: int = 0) -> Episodes:
        """`[protocol.episodes]` returns and agent steps of whole games under `protocol`
        (`play_params`)."""
        return play_params(self.config, self._scores, self.params, protocol, evaluation)

    def evaluate(self, protocol: EvalProtocol, evaluation: int = 0) -> np.ndarray:
        """`[protocol.episodes]` returns of whole games under `protocol`."""
        return self.play(protocol, evaluation).returns


def load(agent: str, path: str) -> TrainedAgent:
    """The trained agent of checkpoint folder `path` (a `step_<N>` of a run's `checkpoints/`).

    Raises:
      ValueError: an `agent` not in `agents.registry`.
      CheckpointError: `path` is not a complete checkpoint (a file missing or damaged).
      CheckpointMismatch: its parameters do not fit `agent`'s network for its config (another
        agent's checkpoint).
      NonFiniteCheckpoint: its parameters hold NaN or inf (saved from a run that diverged).
    """
    spec = registry.get(agent)
    checkpoint.verify(path)
    meta = checkpoint.read_run_meta(path)
    config = config_from_saved(spec.config, meta["config"])
    info = env_info(actor_env_settings(config, 0))
    network = spec.make_network(config, info)
    template = jax.eval_shape(network.init, jax.random.PRNGKey(0),
                              np.zeros((1,) + info.obs_shape, info.obs_dtype))
    params = checkpoint.read_params(path, template, f"{agent}'s network for its config")
    return TrainedAgent(agent, config, info, network, params, int(meta["updates"]),
                        int(meta["counters"]["env_steps"]))
