"""The registry of agents: its names, the error of an unknown one, each agent's scores rule
and paper evaluation rule, and that the shared layer names no agent."""

import os
import re

import numpy as np
import pytest

from agents import registry
from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents.impala.agent import ImpalaAgent
from agents.impala.config import ImpalaConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_names_and_entries():
    assert registry.names() == tuple(registry.AGENTS) == ("apex", "impala")
    apex, impala = registry.get("apex"), registry.get("impala")
    assert (apex.config, apex.agent, apex.agent.name) == (ApexConfig, ApexAgent, "apex")
    assert (impala.config, impala.agent, impala.agent.name) == (ImpalaConfig, ImpalaAgent,
                                                                "impala")


def test_an_unknown_name_is_a_value_error_naming_the_agents():
    with pytest.raises(ValueError, match=r"agent must be one of \('apex', 'impala'\), got 'dqn'"):
        registry.get("dqn")


def test_scores_rules_on_a_dummy_output():
    q_values = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(registry.get("apex").scores(q_values), q_values)
    logits, values = np.ones((2, 3)), np.zeros(2)
    assert registry.get("impala").scores((logits, values)) is logits


def test_paper_rules():
    assert registry.get("apex").paper_rule(True, 0.01) == ("epsilon_greedy", 0.01)
    assert registry.get("impala").paper_rule(False, 0.01) == ("sample", 0.0)
    assert registry.get("impala").paper_rule(True, 0.0) == ("greedy", 0.0)
    protocol = registry.paper_protocol("impala", episodes=3, greedy=True)
    assert (protocol.episodes, protocol.action_rule) == (3, "greedy")


def test_the_shared_layer_names_no_agent():
    folder = os.path.join(ROOT, "agents", "run")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name)) as f:
                assert not re.search(r"[\"'](apex|impala)[\"']", f.read()), name
