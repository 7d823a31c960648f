"""A full run against the limit its own parts set on the same cores (agent steps per second).

For a run config (default: both Pong CPU configs), one after another on the same cores:

- actors alone: the run's actor threads (envpool, policy, transition or unroll building, the
  replay's add or the unroll queue) with nothing learning: a consumer drains IMPALA's queue,
  Ape-X's replay takes inserts without a rate limit;
- learner alone: the run's learner threads (Ape-X: prefetching sampler, update, priorities;
  IMPALA: batching unrolls, update) on what the actors just produced, with no actor running;
  as agent steps per second it supports: IMPALA T x B per update, Ape-X
  batch / samples_per_insert per update;
- the full run: `experiments/run_<agent>.py --flagfile=...` as a user starts it, its rate from
  the run's own train.csv after a warm-up.

Sharing the cores, a full run can at most reach the serial limit 1 / (1/actors + 1/learner);
target: full / limit >= 0.9.

    .venv/bin/python benchmarks/bench_end_to_end.py [--configs impala_pong_cpu,apex_pong_cpu]
        [--seconds 60]
"""

import csv
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import timing

from absl import app, flags

from agents import registry
from agents.run.flags import config_from_flagfile
from agents.run.runner import ThreadRunner
from agents.run.stats import RunStats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
WARMUP_S = 20.0  # compiling, the replay's warm-up, envpool's first resets

flags.DEFINE_list("configs", ["impala_pong_cpu", "apex_pong_cpu"],
                  "flagfiles in experiments/configs (their agent from the name's prefix)")
flags.DEFINE_float("seconds", 60.0, "measured seconds of each of the three, after warm-up")
FLAGS = flags.FLAGS


def flagfile(name: str) -> str:
    return os.path.join(ROOT, "experiments", "configs", f"{name}.cfg")


def agent_of(name: str) -> str:
    agent = name.split("_", 1)[0]
    if agent not in registry.AGENTS:
        raise ValueError(f"configs: {name!r} must start with one of {registry.names()}")
    return agent


def rate_after_warmup(count, seconds: float) -> float:
    """Per-second growth of `count()` over `seconds`, after `WARMUP_S`."""
    time.sleep(WARMUP_S)
    start, t0 = count(), time.perf_counter()
    time.sleep(seconds)
    return (count() - start) / (time.perf_counter() - t0)


def parts(agent_name: str, config, seconds: float) -> tuple[float, float]:
    """(actors alone, learner alone), in agent steps per second."""
    agent_cls = registry.get(agent_name).agent
    if agent_name == "impala":
        steps_per_update = config.unroll_length * config.batch_size
    else:  # inserts never wait: nothing samples while the actors run alone
        steps_per_update = config.batch_size / config.samples_per_insert
        config = dataclasses.replace(config, samples_per_insert=0)
    agent = agent_cls(config, print_fn=lambda *a, **k: None)
    stats, runner = RunStats(), ThreadRunner()
    kept: list = []
    if agent_name == "impala":
        unrolls = agent.runtime.channel

        def drain(stop):  # keeps the newest unrolls for the learner's turn
            while (unroll := unrolls.get_batch(1, stop)) is not None:
                kept.append(unroll)
                del kept[:-config.queue_size]

        runner.start("drain", drain)
    runner.start("actors", lambda stop: agent.runtime.run_actors(agent.param_server, stats,
                                                                 stop))
    actors = rate_after_warmup(lambda: stats.get("env_steps"), seconds)
    runner.stop()

    learner_runner = ThreadRunner()
    if agent_name == "impala":
        def feed(stop):  # the kept unrolls, round and round
            i = 0
            while agent.runtime.channel.put(kept[i % len(kept)], stop):
                i += 1

        learner_runner.start("feed", feed)
    for name, target in agent.learner.threads():
        learner_runner.start(name, target)
    updates = rate_after_warmup(lambda: agent.learner.updates, seconds)
    learner_runner.on_stop(agent.runtime.release)
    learner_runner.stop()
    agent.close()
    return actors, updates * steps_per_update


def full_run(name: str, run_dir: str, seconds: float) -> float:
    """Agent steps per second of the full run, from its train.csv after the warm-up."""
    command = [sys.executable, os.path.join(ROOT, "experiments", f"run_{agent_of(name)}.py"),
               f"--flagfile={flagfile(name)}", f"--run_dir={run_dir}", "--log_period_s=5",
               "--checkpoint_period_s=100000", "--eval_period=100000000"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(WARMUP_S + seconds + 10)  # the first logged period starts at the first update
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    with open(os.path.join(run_dir, "train.csv")) as f:
        rows = list(csv.DictReader(f))
    rates = [float(r["env_steps_per_s"]) for r in rows[int(WARMUP_S // 5):]]
    if not rates:
        raise RuntimeError(f"{name}: no progress rows after the warm-up:\n{err[-3000:]}")
    return statistics.median(rates)


def main(argv):
    del argv
    rows = []
    for name in FLAGS.configs:
        agent_name = agent_of(name)
        with tempfile.TemporaryDirectory() as tmp:
            config = config_from_flagfile(registry.get(agent_name).config, flagfile(name),
                                          run_dir=os.path.join(tmp, "parts"))
            actors, learner = parts(agent_name, config, FLAGS.seconds)
            print(f"{name}: actors alone {actors:.0f}, learner alone {learner:.0f} agent "
                  "steps/s", flush=True)
            full = full_run(name, os.path.join(tmp, "full"), FLAGS.seconds)
        limit = 1.0 / (1.0 / actors + 1.0 / learner)
        rows.append([name, actors, learner, limit, full, full / limit,
                     "met" if full / limit >= 0.9 else "**missed**"])
        print(rows[-1], flush=True)
    timing.print_table(["config", "actors alone", "learner alone", "serial limit", "full run",
                        "full/limit", "target >= 0.9"], rows)


if __name__ == "__main__":
    app.run(main)
