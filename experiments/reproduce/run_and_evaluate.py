"""One training run of the reproduction scripts, evaluated with the papers' protocol.

A run is a folder: the agent's own run folder (`config.run_dir`: checkpoints, train.csv,
eval.csv) and, once it finished, `result.json` beside it. `result.json` records what produced
it: the run's resolved config (`config`, as the run folder's config.json holds it; with the
budget `total_env_steps` and the `seed`), the budget as asked (`frames`), the evaluation
`protocol` (episodes, action rule, epsilon) and the `flagfile` the config came from.

A script run again decides per run (`plan`), before anything trains:
  reuse       `result.json` was produced by this config, budget and protocol: it is returned;
  train       no result yet: a new run, or one that was stopped resumes from its newest
              checkpoint (`--resume`), so a script that was interrupted picks up where it stopped;
  continue    the same config with a larger budget (`total_env_steps`, which a resume may
              change): the finished run resumes up to the new budget, and a new result is written;
  reevaluate  the same run and budget under another protocol (more or fewer episodes, greedy or
              epsilon): the final checkpoint is evaluated again, nothing trains;
  refuse      (a `UsageError`, one line) the run folder holds a run trained with another config
              (another flagfile, network or env: the line names each field, old -> new), or with
              a larger budget than asked (its training cannot be undone). A new --out_dir, or
              deleting that run's folder, trains the new settings.
Settings that change how a run is watched, not what it learns (`NOT_COMPARED`: where the folder
is, logging and checkpoint periods) are not compared; nor is the flagfile's path, only the
config it resolved to. A `result.json` written before results had these records is reused when
its protocol and env steps match the final checkpoint (whose config is compared), and the
records are added to it; otherwise its run is re-evaluated.

`wall_s` is the run's training wall time over all its starts (the checkpoints' `wall_ms`
counter); null for a run begun before runs counted it, whose earlier starts are not known.
"""

import dataclasses
import json
import os
from typing import Any, Callable

import jax
import numpy as np

from agents import registry, trained
from agents.run import checkpoint
from agents.run.envs import is_atari
from agents.run.evaluation import FRAME_SKIP, Episodes, EvalProtocol
from agents.run.interrupts import GUARD
from agents.run.logger import read_metrics
from agents.run.run_folder import UsageError, config_values
from agents.run.protocol_play import play_params

RESULT = "result.json"
REUSE, TRAIN, CONTINUE, REEVALUATE = "reuse", "train", "continue", "reevaluate"
# Config fields that say how a run is watched or where it lives, not what it learns.
NOT_COMPARED = frozenset({"run_dir", "resume", "log_period_s", "checkpoint_period_s",
                          "checkpoint_failure", "connect_timeout_s"})


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
    registry.get(agent)  # a ValueError naming the agents for any other name


NO_GAMES = Episodes(np.zeros(0), np.zeros(0, np.int64))  # the result of no final evaluation


def protocol_play(agent: Any, protocol: EvalProtocol, evaluation: int = 0) -> Episodes:
    """Plays `protocol.episodes` episodes with a finished agent's final parameters on envs
    seeded apart from training; returns their `[episodes]` returns and agent steps."""
    params = jax.device_get(agent.learner.host_state().params)
    return play_params(agent.config, agent.eval_scores(), params, protocol, evaluation)


@dataclasses.dataclass
class Plan:
    """What `run` does with a run folder (module docstring), and what it found there."""

    action: str
    result: dict | None = None  # the result.json there
    checkpoint: str | None = None  # its newest complete checkpoint
    meta: dict | None = None  # that checkpoint's meta.json


def _protocol_values(protocol: EvalProtocol | None) -> dict | None:
    return json.loads(json.dumps(dataclasses.asdict(protocol))) if protocol else None


def _recorded_protocol(result: dict, config: Any) -> dict | None:
    """The protocol a result records, fields added since at the value they had in effect:
    envpool pressed FIRE at the start of Atari games (`RunConfig.former_values`)."""
    recorded = result.get("protocol")
    former = {"fire_reset": config.former_values().get("fire_reset", False)}
    return None if recorded is None else dict(former, **recorded)


