"""The threaded runtime: every actor a thread of this process (envpool steps in its own C++
threads; JAX releases the GIL inside the jitted policy)."""

import threading
from typing import Callable

from agents.run.interfaces import Actor, Channel
from agents.run.param_server import ParamServer
from agents.run.runner import StopEvent, ThreadRunner
from agents.run.stats import RunStats

POLL_S = 0.1  # how soon a stop request or an actor failure is noticed


class ActorThreads:
    """A `Runtime` whose actors are threads of this process.

    Args:
      channel: what the actors write to and the learner reads (`agents.run.interfaces`);
        closed when the run stops, which wakes whatever waits on it.
      make_actors: `(param_server, stats) -> [Actor]`, called once per run.
      status: values for the progress line (e.g. the replay's size).
    """

    def __init__(self, channel: Channel,
                 make_actors: Callable[[ParamServer, RunStats], list[Actor]],
                 status: Callable[[], dict[str, float]] = dict):
        self.channel = channel
        self._make_actors, self._status = make_actors, status

    def run_actors(self, param_server: ParamServer, stats: RunStats,
                   stop: threading.Event) -> None:
        """Runs each actor in a thread `actor-<id>` until `stop`; re-raises the first actor
        failure (with its traceback) after stopping the others."""
        actors = ThreadRunner()
        if isinstance(stop, StopEvent):  # actors stop at the step that sets it (the budget)
            stop.on_set(actors.stop_event.set)
        for actor in self._make_actors(param_server, stats):
            actors.start(f"actor-{actor.actor_id}", actor.run)
        try:
            while not (stop.wait(POLL_S) or actors.stop_event.is_set()):
                pass
        finally:
            actors.stop()

    def release(self) -> None:
        self.channel.close()

    def status(self) -> dict[str, float]:
        return self._status()

    def close(self) -> None:
        """Nothing outlives this process's threads."""
