"""Ape-X on Ray: actor workers and replay shards are Ray actors; the learner stays here.

The classes are the threaded backend's (`ApexActor`, `PrioritizedReplay`, `ApexLearner`); this
module only wires them over Ray (Moritz et al. 2018, arXiv:1712.05889), as the Ape-X paper's
actors feed a replay on other machines (Horgan et al. 2018, Sec. 3):

- `ReplayShard` (`agents.apex.replay`): one `PrioritizedReplay`, whose own rate limiter holds
  back adds or samples inside the shard, as Reverb's tables do; `ShardedReplay`
  (`agents.apex.sharded_replay`) is the learner's replay over all of them.
- `ActorWorker`: one `ApexActor` with its own envpool and jitted policy on its node's CPU.
- `RayBackend`: starts them, pushes each new parameter version once into the object store for
  every worker, forwards the workers' counters, and restarts a worker that dies. A shard that
  dies ends the run with `ReplayShardLost` (its transitions are gone; resume from the last
  checkpoint).
"""

import os
import threading
import time
from typing import Any, Callable

import jax
import numpy as np
import ray
from ray.exceptions import RayActorError, RayTaskError

from agents.apex.builder import make_actor, make_network
from agents.apex.config import ApexConfig
from agents.apex.replay import ReplayShard, check_shards_fit
from agents.apex.sharded_replay import ShardedReplay, finished, shard_call
from agents.parallel import ray_cluster
from agents.run.envs import EnvInfo
from agents.run.param_server import ParamServer
from agents.run.seeds import run_seeds
from agents.run.stats import RunStats

POLL_S = 0.1  # the driver's cadence for worker health and parameter pushes
STATS_PERIOD_S = 1.0  # and for collecting the workers' counters (one call per worker)
STOP_TIMEOUT_S = 30.0


class _ShardWriter:
    """An actor worker's replay: adds go to its shard, one in flight (the shard's limiter
    holds the worker back by delaying the answer)."""

    def __init__(self, shard: Any, stop: threading.Event):
        self._shard, self._stop, self._in_flight = shard, stop, None

    def add(self, transitions: dict[str, np.ndarray], priorities: np.ndarray,
            streams: np.ndarray) -> None:
        while self._in_flight is not None and not self._stop.is_set():
            done, _ = ray.wait([self._in_flight], timeout=POLL_S)
            if done:
                shard_call(done[0], "add")
                self._in_flight = None
        if not self._stop.is_set():
            self._in_flight = self._shard.add.remote(transitions, priorities, streams)


class ActorWorker:
    """A Ray actor running `ApexActor` `actor_id` on this node's CPU.

    Args:
      config, info: the run's settings and environment description.
      actor_id: which of the run's actors (its envs and exploration rates).
      shard: the `ReplayShard` it adds to.
      version, params: the parameters to start with (host arrays).
      restart: the restart count, for fresh envs and exploration.
    """

    def __init__(self, config: ApexConfig, info: EnvInfo, actor_id: int, shard: Any,
                 version: int, params: Any, restart: int = 0):
        # Actors act on the CPU, as in the paper; accelerators stay with the learner.
        jax.config.update("jax_platforms", "cpu")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._version = -1
        self.param_server = ParamServer()
        self.set_params(version, params)
        self.stats = RunStats(window=100_000)  # drained every STATS_PERIOD_S
        network = make_network(config, info)
        self.actor = make_actor(config, info, actor_id, jax.jit(network.apply),
                                _ShardWriter(shard, self._stop), self.param_server, self.stats,
                                restart=restart)

    def set_params(self, version: int, params: Any) -> None:
        """Takes parameters `version` unless a newer one already arrived."""
        with self._lock:
            if version > self._version:
                self._version = version
                self.param_server.publish(params)

    def run(self) -> None:
        self.actor.run(self._stop)

    def stop(self) -> None:
        self._stop.set()

    def drain_stats(self) -> tuple[dict[str, int], list[float]]:
        return self.stats.drain()

    def pid(self) -> int:
        return os.getpid()


