"""The Ape-X run as a whole: failures, Ctrl-C, resume, flags, and learning CartPole."""

import dataclasses
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from absl import flags

from agents.apex import agent as apex_agent
from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents.flags import config_from_flags, define_flags
from agents.runner import WorkerError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
CARTPOLE_CFG = os.path.join(ROOT, "experiments", "configs", "apex_cartpole.cfg")


def cartpole_config(run_dir, **overrides) -> ApexConfig:
    """The README's CartPole flagfile, parsed exactly as the launcher parses it."""
    flag_values = flags.FlagValues()
    define_flags(ApexConfig, flag_values)
    flag_values(["run_apex", f"--flagfile={CARTPOLE_CFG}"])
    return config_from_flags(ApexConfig, flag_values, run_dir=str(run_dir), **overrides)


def small_config(run_dir, **overrides) -> ApexConfig:
    settings = dict(total_env_steps=4_000, min_replay_size=500, log_period_s=0.5,
                    eval_period=10**9)
    return cartpole_config(run_dir, **{**settings, **overrides})


def test_a_failing_thread_ends_the_run_with_its_error(tmp_path, monkeypatch):
    calls = []
    original = apex_agent.NStepBuilder.step

    def failing_step(self, *args):
        calls.append(1)
        if len(calls) == 50:
            raise RuntimeError("injected actor failure")
        return original(self, *args)

    monkeypatch.setattr(apex_agent.NStepBuilder, "step", failing_step)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"(?s)actor-\d.*injected actor failure"):
        ApexAgent(small_config(tmp_path, total_env_steps=10**9)).run()
    assert time.monotonic() - start < 60


def test_resume_continues_with_identical_learner_state(tmp_path):
    first = ApexAgent(small_config(tmp_path))
    summary = first.run()
    assert summary["updates"] > 0 and os.path.isdir(summary["checkpoint"])
    saved = first.learner.host_state()
    saved_replay = first.replay.state_dict()

    resumed = ApexAgent(small_config(tmp_path, resume=True, total_env_steps=8_000))
    assert resumed.resumed_from == summary["checkpoint"]
    jax.tree.map(np.testing.assert_array_equal, resumed.learner.host_state(), saved)
    restored_replay = resumed.replay.state_dict()
    for key, value in saved_replay.items():
        np.testing.assert_array_equal(restored_replay[key], value, err_msg=key)
    assert resumed.stats.get("env_steps") == summary["env_steps"]
    more = resumed.run()
    assert more["updates"] > summary["updates"] and more["env_steps"] >= 8_000


def run_launcher(*args, **kwargs):
    return subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "run_apex.py"),
                           *args], capture_output=True, text=True, cwd=ROOT, **kwargs)


@pytest.mark.parametrize("flag,message", [
    ("--batch_size=0", "batch_size must be >= 1"),
    ("--norm=batch", "norm must be one of"),
    ("--actor_batch_size=8", "actor_batch_size"),
    ("--no_such_flag=1", "no_such_flag"),
])
def test_invalid_flags_fail_fast_before_anything_starts(tmp_path, flag, message):
    start = time.monotonic()
    result = run_launcher(f"--flagfile={CARTPOLE_CFG}", f"--run_dir={tmp_path / 'run'}", flag,
                          timeout=60)
    assert result.returncode != 0
    assert message in result.stderr
    assert not (tmp_path / "run").exists()
    assert time.monotonic() - start < 30


def test_ctrl_c_stops_cleanly_and_writes_a_checkpoint(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "experiments", "run_apex.py"),
         f"--flagfile={CARTPOLE_CFG}", f"--run_dir={tmp_path}", "--total_env_steps=100000000",
         "--log_period_s=0.5", "--solved_return=inf"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if "[apex" in line and "updates" in line and " 0 (" not in line.split("|")[1]:
                break
        proc.send_signal(signal.SIGINT)
        out = line + proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert "interrupted" in out
    checkpoints = os.listdir(tmp_path / "checkpoints")
    assert checkpoints and not any(c.endswith(".tmp") for c in checkpoints)


@pytest.mark.slow
def test_cartpole_reaches_the_solved_line(tmp_path):
    config = cartpole_config(tmp_path)
    start = time.monotonic()
    summary = ApexAgent(config).run()
    wall = time.monotonic() - start
    print(f"solved={summary['solved']} env_steps={summary['env_steps']} "
          f"updates={summary['updates']} wall={wall:.0f}s evals={summary['eval_history']}")
    assert summary["solved"], summary["eval_history"]
    assert summary["eval_history"][-1]["mean_return"] >= 475
    assert summary["env_steps"] <= config.total_env_steps + 10_000
    assert os.path.exists(tmp_path / "learning_curve.png")
    assert os.path.exists(tmp_path / "train.csv") and os.path.exists(tmp_path / "eval.csv")
    assert wall < 300
