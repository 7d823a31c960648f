"""A run's protocol evaluations: `EvalProtocol`'s games played with given parameters.

Evaluation k of a run plays on envs whose seeds no training env and no other evaluation uses
(`RunSeeds.protocol_envs_seed`), with an action stream of its own (`RunSeeds.protocol_actions`),
so the same parameters give the same games wherever they are played: by the run's confirmation
of its solved line, by the reproduction harness, or by `experiments/evaluate.py` from a saved
checkpoint.
"""

import threading
from typing import Any, Callable

import numpy as np

from agents.run.envs import actor_env_settings, make_env
from agents.run.evaluation import Episodes, EvalProtocol
from agents.run.seeds import run_seeds


def protocol_envs(config: Any, protocol: EvalProtocol, evaluation: int = 0
                  ) -> tuple[Any, np.random.Generator]:
    """The `EnvSettings` of a run's protocol evaluation `evaluation` (envs seeded apart from
    training and from its other evaluations) and the random stream of its actions."""
    seeds = run_seeds(config)
    settings = protocol.env_settings(actor_env_settings(config, 0),
                                     seeds.protocol_envs_seed(evaluation, protocol.episodes))
    return settings, np.random.default_rng(seeds.protocol_actions(evaluation))


def play_params(config: Any, scores: Callable, params: Any, protocol: EvalProtocol,
                evaluation: int = 0, stop: threading.Event | None = None) -> Episodes | None:
    """Plays `protocol.episodes` episodes with `params` on envs seeded apart from training
    (evaluation k of a run gets seeds of its own); returns their `[episodes]` returns and
    agent steps.

    Args:
      config: the run's config (its env, preprocessing and seed).
      scores: jitted `(params, obs [B, ...]) -> [B, A]` (Q-values or logits).
      params: the network's variables.
      protocol: episodes, action rule, no-ops and cap (`paper_protocol`).
      evaluation: which of the run's protocol evaluations this is.
      stop: once set, the games are abandoned and None returned (a run that is stopping).
    """
    settings, rng = protocol_envs(config, protocol, evaluation)
    env = make_env(settings)
    try:
        episodes = protocol.play(env, scores, params, rng, stop)
    finally:
        env.close()
    return episodes
