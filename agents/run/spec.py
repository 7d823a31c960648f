"""What an agent package declares about itself, so that shared code can name agents by name.

Each agent package has a `spec.py` whose `SPEC` is an `AgentSpec`; `agents.registry` collects
them. The shared layer (`agents/run/`) takes an agent's rules from its spec and names none.
"""

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """One agent: its name, settings, run, network and how its network's output is acted on.

    Attributes:
      name: the agent's name (`agents.registry.get`, a checkpoint's `agents.trained.load`).
      config: its settings class (`agents.run.config.RunConfig` and groups).
      load_agent: `() -> the run's class` (an `agents.run.agent.Agent`), imported on first use
        so that looking an agent up builds none of its learner's or actors' imports.
      make_network: `(config, env_info) -> the Flax module` the run trains.
      scores: `network.apply` output -> `[B, A]` per-action scores the evaluator acts on
        (Q-values, or policy logits to sample from).
      paper_rule: `(greedy, epsilon) -> (action_rule, epsilon)` of its paper's evaluation
        protocol (`agents.run.evaluation.paper_protocol`): `greedy` asks argmax actions of an
        agent that samples, `epsilon` is the rate of one that acts epsilon-greedily.
    """

    name: str
    config: type
    load_agent: Callable[[], type]
    make_network: Callable[[Any, Any], Any]
    scores: Callable[[Any], Any]
    paper_rule: Callable[[bool, float | None], tuple[str, float]]

    @property
    def agent(self) -> type:
        """The run's class, `agent(config, print_fn)`."""
        return self.load_agent()
