"""What Ray costs Ape-X on one host, and how fast the learner samples 1, 2 or 4 replay shards.

- agent: env frames/s and learner updates/s of whole Ape-X runs (CartPole MLP, Pong Nature CNN),
  the Ray backend (actor workers and two replay shards as Ray actors on a local cluster)
  against the threaded backend with the same settings, alternated. Free: actors and learner run
  free (samples_per_insert=0), so each side shows what it gets beside the other. Held: the
  CartPole config's samples_per_insert=4 ties updates to env steps, so one ratio is the whole
  cost of the engine.
- in_flight: the CartPole config's Ray run as the tests run it (2 shards, held at its own
  samples_per_insert), with the learner's batch requests one at a time
  (ray_samples_in_flight=1) against the default, alternated: env frames/s, updates/s and the
  share of the time the learner waited for a batch.
- shards: batches/s of `ShardedReplay.sample(512)` plus the priority write-back, over 1, 2 and
  4 shards holding 20K Pong transitions between them, against the same on one in-process
  `PrioritizedReplay`.

    python benchmarks/bench_apex_ray.py [--parts agent,in_flight,shards] [--seconds 20]
"""

import _thread
import dataclasses
import statistics
import threading
import time

import timing

import numpy as np
import ray

from agents.parallel import ray_cluster
from agents.apex.agent import ApexAgent
from agents.apex.config import ApexConfig
from agents.apex.sharded_replay import ShardedReplay
from agents.apex.replay import ReplayShard, make_replay
from agents.run.envs import actor_env_settings, env_info
from agents.run.flags import config_from_flagfile
from agent_parts import fill_replay
from bench_apex import ATARI

FREE = dict(samples_per_insert=0, eval_period=10**9, total_env_steps=10**12,
            checkpoint_replay=False, checkpoint_period_s=10**6, log_period_s=1.0,
            solved_return=float("inf"))
CARTPOLE_HELD = config_from_flagfile(ApexConfig, "experiments/configs/apex_cartpole.cfg",
                                     run_dir="/tmp/bench_apex_ray/cartpole")
CARTPOLE = dataclasses.replace(CARTPOLE_HELD, **FREE)
PONG = dataclasses.replace(ATARI, num_actors=2, run_dir="/tmp/bench_apex_ray/pong", **FREE)


def agent_rates(config: ApexConfig, seconds: float) -> tuple[float, float, float]:
    """(env steps/s, updates/s, share of the time the learner waited for a batch) of a run
    over `seconds`, once the learner is updating."""
    agent = ApexAgent(config, print_fn=lambda *_: None)
    rates = []

    def measure():
        while agent.learner.updates < 5:
            time.sleep(0.1)
        time.sleep(2.0)  # past the first parameter pushes and compilations
        steps, updates, waited, start = (agent.stats.get("env_steps"), agent.learner.updates,
                                         agent.learner.waits["batch_s"], time.perf_counter())
        time.sleep(seconds)
        elapsed = time.perf_counter() - start
        rates.extend([(agent.stats.get("env_steps") - steps) / elapsed,
                      (agent.learner.updates - updates) / elapsed,
                      (agent.learner.waits["batch_s"] - waited) / elapsed])
        _thread.interrupt_main()  # the driver stops the run as on Ctrl-C

    threading.Thread(target=measure, daemon=True).start()
    agent.run()
    return rates[0], rates[1], rates[2]


def agent_part(seconds: float) -> list[list]:
    rows = []
    for name, config, frames_per_step in (
            ("CartPole free", CARTPOLE, 1),
            ("CartPole held at 4 samples/insert", dataclasses.replace(
                CARTPOLE, samples_per_insert=4.0), 1),
            ("Pong free", PONG, 4)):
        on_ray = dataclasses.replace(config, backend="ray", replay_shards=2)
        threads, ray_runs = [], []
        for _ in range(2):  # alternated, so drift in machine load hits both
            threads.append(agent_rates(config, seconds))
            ray_runs.append(agent_rates(on_ray, seconds))
        for i, what in enumerate(("env frames/s", "updates/s")):
            scale = frames_per_step if i == 0 else 1
            t = statistics.median(r[i] for r in threads) * scale
            r = statistics.median(r[i] for r in ray_runs) * scale
            rows.append([f"{name} {what}", r, t, r / t])
    return rows


def in_flight_part(seconds: float) -> list[list]:
    base = dataclasses.replace(CARTPOLE, samples_per_insert=CARTPOLE_HELD.samples_per_insert,
                               backend="ray", replay_shards=2)
    one_at_a_time = dataclasses.replace(base, ray_samples_in_flight=1)
    default, single = [], []
    for _ in range(2):  # alternated, so drift in machine load hits both
        default.append(agent_rates(base, seconds))
        single.append(agent_rates(one_at_a_time, seconds))
    rows = []
    for i, what in enumerate(("env frames/s", "updates/s", "learner waiting (share)")):
        d = statistics.median(r[i] for r in default)
        o = statistics.median(r[i] for r in single)
        rows.append([what, d, o, d / o])
    return rows


class _Adder:
    """`fill_replay`'s view of a shard."""

    def __init__(self, shard):
        self.shard = shard

    def add(self, transitions, priorities, streams):
        ray.get(self.shard.add.remote(transitions, priorities, streams))


def sampling_rate(replay, batch_size: int, seconds: float) -> float:
    """Batches/s of sample + update_priorities."""
    rng = np.random.default_rng(0)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        sample = replay.sample(batch_size)
        replay.update_priorities(sample.ids, rng.uniform(size=batch_size))
        count += 1
    return count / (time.perf_counter() - start)


def shards_part(seconds: float, total: int = 20_000, batch_size: int = 512) -> list[list]:
    info = env_info(actor_env_settings(ATARI, 0))
    local = make_replay(ATARI, info)
    fill_replay(local, info, total, np.random.default_rng(0))
    baseline = sampling_rate(local, batch_size, seconds)
    rows = [["1 replay in this process", baseline, baseline, 1.0]]
    ray_cluster.connect("local")
    try:
        for num_shards in (1, 2, 4):
            config = dataclasses.replace(ATARI, num_actors=4, replay_shards=num_shards,
                                         backend="ray")
            cls = ray.remote(ReplayShard).options(num_cpus=0, max_concurrency=8)
            shards = [cls.remote(config, info, k) for k in range(num_shards)]
            for k, shard in enumerate(shards):
                fill_replay(_Adder(shard), info, total // num_shards,
                            np.random.default_rng(k + 1))
            rate = sampling_rate(ShardedReplay(shards, config.importance_exponent, 0),
                                 batch_size, seconds)
            rows.append([f"{num_shards} Ray shard(s)", rate, baseline, rate / baseline])
            for shard in shards:
                ray.kill(shard)
    finally:
        ray_cluster.disconnect()
    return rows


def main():
    parts, seconds = timing.parse_parts(__doc__, "agent,in_flight,shards")
    if "agent" in parts:
        timing.print_table(["Ape-X, 2 actors", "ray", "threads", "ratio ray/threads"],
                           agent_part(seconds))
    if "in_flight" in parts:
        held = CARTPOLE_HELD.samples_per_insert
        timing.print_table([f"CartPole on Ray, held at {held:g} samples/insert",
                            f"{ApexConfig.ray_samples_in_flight} in flight", "1 in flight",
                            "ratio"], in_flight_part(seconds))
    if "shards" in parts:
        timing.print_table(["sample(512) + priorities, Pong, 20K transitions", "batches/s",
                            "in-process batches/s", "ratio"], shards_part(seconds))


if __name__ == "__main__":
    main()
