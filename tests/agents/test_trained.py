"""agents.trained: a checkpoint's network and parameters, without starting a run."""

import json
import math
import os
import shutil

import jax
import numpy as np
import pytest

from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents import trained
from agents.registry import paper_protocol
from agents.run import checkpoint, run_folder
from agents.run.flags import config_from_flagfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
PONG = os.path.join(ROOT, "docs", "results", "impala_pong_cpu_group_norm_batch8",
                    "step_000000031248")


@pytest.fixture(scope="module")
def apex_checkpoint(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("apex")
    config = config_from_flagfile(
        ApexConfig, os.path.join(ROOT, "experiments", "configs", "apex_cartpole.cfg"),
        run_dir=str(run_dir), total_env_steps=1_500, min_replay_size=500, eval_period=10**9)
    agent = ApexAgent(config, print_fn=lambda *a: None)
    summary = agent.run()
    return summary["checkpoint"], agent


def test_the_shipped_pong_checkpoint_loads_and_wins_its_games():
    pong = trained.load("impala", PONG)
    assert (pong.config.torso, pong.config.norm, pong.config.batch_size) == \
        ("impala_shallow", "group", 8)
    assert pong.config.solved_return == math.inf  # saved as JSON's Infinity
    assert pong.config.fire_reset  # saved before the flag: trained with envpool's FIRE presses
    assert pong.updates == 31_248 and pong.env_steps == 5_000_000
    returns = pong.evaluate(paper_protocol("impala", episodes=2))
    assert returns.shape == (2,) and (returns > 0).all(), returns  # 30 games: +15 to +20


def test_a_checkpoint_gives_back_the_learners_parameters_and_greedy_scores(apex_checkpoint):
    path, agent = apex_checkpoint
    loaded = trained.load("apex", path)
    saved = jax.device_get(agent.learner.host_state().params)
    jax.tree.map(np.testing.assert_array_equal, loaded.params, saved)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(loaded.scores(obs), agent.network.apply(saved, obs), rtol=1e-6)
    assert loaded.config == agent.config


def test_loading_works_beside_a_run_that_holds_the_folder(apex_checkpoint):
    path, _ = apex_checkpoint
    held = run_folder.RunFolderLock(os.path.dirname(os.path.dirname(path)))
    try:
        assert trained.load("apex", path).updates > 0
    finally:
        held.release()


def test_a_wrong_agent_a_foreign_checkpoint_or_a_damaged_one_is_refused(apex_checkpoint,
                                                                        tmp_path):
    path, _ = apex_checkpoint
    with pytest.raises(ValueError, match=r"agent must be one of \('apex', 'impala'\)"):
        trained.load("dqn", path)
    with pytest.raises(checkpoint.CheckpointMismatch, match="do not fit impala's network"):
        trained.load("impala", path)
    damaged = tmp_path / "step_000000000001"
    shutil.copytree(path, damaged)
    with open(damaged / "learner.msgpack", "r+b") as f:
        f.write(b"garbage")
    with pytest.raises(checkpoint.CheckpointError, match="learner.msgpack"):
        trained.load("apex", str(damaged))


def test_config_from_saved_restores_tuples_and_infinities():
    saved = json.loads(json.dumps(dict(mlp_hidden_sizes=[64, 32], solved_return=None,
                                       no_such_field=1)))
    config = trained.config_from_saved(ApexConfig, saved)
    assert config.mlp_hidden_sizes == (64, 32) and config.solved_return == math.inf
    assert config.fire_reset  # Pong (the default env), saved before the flag: FIRE was pressed
    cartpole = trained.config_from_saved(ApexConfig, dict(saved, env="CartPole-v1"))
    assert not cartpole.fire_reset  # no former value applies
