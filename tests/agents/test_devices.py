"""Actor and learner device layout on 4 faked devices (1 actor device, 3 learner devices)."""

import dataclasses

import jax
import numpy as np
import pytest

from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents.impala.agent import ImpalaAgent
from agents.impala.config import ImpalaConfig
from agents.run.flags import config_from_flagfile

SPLIT = dict(actor_devices=(0,), learner_devices=(1, 2, 3), log_period_s=0.5,
             eval_period=10**9)
KINDS = [
    pytest.param(ApexAgent, ApexConfig, "apex",
                 dict(batch_size=48, total_env_steps=4_000, min_replay_size=500), id="apex"),
    pytest.param(ImpalaAgent, ImpalaConfig, "impala", dict(batch_size=6, total_env_steps=6_000),
                 id="impala"),
]


def config(cls, name, run_dir, **overrides):
    return config_from_flagfile(cls, f"experiments/configs/{name}_cartpole.cfg",
                                run_dir=str(run_dir), **overrides)


@pytest.mark.parametrize("agent_cls,cls,name,small", KINDS)
@pytest.mark.parametrize("zero_stage", [0, 2])
def test_actors_on_one_device_learner_on_three(agent_cls, cls, name, small, zero_stage,
                                               tmp_path):
    devices = jax.local_devices()
    agent = agent_cls(config(cls, name, tmp_path, zero_stage=zero_stage, **SPLIT, **small))
    assert list(agent.mesh.devices) == devices[1:]
    _, params = agent.param_server.latest()
    assert {d for leaf in jax.tree.leaves(params) for d in leaf.devices()} == {devices[0]}
    opt_leaves = jax.tree.leaves(agent.learner.state.opt_state)
    assert all(set(leaf.devices()) == set(devices[1:]) for leaf in opt_leaves)
    summary = agent.run()
    assert summary["updates"] > 0
    _, params = agent.param_server.latest()  # published copies stay on the actor device
    assert {d for leaf in jax.tree.leaves(params) for d in leaf.devices()} == {devices[0]}
    # The checkpoint holds the canonical optimizer state, the same for every stage.
    state = agent.learner.host_state()
    assert all(isinstance(leaf, np.ndarray) or np.isscalar(leaf)
               for leaf in jax.tree.leaves(state.opt_state))


@pytest.mark.parametrize("agent_cls,cls,name,small", KINDS)
def test_batch_that_does_not_split_over_the_learner_devices_raises(agent_cls, cls, name, small,
                                                                     tmp_path):
    small = dict(small, batch_size=small["batch_size"] + 1)
    with pytest.raises(ValueError, match="does not split over 3 learner devices"):
        agent_cls(config(cls, name, tmp_path, **SPLIT, **small))


def test_device_indices_out_of_range_raise():
    with pytest.raises(ValueError, match="learner_devices"):
        dataclasses.replace(ApexConfig(), learner_devices=(0, 7)).devices()
    with pytest.raises(ValueError, match="actor_devices"):
        ApexConfig(actor_devices=(1, 1))


@pytest.mark.parametrize("agent_cls,cls,name,small", KINDS)
def test_checkpoint_from_one_layout_resumes_under_another(agent_cls, cls, name, small,
                                                          tmp_path):
    first = agent_cls(config(cls, name, tmp_path, zero_stage=2, **SPLIT, **small))
    first.run()
    saved = first.learner.host_state()
    resumed = agent_cls(config(cls, name, tmp_path, resume=True, zero_stage=1,
                               learner_devices=(0, 1), log_period_s=0.5, eval_period=10**9,
                               **small))
    assert resumed.mesh.devices.size == 2
    jax.tree.map(np.testing.assert_array_equal, resumed.learner.host_state(), saved)
