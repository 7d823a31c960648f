"""Ape-X's entry in `agents.registry`: a Q-network whose Q-values are the scores, evaluated
epsilon-greedily (Horgan et al. 2018, Sec. 4.1; the epsilon is a flag, `PAPER_EVAL_EPSILON` by
default)."""

from agents.apex.builder import make_network
from agents.apex.config import PAPER_EVAL_EPSILON, ApexConfig
from agents.run.spec import AgentSpec


def _agent() -> type:
    from agents.apex.agent import ApexAgent  # the learner's imports only when a run is built

    return ApexAgent


def scores(q_values):
    """`[B, A]` Q-values, as the network returns them."""
    return q_values


def paper_rule(greedy: bool, epsilon: float | None) -> tuple[str, float]:
    """Epsilon-greedy with `epsilon` (None: `PAPER_EVAL_EPSILON`; 0: greedy); `greedy` does
    not apply."""
    del greedy
    return "epsilon_greedy", PAPER_EVAL_EPSILON if epsilon is None else epsilon


SPEC = AgentSpec("apex", ApexConfig, _agent, make_network, scores, paper_rule)
