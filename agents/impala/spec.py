"""IMPALA's entry in `agents.registry`: a policy-value network whose policy logits are the
scores, evaluated by sampling from the policy as the paper's implementation does (Espeholt et
al. 2018), or greedily on request."""

from agents.impala.builder import make_network
from agents.impala.config import ImpalaConfig
from agents.run.spec import AgentSpec


def _agent() -> type:
    from agents.impala.agent import ImpalaAgent  # the learner's imports only when a run is built

    return ImpalaAgent


def scores(output):
    """`[B, A]` policy logits of the network's `(logits, values)`."""
    return output[0]


def paper_rule(greedy: bool, epsilon: float | None) -> tuple[str, float]:
    """Sampled actions, or argmax ones with `greedy`; `epsilon` does not apply."""
    del epsilon
    return ("greedy" if greedy else "sample"), 0.0


SPEC = AgentSpec("impala", ImpalaConfig, _agent, make_network, scores, paper_rule)
