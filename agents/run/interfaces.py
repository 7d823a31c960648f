"""The parts of an agent, written down: what the shared run sequence (`agents.run.agent`) needs
from each agent's learner, actors, replay and runtime (as Acme's `core.py` does, without its
depth). They are `typing.Protocol`s: the agents' classes match them by shape, not by base class.

    envpool -> Actor -+-> Ape-X: ReplayWriter (the prioritized replay) ----+-> Learner
                 ^    +-> IMPALA: bounded queue.Queue of single unrolls ---+      |
                 |                                                                |
                 +----------------- ParamServer (versioned parameters) <----------+

Ape-X's actors write transitions to a `ReplayWriter`; IMPALA's actors put single unrolls into a
bounded `queue.Queue` (`agents.impala.builder.make_queue`), waiting while it is full, and the
learner takes them from it: no `ReplayWriter` is involved.

A `Runtime` is where the actors (and the replay) run: threads of this process, or a Ray
cluster; the agent picks one once, and the run sequence treats them alike.
"""

import threading
from typing import Any, Protocol

from agents.run.param_server import ParamServer
from agents.run.stats import RunStats


class Learner(Protocol):
    """Updates the parameters from the actors' data and publishes them to the ParamServer."""

    updates: int  # updates applied so far (restored ones included)

    def threads(self) -> list[tuple[str, Any]]:
        """(name, target(stop_event)) of each thread the learner runs (learner, prefetch)."""

    def host_state(self) -> Any:
        """The training state on the host, in checkpoint form (a NamedTuple with `steps`)."""

    def host_metrics(self) -> dict[str, float]:
        """The latest update's metrics and the learner's wait timers, as Python floats."""


class Actor(Protocol):
    """Acts in its own envpool with the latest parameters and writes what it saw."""

    actor_id: int

    def run(self, stop: threading.Event) -> None:
        """Acts until `stop` is set."""


class ReplayWriter(Protocol):
    """Where an Ape-X actor writes: the replay, a shard of it, or a writer to a remote shard.
    A write waits while the replay's rate limiter holds the actors back."""

    def add(self, transitions: dict, priorities: Any, streams: Any) -> Any:
        """Adds a batch `[B, ...]` with initial priorities `[B]` of env streams `[B]`."""


class Runtime(Protocol):
    """Where the actors run; `replay` is what they write to and the learner reads (Ape-X's
    replay, IMPALA's bounded `queue.Queue` of unrolls)."""

    replay: Any

    def run_actors(self, param_server: ParamServer, stats: RunStats,
                   stop: threading.Event) -> None:
        """A thread target: runs every actor until `stop`, raising the first actor failure."""

    def release(self) -> None:
        """Wakes whatever waits on the replay: the run is stopping (quick, thread-safe)."""

    def status(self) -> dict[str, float]:
        """Values for the progress line and the metrics (replay size, restarts, ...)."""

    def close(self) -> None:
        """Stops what the runtime started beyond this process (Ray workers, a cluster)."""
