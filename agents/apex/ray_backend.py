"""Ape-X on Ray: actor workers and replay shards are Ray actors; the learner stays here.

The classes are the threaded backend's (`ApexActor`, `PrioritizedReplay`, `ApexLearner`); this
module only wires them over Ray (Moritz et al. 2018, arXiv:1712.05889), as the Ape-X paper's
actors feed a replay on other machines (Horgan et al. 2018, Sec. 3):

- `ReplayShard`: one `PrioritizedReplay`, whose own rate limiter holds back adds or samples
  inside the shard, as Reverb's tables do.
- `ShardedReplay`: the learner's replay over all shards. It splits each batch over the shards in
  proportion to their total priority and weights it with the smallest priority of any shard, so
  a batch has the distribution and importance weights of one buffer holding everything.
- `ActorWorker`: one `ApexActor` with its own envpool and jitted policy on its node's CPU.
- `RayBackend`: starts them, pushes each new parameter version once into the object store for
  every worker, forwards the workers' counters, and restarts a worker that dies. A shard that
  dies ends the run with `ReplayShardLost` (its transitions are gone; resume from the last
  checkpoint).
"""

import os
import threading
import time
import zipfile
from typing import Any, Callable

import jax
import numpy as np
import ray
from ray.exceptions import RayActorError, RayTaskError

from agents.apex.builder import make_actor, make_network
from agents.apex.config import ApexConfig
from agents.apex.replay import ReplayShard, check_shards_fit
from agents.parallel import ray_cluster
from agents.run.envs import EnvInfo
from agents.run.param_server import ParamServer
from agents.run.seeds import run_seeds
from agents.run.stats import RunStats
from replay.prioritized import Sample

POLL_S = 0.1  # the driver's cadence for worker health and parameter pushes
STATS_PERIOD_S = 1.0  # and for collecting the workers' counters (one call per worker)
STOP_TIMEOUT_S = 30.0


class ReplayShardLost(RuntimeError):
    """A replay shard died; its transitions are gone with it."""


def _shard_call(refs: Any, what: str) -> Any:
    """`ray.get(refs)`, turning a dead shard into `ReplayShardLost`."""
    try:
        return ray.get(refs)
    except RayActorError as e:
        raise ReplayShardLost(
            f"a replay shard died during {what}: {e}\nThe run cannot go on without its "
            "transitions; restart it with --resume (from the last checkpoint).") from e


def _finished(refs: list, timeout: float) -> list:
    """The refs of `refs` that are ready within `timeout` seconds (all of them if they are)."""
    return ray.wait(refs, num_returns=len(refs), timeout=timeout)[0] if refs else []


