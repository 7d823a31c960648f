"""The parts of an agent, written down: what the shared run sequence (`agents.run.agent`) needs
from each agent's learner, actors, channel and runtime (as Acme's `core.py` does, without its
depth). They are `typing.Protocol`s: the agents' classes match them by shape, not by base class.

    envpool -> Actor -+-> Ape-X: TransitionReplay (prioritized; local or sharded) -+-> Learner
                 ^    +-> IMPALA: UnrollChannel (a queue of unrolls, or with replay) -+     |
                 |                                                                          |
                 +-------------------- ParamServer (versioned parameters) <-----------------+

The `Channel` is what the actors write to and the learner reads: Ape-X's prioritized replay
(`replay.prioritized.PrioritizedReplay` in this process, `agents.apex.sharded_replay` over Ray
shards), whose actors `add` transitions and whose learner samples them; IMPALA's bounded queue of
unrolls (`agents.impala.unroll_queue`) or the same queue with a replay of past unrolls mixed into
each batch (`agents.impala.unroll_replay`), whose actors `put` unrolls and whose learner takes
batches of them (`get_batch`). Every channel can be closed, which wakes whatever waits on it.

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
    diverged: str | None  # what went non-finite at which update; None while all is finite

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


class Channel(Protocol):
    """What an agent's actors write to and its learner reads."""

    def close(self) -> None:
        """Wakes every write and read waiting on the channel: the run is stopping. Writes and
        reads after it return at once (adding and returning nothing)."""


class TransitionWriter(Protocol):
    """Where an Ape-X actor writes: the replay, or a writer to a remote shard of it. A write
    waits while the replay's rate limiter holds the actors back."""

    def add(self, transitions: dict, priorities: Any, streams: Any) -> Any:
        """Adds a batch `[B, ...]` with initial priorities `[B]` of env streams `[B]`."""


class TransitionReplay(Channel, Protocol):
    """Ape-X's channel as the learner sees it: a prioritized replay (Schaul et al. 2016) it
    samples and sends new priorities to. In this process it is also the actors'
    `TransitionWriter`; on Ray each actor worker writes to its own shard."""

    def sample(self, batch_size: int) -> Any:
        """A prioritized `Sample` of `batch_size` transitions, or None once closed."""

    def update_priorities(self, ids: Any, priorities: Any) -> Any:
        """New priorities `[B]` for the sampled ids `[B]`."""


class UnrollChannel(Channel, Protocol):
    """IMPALA's channel: unrolls of T steps from the actors, batches of them to the learner."""

    waited_s: float  # cumulative seconds `get_batch` waited for unrolls

    def put(self, unrolls: Any, stop: threading.Event) -> bool:
        """Adds K unrolls (`Unrolls`, fields `[K, ...]`), waiting while the channel is full;
        False if `stop` was set or the channel closed first."""

    def get_batch(self, size: int, stop: threading.Event) -> Any:
        """`size` unrolls stacked (`Unrolls`, fields `[size, ...]`), or None if `stop` was set or
        the channel closed before they were all there."""

    def status(self) -> dict[str, float]:
        """Values for the progress line and the metrics (unrolls waiting, replay size, ...)."""


class Runtime(Protocol):
    """Where the actors run; `channel` is what they write to and the learner reads."""

    channel: Channel

    def run_actors(self, param_server: ParamServer, stats: RunStats,
                   stop: threading.Event) -> None:
        """A thread target: runs every actor until `stop`, raising the first actor failure."""

    def release(self) -> None:
        """Wakes whatever waits on the channel: the run is stopping (quick, thread-safe)."""

    def status(self) -> dict[str, float]:
        """Values for the progress line and the metrics (replay size, restarts, ...)."""

    def close(self) -> None:
        """Stops what the runtime started beyond this process (Ray workers, a cluster)."""