class RayBackend:
    """Ape-X's actor workers and replay shards on a Ray cluster.

    Args:
      config: the run's settings (backend=ray, ray_address, replay_shards, ...).
      info: the environment description.
      print_fn: where worker restarts are reported.
    """

    def __init__(self, config: ApexConfig, info: EnvInfo, print_fn: Callable):
        self.config, self.info, self.print = config, info, print_fn
        self.shards: list = []
        self._connected = ray_cluster.connect(config.ray_address, config.ray_object_store_mb,
                                              config.ray_temp_dir,
                                              timeout_s=config.connect_timeout_s)
        try:  # also a Ctrl-C while the shards start: a cluster this run started is stopped
            self._start(config, info)
        except BaseException:
            self.close()
            raise

    def _start(self, config: ApexConfig, info: EnvInfo) -> None:
        wanted, cpus = (config.num_actors * config.ray_cpus_per_actor,
                        ray.cluster_resources().get("CPU", 0))
        if wanted > cpus:  # Ray would leave the extra workers pending forever
            raise ValueError(f"num_actors * ray_cpus_per_actor = {wanted:g} CPUs, but the Ray "
                             f"cluster has {cpus:g}; lower ray_cpus_per_actor or num_actors, "
                             "or add nodes")
        per_shard = -(-config.num_actors // config.replay_shards)
        # Shards reserve no CPU: the CPUs count actor workers (ray_cpus_per_actor each).
        shard_cls = ray.remote(ReplayShard).options(num_cpus=0, max_concurrency=per_shard + 8)
        self._worker_cls = ray.remote(ActorWorker).options(
            num_cpus=config.ray_cpus_per_actor, max_concurrency=4)
        self.shards = [shard_cls.remote(config, info, k) for k in range(config.replay_shards)]
        try:  # each shard maps its arrays lazily: shards on one host could all start, then fill
            check_shards_fit(ray.get([s.footprint.remote() for s in self.shards]), config)
        except (ValueError, RayActorError) as e:  # the shards are stopped by the caller
            if isinstance(e, RayActorError):  # its constructor raised, or its process died
                raise RuntimeError(f"a replay shard failed to start:\n{e}") from e
            raise
        self.channel = ShardedReplay(self.shards, config.importance_exponent,
                                    run_seeds(config).shard_split())
        self.workers: dict[int, Any] = {}
        self._runs: dict[Any, int] = {}  # run() ref -> actor id
        self._restarts = [0] * config.num_actors
        self._pushes: list = []
        self._params: tuple[int, Any] = (0, None)

    def _start_worker(self, actor_id: int) -> None:
        worker = self._worker_cls.remote(
            self.config, self.info, actor_id, self.shards[actor_id % len(self.shards)],
            *self._params, restart=self._restarts[actor_id])
        self.workers[actor_id] = worker
        self._runs[worker.run.remote()] = actor_id

    def _check_workers(self, stats: RunStats) -> None:
        """Restarts workers that died; re-raises a worker's own exception."""
        for ref in finished(list(self._runs), timeout=0):
            actor_id = self._runs.pop(ref)
            try:
                ray.get(ref)
            except RayTaskError as e:  # its code raised: a restart would fail again
                raise RuntimeError(f"actor worker {actor_id} failed:\n{e}") from e
            except RayActorError as e:
                if e.actor_init_failed:  # its constructor raised: a restart would fail again
                    raise RuntimeError(f"actor worker {actor_id} failed to start:\n{e}") from e
                self._restarts[actor_id] += 1  # its process or node died
                stats.add(actor_restarts=1)
                self.print(f"actor worker {actor_id} died ({type(e).__name__}); restarting it "
                           f"(restart {self._restarts[actor_id]} of this actor)")
                self._start_worker(actor_id)
                continue
            raise RuntimeError(f"actor worker {actor_id} stopped while the run goes on")

    def _push_params(self, param_server: ParamServer) -> None:
        """Puts a new parameter version into the object store once, for every worker; one
        push in flight, so slow workers skip versions rather than queue them."""
        version, params = param_server.latest()
        if version == self._params[0] or len(finished(self._pushes, 0)) < len(self._pushes):
            return
        self._params = (version, ray.put(jax.device_get(params)))
        self._pushes = [w.set_params.remote(*self._params) for w in self.workers.values()]

    def _forward_stats(self, stats: RunStats) -> None:
        drains = [w.drain_stats.remote() for w in self.workers.values()]
        for ref in drains:
            try:
                stats.merge(*ray.get(ref))
            except RayActorError:
                pass  # a dead worker; `_check_workers` restarts it

    def run_actors(self, param_server: ParamServer, stats: RunStats,
                   stop: threading.Event) -> None:
        """Driver thread: starts the actor workers and looks after them until `stop`."""
        try:
            self._push_params(param_server)  # the learner published its first version
            for actor_id in range(self.config.num_actors):
                self._start_worker(actor_id)
            last_stats = time.monotonic()
            while not stop.wait(POLL_S):
                self._check_workers(stats)
                self._push_params(param_server)
                if time.monotonic() - last_stats >= STATS_PERIOD_S:
                    self._forward_stats(stats)
                    last_stats = time.monotonic()
        finally:
            self._stop_workers(stats)

    def _stop_workers(self, stats: RunStats) -> None:
        for worker in self.workers.values():
            worker.stop.remote()
        finished(list(self._runs), STOP_TIMEOUT_S)
        self._forward_stats(stats)
        for worker in self.workers.values():
            ray.kill(worker)
        self.workers, self._runs = {}, {}
        self.channel.close()  # wakes a sample waiting on a shard's rate limiter

    def release(self) -> None:
        """Wakes a sample waiting on a shard's rate limiter: the run is stopping."""
        self.channel.close()

    def status(self) -> dict[str, float]:
        return dict(replay_size=len(self.channel), actor_restarts=sum(self._restarts))

    def close(self) -> None:
        """Ends the shards (after the final checkpoint) and a cluster this run started."""
        for shard in self.shards:
            ray.kill(shard)
        self.shards = []
        if self._connected:
            ray_cluster.disconnect()
            self._connected = False
