"""One training run of the reproduction scripts, evaluated with the papers' protocol.

A run is a folder: the agent's own run folder (`config.run_dir`: checkpoints, train.csv,
eval.csv) and, once it finished, `result.json` beside it. A run whose `result.json` exists is
not run again; one that was stopped resumes from its newest checkpoint (`--resume`), so a
script that was interrupted picks up where it stopped.
"""

import dataclasses
import json
import os
from typing import Any, Callable

import jax
import numpy as np

from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents.impala.agent import ImpalaAgent
from agents.impala.config import ImpalaConfig
from agents.run.envs import is_atari
from agents.run.evaluation import FRAME_SKIP, EvalProtocol
from agents.run.interrupts import GUARD
from agents.run.logger import read_metrics
from agents.trained import evaluate_params

AGENTS = {"apex": (ApexAgent, ApexConfig), "impala": (ImpalaAgent, ImpalaConfig)}
RESULT = "result.json"


def env_id(game: str) -> str:
    """The envpool id of a game name ("Pong" -> "Pong-v5"; ids pass through)."""
    return game if "-v" in game else f"{game}-v5"


def game_name(env: str) -> str:
    return env.rsplit("-v", 1)[0]


def agent_steps(frames: int, env: str) -> int:
    """The agent steps of a budget in the papers' unit (frames / 4 on Atari)."""
    if frames < 1:
        raise ValueError(f"frames must be >= 1, got {frames}")
    return max(1, frames // FRAME_SKIP) if is_atari(env) else frames


def frames_of(env_steps: float, env: str) -> float:
    return env_steps * FRAME_SKIP if is_atari(env) else env_steps


def check_agent(agent: str) -> None:
    if agent not in AGENTS:
        raise ValueError(f"agent must be one of {tuple(AGENTS)}, got {agent!r}")


def protocol_evaluate(agent: Any, protocol: EvalProtocol, evaluation: int = 0) -> np.ndarray:
    """Plays `protocol.episodes` episodes with a finished agent's final parameters on envs
    seeded apart from training; returns their `[episodes]` returns."""
    params = jax.device_get(agent.learner.host_state().params)
    return evaluate_params(agent.config, agent.eval_scores(), params, protocol, evaluation)


def run(agent_name: str, config: Any, protocol: EvalProtocol | None,
        print_fn: Callable = print) -> dict:
    """Trains `config` (resuming its run folder if it holds a checkpoint), evaluates the final
    parameters with `protocol` (None: no final evaluation), writes and returns the result.

    The result holds the run's summary figures (`wall_s`: training wall time over all its
    starts), its logged evaluations (`curve`: env steps and mean return) and the protocol's
    episode returns (`final_returns`).
    """
    check_agent(agent_name)
    path = os.path.join(config.run_dir, RESULT)
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    GUARD.starting()  # a signal that came after the last run's final save stops the script
    config = dataclasses.replace(config, resume=True)  # a fresh folder starts a new run
    agent = AGENTS[agent_name][0](config, print_fn)
    summary = agent.run()
    if summary.get("interrupted"):
        raise KeyboardInterrupt("the run was interrupted; run the script again to resume it")
    GUARD.starting()  # after the final save signals were only kept: they raise again
    final = protocol_evaluate(agent, protocol) if protocol is not None else np.array([])
    curve = [dict(env_steps=row["env_steps"], mean_return=row["mean_return"])
             for row in read_metrics(config.run_dir, "eval")]
    lag = getattr(agent.learner, "lag", {}).get("policy_lag_mean", float("nan"))
    result = dict(agent=agent_name, env=config.env, seed=config.seed,
                  correction=config.correction if isinstance(config, ImpalaConfig) else None,
                  env_steps=int(summary.get("env_steps", 0)), updates=int(summary["updates"]),
                  wall_s=float(summary["run_wall_s"]), policy_lag_mean=float(lag), curve=curve,
                  final_returns=[float(x) for x in final],
                  protocol=dataclasses.asdict(protocol) if protocol else None)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, path)  # a crash never leaves a half-written result that would be skipped
    return result
