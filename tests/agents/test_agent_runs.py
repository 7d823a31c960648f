"""Whole runs of both agents: failures, resume, flags, and learning CartPole (Ctrl-C and the
other faults: test_faults.py)."""

import dataclasses
import os
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from agents import trained
from agents.apex import builder as apex_builder
from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents.impala import builder as impala_builder
from agents.impala.agent import ImpalaAgent
from agents.impala.config import ImpalaConfig
from agents.run.evaluation import confirm_protocol
from agents.run.flags import config_from_flagfile
from agents.run.runner import WorkerError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    agent: type
    config: type
    builder: type  # the per-actor transition builder, to inject failures into
    small: dict  # overrides for a short run

    @property
    def flagfile(self) -> str:
        return os.path.join(ROOT, "experiments", "configs", f"{self.name}_cartpole.cfg")

    @property
    def launcher(self) -> str:
        return os.path.join(ROOT, "experiments", f"run_{self.name}.py")


APEX = Kind("apex", ApexAgent, ApexConfig, apex_builder.NStepBuilder,
            dict(total_env_steps=4_000, min_replay_size=500))
IMPALA = Kind("impala", ImpalaAgent, ImpalaConfig, impala_builder.UnrollBuilder,
              dict(total_env_steps=6_000))
KINDS = [pytest.param(APEX, id="apex"), pytest.param(IMPALA, id="impala")]


def cartpole_config(kind: Kind, run_dir, **overrides):
    """The README's CartPole flagfile, parsed exactly as the launcher parses it."""
    return config_from_flagfile(kind.config, kind.flagfile, run_dir=str(run_dir), **overrides)


def small_config(kind: Kind, run_dir, **overrides):
    settings = dict(kind.small, log_period_s=0.5, eval_period=10**9)
    return cartpole_config(kind, run_dir, **{**settings, **overrides})


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_thread_ends_the_run_with_its_error(kind, tmp_path, monkeypatch):
    calls = []
    original = kind.builder.step

    def failing_step(self, *args):
        calls.append(1)
        if len(calls) == 50:
            raise RuntimeError("injected actor failure")
        return original(self, *args)

    monkeypatch.setattr(kind.builder, "step", failing_step)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"(?s)actor-\d.*injected actor failure"):
        kind.agent(small_config(kind, tmp_path, total_env_steps=10**9)).run()
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("kind", KINDS)
def test_resume_continues_with_identical_learner_state(kind, tmp_path):
    first = kind.agent(small_config(kind, tmp_path))
    summary = first.run()
    assert summary["updates"] > 0 and os.path.isdir(summary["checkpoint"])
    saved = first.learner.host_state()

    resumed = kind.agent(small_config(kind, tmp_path, resume=True,
                                      total_env_steps=2 * kind.small["total_env_steps"]))
    assert resumed.resumed_from == summary["checkpoint"]
    jax.tree.map(np.testing.assert_array_equal, resumed.learner.host_state(), saved)
    assert resumed.stats.get("env_steps") == summary["env_steps"]
    assert resumed.stats.get("wall_ms") / 1000 == summary["run_wall_s"]  # wall time carries over
    if kind is APEX:  # the replay's contents come back too
        restored = resumed.replay.state_dict()
        for key, value in first.replay.state_dict().items():
            np.testing.assert_array_equal(restored[key], value, err_msg=key)
    more = resumed.run()
    assert more["updates"] > summary["updates"]
    # Each start counts its wall time up to its last report, not its final save and plot
    # (seconds on a loaded machine), so the run's total lies below the starts' sum.
    assert summary["run_wall_s"] <= summary["wall_s"]
    assert summary["run_wall_s"] < more["run_wall_s"] <= summary["run_wall_s"] + more["wall_s"]
    assert more["env_steps"] >= 2 * kind.small["total_env_steps"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_parameters_that_solved_a_run_are_saved_and_replay_its_confirmation(kind,
                                                                                  tmp_path):
    """The learner trains on while the confirmation's games are played, so the final
    checkpoint holds later parameters; those that solved the run are saved apart, and the
    papers' protocol evaluation of that checkpoint replays the confirmation game for game."""
    config = small_config(kind, tmp_path, total_env_steps=10**9, eval_period=5,
                          solved_return=1.0, solved_confirm_episodes=4)
    summary = kind.agent(config).run()
    assert summary["solved"]
    evaluation, confirmation = summary["eval_history"][-2:]
    assert confirmation["episodes"] == 4 and evaluation["updates"] == confirmation["updates"]
    path = summary["solved_checkpoint"]
    assert os.path.dirname(path) == str(tmp_path / "solved")
    solved = trained.load(kind.name, path)
    assert (solved.updates, solved.env_steps) == (evaluation["updates"], evaluation["env_steps"])
    returns = solved.evaluate(confirm_protocol(solved.config))
    assert float(np.mean(returns)) == confirmation["mean_return"]
    assert float(np.min(returns)) == confirmation["min_return"]
    assert float(np.max(returns)) == confirmation["max_return"]
    assert float(np.std(returns, ddof=1)) == pytest.approx(confirmation["std_return"])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flag,message", [
    ("--discount=1.5", "discount must be in [0, 1]"),
    ("--norm=batch", "norm must be one of"),
    ("--actor_batch_size=100", "actor_batch_size"),
    ("--no_such_flag=1", "no_such_flag"),
])
def test_invalid_flags_fail_fast_before_anything_starts(kind, flag, message, tmp_path):
    start = time.monotonic()
    result = subprocess.run([sys.executable, kind.launcher, f"--flagfile={kind.flagfile}",
                             f"--run_dir={tmp_path / 'run'}", flag],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode != 0
    assert message in result.stderr
    assert not (tmp_path / "run").exists()
    assert time.monotonic() - start < 30


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_cartpole_reaches_the_solved_line(kind, tmp_path):
    config = cartpole_config(kind, tmp_path)
    start = time.monotonic()
    summary = kind.agent(config).run()
    wall = time.monotonic() - start
    print(f"{kind.name}: solved={summary['solved']} env_steps={summary['env_steps']} "
          f"updates={summary['updates']} wall={wall:.0f}s evals={summary['eval_history']}")
    assert summary["solved"], summary["eval_history"]
    assert summary["eval_history"][-1]["mean_return"] >= 475
    assert summary["env_steps"] <= config.total_env_steps + 20_000
    for name in ("learning_curve.png", "train.csv", "eval.csv", "config.json"):
        assert os.path.exists(tmp_path / name), name
    assert wall < 300
