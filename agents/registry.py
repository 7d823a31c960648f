"""Every agent by name: each agent package's `spec.SPEC` (`agents.run.spec.AgentSpec`).

    spec = get("impala")
    agent = spec.agent(spec.config(...), print)      # a run
    protocol = paper_protocol("apex", episodes=30)   # its paper's evaluation protocol

Importing this imports each agent's config and network builder, not its learner or actors, and
none of the actor side's packages (envpool, Ray): a learner-only host can import it.
"""

from agents.apex.spec import SPEC as APEX
from agents.impala.spec import SPEC as IMPALA
from agents.run import evaluation
from agents.run.spec import AgentSpec

AGENTS: dict[str, AgentSpec] = {spec.name: spec for spec in (APEX, IMPALA)}


def names() -> tuple[str, ...]:
    """The agents' names, in registry order."""
    return tuple(AGENTS)


def get(name: str) -> AgentSpec:
    """The spec of agent `name`; a ValueError naming the allowed names for any other."""
    if name not in AGENTS:
        raise ValueError(f"agent must be one of {names()}, got {name!r}")
    return AGENTS[name]


def paper_protocol(name: str, episodes: int = 30, greedy: bool = False,
                   epsilon: float | None = None) -> evaluation.EvalProtocol:
    """Agent `name`'s paper evaluation protocol (`agents.run.evaluation.paper_protocol`).

    Args:
      name: an agent of `AGENTS`.
      episodes: episodes per evaluation.
      greedy: an agent that samples its actions (IMPALA) takes the argmax instead.
      epsilon: an agent that acts epsilon-greedily (Ape-X) uses this rate (None: its
        paper's).
    """
    return evaluation.paper_protocol(get(name).paper_rule, episodes, greedy, epsilon)