def _read_result(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            result = json.load(f)
        if not isinstance(result, dict):
            raise ValueError(f"it holds {type(result).__name__}, not an object")
        return result
    except (OSError, ValueError) as e:
        raise UsageError(f"{path} cannot be read ({e}): delete it to evaluate that run "
                         "again") from None


def _fix(run_dir: str) -> str:
    return (f"choose another --out_dir for the new settings, or delete {run_dir} to train it "
            "again with them")


def plan(config: Any, protocol: EvalProtocol | None) -> Plan:
    """What `run` would do with `config.run_dir` (module docstring), without doing it.

    Raises:
      UsageError: the folder holds a run of another config, or one trained past the budget,
        or a result that cannot be read or continued (one line: what differs, what to do).
    """
    run_dir = config.run_dir
    result = _read_result(os.path.join(run_dir, RESULT))
    newest = checkpoint.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    meta = checkpoint.read_run_meta(newest) if newest else None
    found = Plan(TRAIN, result, newest, meta)
    saved = meta["config"] if meta else (result or {}).get("config")
    if saved is None:
        if result is not None:
            raise UsageError(f"{os.path.join(run_dir, RESULT)} records no config and no "
                             f"checkpoint is left to compare with: {_fix(run_dir)}")
        return found
    saved = dict(config.former_values(), **config_values_of(saved))
    new = config_values(config)
    differ = {k: (saved[k], v) for k, v in new.items()
              if k in saved and k not in NOT_COMPARED | {"total_env_steps"} and saved[k] != v}
    if differ:
        changes = ", ".join(f"{k}: {old!r} -> {v!r}" for k, (old, v) in sorted(differ.items()))
        raise UsageError(f"{run_dir} holds a run trained with another config ({changes}): "
                         f"{_fix(run_dir)}")
    trained_steps = meta["counters"]["env_steps"] if meta else result.get("env_steps", 0)
    old_budget, budget = saved["total_env_steps"], config.total_env_steps
    if budget < old_budget and budget < trained_steps:
        raise UsageError(f"{run_dir} holds a run that already trained {trained_steps:,} env "
                         f"steps (total_env_steps: {old_budget} -> {budget}; --frames sets it): "
                         f"a smaller budget cannot be had from it; {_fix(run_dir)}")
    if result is None:
        return found
    recorded = _recorded_protocol(result, config)
    if newest is None and (budget != old_budget or recorded != _protocol_values(protocol)):
        raise UsageError(f"{run_dir} has a result but no checkpoint to continue or evaluate "
                         f"again: {_fix(run_dir)}")
    if budget != old_budget:
        found.action = CONTINUE
    elif recorded != _protocol_values(protocol):
        found.action = REEVALUATE
    elif "config" not in result and result.get("env_steps") != trained_steps:
        found.action = REEVALUATE  # an unrecorded result of another checkpoint than the final
    else:
        found.action = REUSE
    return found


def config_values_of(saved: dict) -> dict:
    """A saved config (a checkpoint's meta keeps infinities) as `config_values` writes it."""
    return json.loads(json.dumps({k: (None if isinstance(v, float) and abs(v) == float("inf")
                                      else v) for k, v in saved.items()}))


def run(agent_name: str, config: Any, protocol: EvalProtocol | None,
        print_fn: Callable = print, flagfile: str | None = None,
        frames: int | None = None) -> dict:
    """Trains `config` (resuming its run folder if it holds a checkpoint), evaluates the final
    parameters with `protocol` (None: no final evaluation), writes and returns the result; or
    reuses, continues or re-evaluates a run the folder holds (`plan`, module docstring).

    The result holds the records of what produced it (`config`, `frames`, `total_env_steps`,
    `seed`, `protocol`, `flagfile`), the run's summary figures (`wall_s`: training wall time
    over all its starts), its logged evaluations (`curve`: env steps and mean return) and the
    protocol's games (`final_returns`, and `final_steps`: each game's agent steps, where a
    game ended by the cap shows as the cap).

    Raises:
      UsageError: `plan` refuses the run folder (nothing was started).
    """
    check_agent(agent_name)
    config = dataclasses.replace(config, resume=True)  # a fresh folder starts a new run
    found = plan(config, protocol)
    records = dict(config=config_values(config), frames=frames,
                   total_env_steps=config.total_env_steps, flagfile=flagfile)
    if found.action == REUSE:
        if "config" in found.result:
            return found.result
        # A result from before these records: they are added, and its wall time is the final
        # checkpoint's (an older harness recorded that of the last start only).
        return _write(config.run_dir, dict(found.result, wall_s=_checkpoint_wall_s(found),
                                           **records))
    if found.action == REEVALUATE:
        print_fn(f"{config.run_dir}: evaluating {found.checkpoint} again with protocol "
                 f"{_protocol_values(protocol)} (the result was of another protocol; nothing "
                 "trains)")
        return _reevaluate(agent_name, config, protocol, found, records)
    if found.action == CONTINUE:
        print_fn(f"{config.run_dir}: continuing the finished run from total_env_steps "
                 f"{found.meta['config']['total_env_steps']:,} to {config.total_env_steps:,}")
    GUARD.starting()  # a signal that came after the last run's final save stops the script
    agent = registry.get(agent_name).agent(config, print_fn)
    summary = agent.run()
    if summary.get("interrupted"):
        raise KeyboardInterrupt("the run was interrupted; run the script again to resume it")
    GUARD.starting()  # after the final save signals were only kept: they raise again
    final = protocol_play(agent, protocol) if protocol is not None else NO_GAMES
    lag = agent.learner.host_metrics().get("policy_lag_mean", float("nan"))  # IMPALA's
    # A run resumed from a checkpoint made before runs counted their wall time has counted
    # only the starts since: its whole wall time is not known.
    unknown = (found.meta is not None and "wall_ms" not in found.meta["counters"]) or (
        found.result is not None and found.result.get("wall_s", 0) is None)
    return _write(config.run_dir, _result(
        agent_name, config, records, int(summary.get("env_steps", 0)), int(summary["updates"]),
        None if unknown else float(summary["run_wall_s"]), float(lag), final, protocol))


def _reevaluate(agent_name: str, config: Any, protocol: EvalProtocol | None, found: Plan,
                records: dict) -> dict:
    """The result of the final checkpoint under `protocol`, trained before: no run folder is
    locked or written but the result."""
    GUARD.starting()
    final = (trained.load(agent_name, found.checkpoint).play(protocol)
             if protocol is not None else NO_GAMES)
    counters = found.meta["counters"]
    wall_s = found.result["wall_s"] if "config" in found.result else _checkpoint_wall_s(found)
    return _write(config.run_dir, _result(
        agent_name, config, records, int(counters["env_steps"]), int(found.meta["updates"]),
        wall_s, float(found.result.get("policy_lag_mean", float("nan"))), final, protocol))


def _checkpoint_wall_s(found: Plan) -> float | None:
    """The training wall time the final checkpoint counted; None if it counted none (made
    before runs counted their wall time)."""
    wall_ms = found.meta["counters"].get("wall_ms")
    return None if wall_ms is None else wall_ms / 1000


def _result(agent_name: str, config: Any, records: dict, env_steps: int, updates: int,
            wall_s: float | None, lag: float, final: Episodes,
            protocol: EvalProtocol | None) -> dict:
    curve = [dict(env_steps=row["env_steps"], mean_return=row["mean_return"])
             for row in read_metrics(config.run_dir, "eval")]
    return dict(agent=agent_name, env=config.env, seed=config.seed,
                correction=getattr(config, "correction", None),  # V-trace's, of IMPALA runs
                env_steps=env_steps, updates=updates, wall_s=wall_s, policy_lag_mean=lag,
                curve=curve, final_returns=[float(x) for x in final.returns],
                final_steps=[int(x) for x in final.steps],
                protocol=_protocol_values(protocol), **records)


def _write(run_dir: str, result: dict) -> dict:
    path = os.path.join(run_dir, RESULT)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, path)  # a crash never leaves a half-written result that would be skipped
    return result