class ShardedReplay:
    """The learner's replay over `shards`: `PrioritizedReplay`'s sample, update_priorities,
    stats, save and load, and `flush` for the priorities still on their way. Ids carry their
    shard: `local_id * num_shards + shard`.

    Args:
      shards: `ReplayShard` actor handles.
      beta: importance-weight exponent.
      seed: seed of the split of each batch over the shards (for `np.random.default_rng`).
    """

    rate_limiter = None  # each shard's replay owns its own

    def __init__(self, shards: list, beta: float, seed: Any):
        self.shards, self.beta = shards, beta
        self._rng = np.random.default_rng(seed)
        self._rng_lock = threading.Lock()  # the learner's sampler threads share the split
        self._updates_in_flight: list = []  # refs of the round of priorities the shards apply
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # rounds made meanwhile
        self._updates_lock = threading.Lock()  # the learner updates; a checkpoint flushes
        self._closed = threading.Event()

    def close(self) -> None:
        """Releases every add and sample waiting in a shard: the run is stopping."""
        self._closed.set()
        for shard in self.shards:
            shard.release.remote()

    def _all(self, method: str, *args) -> list:
        return _shard_call([getattr(s, method).remote(*args) for s in self.shards], method)

    def stats(self) -> dict[str, int]:
        """Every shard's counters, summed."""
        totals: dict[str, int] = {}
        for shard_stats in self._all("stats"):
            for k, v in shard_stats.items():
                totals[k] = totals.get(k, 0) + v
        return totals

    def __len__(self) -> int:
        return self.stats()["size"]

    def sample(self, batch_size: int) -> Sample | None:
        """A batch drawn with P(i) = p_i^alpha / sum over all shards; None if the shards were
        released (the run is stopping). Thread-safe: several samplers may wait at once."""
        masses = np.array(self._all("priority_mass"))  # [S, 2] (sum, min) of p^alpha
        while masses[:, 0].sum() <= 0.0:  # nothing added yet: wait as one replay would
            if self._closed.wait(POLL_S):
                return None
            masses = np.array(self._all("priority_mass"))
        total = masses[:, 0].sum()
        with self._rng_lock:
            counts = self._rng.multinomial(batch_size, masses[:, 0] / total)  # [S]
        chosen = np.flatnonzero(counts)
        parts = _shard_call([self.shards[k].sample.remote(int(counts[k])) for k in chosen],
                            "sample")
        if any(part is None for part in parts):
            return None
        num = len(self.shards)
        ids = np.concatenate([part.ids * num + k for part, k in zip(parts, chosen)])
        priorities = np.concatenate([part.priorities for part in parts])  # [B] p^alpha
        # The largest weight of any transition in any shard normalizes, as in one buffer.
        min_priority = min(masses[:, 1].min(), priorities.min())
        weights = (priorities / min_priority) ** -self.beta
        transitions = parts[0].transitions if len(parts) == 1 else {
            name: np.concatenate([part.transitions[name] for part in parts])
            for name in parts[0].transitions}
        return Sample(ids, transitions, weights.astype(np.float32), priorities / total,
                      priorities)

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> None:
        """Sends new priorities to their shards without waiting for them.

        One round is in flight at a time, so rounds apply in order; the rounds made while one is
        in flight go together in the next, in order, so an id's last priority wins as in one
        replay. A shard's error surfaces at a later call (or `flush`).
        """
        with self._updates_lock:
            self._pending.append((np.asarray(ids, np.int64), np.asarray(priorities)))
            if len(_finished(self._updates_in_flight, 0)) == len(self._updates_in_flight):
                self._send_pending()

    def flush(self) -> None:
        """Waits until every priority given to `update_priorities` is applied."""
        with self._updates_lock:
            self._send_pending()
            _shard_call(self._updates_in_flight, "update_priorities")

    def _send_pending(self) -> None:
        """Sends the pending rounds as one, once the round in flight is done; under the lock."""
        _shard_call(self._updates_in_flight, "update_priorities")  # raises a shard's error
        self._updates_in_flight = []
        if not self._pending:
            return
        ids = np.concatenate([ids for ids, _ in self._pending])
        priorities = np.concatenate([p for _, p in self._pending])
        self._pending = []
        num = len(self.shards)
        shard_of = ids % num
        self._updates_in_flight = [
            self.shards[k].update_priorities.remote(ids[shard_of == k] // num,
                                                    priorities[shard_of == k])
            for k in np.unique(shard_of)]

    def save(self, path: str) -> None:
        """Writes every shard into one `.npz` (keys `shard<k>/...`), one shard in memory at a
        time, atomically (temporary file, then rename), with every priority sent so far."""
        self.flush()
        tmp = f"{path}.tmp"
        # O_NOFOLLOW: a link planted under the temporary's name is refused, not written through.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with open(fd, "wb") as file, zipfile.ZipFile(file, "w", allowZip64=True) as archive:
            arrays = {"num_shards": np.int64(len(self.shards))}
            for k, shard in enumerate(self.shards):
                arrays.update({f"shard{k}/{name}": array for name, array in
                               _shard_call(shard.state_dict.remote(), "save").items()})
                for name, array in arrays.items():
                    with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
                        np.lib.format.write_array(f, np.asarray(array), allow_pickle=False)
                arrays = {}
        os.replace(tmp, path)

    def load(self, path: str) -> None:
        """Restores a file written by `save` with the same number of shards."""
        with np.load(path, allow_pickle=False) as data:
            saved = int(data["num_shards"]) if "num_shards" in data.files else 1
            if saved != len(self.shards):
                raise ValueError(f"{path} holds {saved} replay shards; this run has "
                                 f"replay_shards={len(self.shards)} (resume with {saved})")
            for k, shard in enumerate(self.shards):
                prefix = f"shard{k}/"
                _shard_call(shard.load_state_dict.remote(
                    {n[len(prefix):]: data[n] for n in data.files if n.startswith(prefix)}),
                    "load")


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
                _shard_call(done[0], "add")
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
        self.replay = ShardedReplay(self.shards, config.importance_exponent,
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
        for ref in _finished(list(self._runs), timeout=0):
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
        if version == self._params[0] or len(_finished(self._pushes, 0)) < len(self._pushes):
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
        _finished(list(self._runs), STOP_TIMEOUT_S)
        self._forward_stats(stats)
        for worker in self.workers.values():
            ray.kill(worker)
        self.workers, self._runs = {}, {}
        self.replay.close()  # wakes a sample waiting on a shard's rate limiter

    def release(self) -> None:
        """Wakes a sample waiting on a shard's rate limiter: the run is stopping."""
        self.replay.close()

    def status(self) -> dict[str, float]:
        return dict(replay_size=len(self.replay), actor_restarts=sum(self._restarts))

    def close(self) -> None:
        """Ends the shards (after the final checkpoint) and a cluster this run started."""
        for shard in self.shards:
            ray.kill(shard)
        self.shards = []
        if self._connected:
            ray_cluster.disconnect()
            self._connected = False
