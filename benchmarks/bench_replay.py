"""Prioritized replay of Atari transitions: ours (FrameStackStorage) against cpprb 11.0.0.

Contenders, each in its own subprocess (so resident memory and allocator state do not leak
between them), filled one after another, then timed in alternating rounds (so they see the same
load on a shared machine):
  ours-chw      PrioritizedReplay + FrameStackStorage, stacks [4, 84, 84] (envpool's layout)
  ours-hwc      the same with stacks [84, 84, 4] (stack_axis=-1, as cpprb needs them)
  cpprb         cpprb.PrioritizedReplayBuffer, obs and next_obs [84, 84, 4] stored in full
  cpprb-packed  the same with next_of="obs", stack_compress="obs" (its memory savers)

Data: synthetic Atari-like n-step (n=3) transitions from 64 env streams, each step shifting the
stack by one random frame; an add batch interleaves 8 streams x 32 steps (an actor with 8 envs).
cpprb-packed assumes consecutive adds are consecutive 1-step transitions of one stream, so on
this data it returns wrong stacks: the `exact` column checks 512 sampled transitions bit for bit.

Measured: add transitions/s (add calls only, batches built outside the timer), sample(512) +
update_priorities(512) per second (median of calls timed in 40 alternating rounds), resident
memory (RSS delta, psutil) after adding 110% of capacity, so that our frame ring has wrapped.
cpprb's full layout needs ~56 GB at 1M transitions, so the side-by-side capacity is 100K; ours
alone is also filled to 1M. Targets: sample+update ratio ours/cpprb >= 1, also against
cpprb-packed (the contender with about our memory); memory <= 1/4 of cpprb.

    .venv/bin/python benchmarks/bench_replay.py [--capacity 100000] [--big_capacity 1000000]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import psutil

import timing

from replay.frames import FrameStackStorage
from replay.prioritized import PrioritizedReplay

H = W = 84
STACK, N_STEP = 4, 3
ALPHA, BETA = 0.6, 0.4  # Ape-X
SAMPLE_BATCH = 512
CONTENDERS = ("ours-chw", "ours-hwc", "cpprb", "cpprb-packed")
GiB = 2**30


class AtariStreams:
    """Deterministic n-step transitions of `num_streams` Atari-like streams, by transition id.

    Frame t of stream s is `pool[(s * 7919 + t) % len(pool)]`; transition (s, t) is
    (stack ending at t, action, reward, discount, stack ending at t + n). Batch b holds streams
    `streams_per_batch` at a time, each advancing `batch_size // streams_per_batch` steps,
    interleaved step-major; the streams of a batch rotate through all `num_streams`.
    """

    def __init__(self, batch_size=256, num_streams=64, streams_per_batch=8, pool=4096,
                 channels_last=False, seed=0):
        if batch_size % streams_per_batch or num_streams % streams_per_batch:
            raise ValueError("batch_size and num_streams must be multiples of streams_per_batch")
        self.batch_size, self.num_streams, self.per_batch = batch_size, num_streams, \
            streams_per_batch
        self.channels_last = channels_last
        self.pool = np.random.default_rng(seed).integers(0, 256, (pool, H, W), np.uint8)

    def stream_time(self, ids):
        """(stream, t) `[B]` of transition ids `[B]`."""
        batch, j = np.divmod(np.asarray(ids), self.batch_size)
        groups = self.num_streams // self.per_batch
        stream = (batch % groups) * self.per_batch + j % self.per_batch
        t = batch // groups * (self.batch_size // self.per_batch) + j // self.per_batch
        return stream, t

    def stacks(self, stream, t):
        """uint8 stacks `[B, 4, H, W]` (or `[B, H, W, 4]`) ending at frame t of each stream."""
        index = (stream[:, None] * 7919 + t[:, None] + np.arange(1 - STACK, 1)) % len(self.pool)
        stacks = self.pool[index]
        return np.ascontiguousarray(np.moveaxis(stacks, 1, -1)) if self.channels_last \
            else stacks

    def transitions(self, ids):
        """Fields `[B, ...]` of transition ids `[B]`, and their streams `[B]`."""
        stream, t = self.stream_time(ids)
        return dict(obs=self.stacks(stream, t), action=(t % 6).astype(np.int32),
                    reward=(t % 3 - 1).astype(np.float32),
                    discount=np.full(len(t), 0.99**N_STEP, np.float32),
                    next_obs=self.stacks(stream, t + N_STEP)), stream

    def batch(self, b):
        return self.transitions(b * self.batch_size + np.arange(self.batch_size))


def make_buffer(name, capacity):
    """Returns (add(fields, streams, priorities), sample_update(rng), sample_ids_fields())."""
    if name.startswith("ours"):
        channels_last = name == "ours-hwc"
        stack = (H, W, STACK) if channels_last else (STACK, H, W)
        spec = dict(obs=(stack, np.uint8), action=((), np.int32), reward=((), np.float32),
                    discount=((), np.float32), next_obs=(stack, np.uint8))
        storage = FrameStackStorage(spec, capacity, stack_axis=-1 if channels_last else 0)
        buffer = PrioritizedReplay(capacity, storage=storage, alpha=ALPHA, beta=BETA)

        def add(fields, streams, priorities):
            buffer.add(fields, priorities, streams=streams)

        def sample_update(rng):
            sample = buffer.sample(SAMPLE_BATCH)
            buffer.update_priorities(sample.ids, rng.random(SAMPLE_BATCH))

        def sample_fields():
            sample = buffer.sample(SAMPLE_BATCH)
            return sample.ids, sample.transitions
        return add, sample_update, sample_fields

    import cpprb
    packed = name == "cpprb-packed"
    env_dict = {"obs": {"shape": (H, W, STACK), "dtype": np.uint8},
                "action": {"dtype": np.int32}, "reward": {}, "discount": {}}
    if not packed:
        env_dict["next_obs"] = {"shape": (H, W, STACK), "dtype": np.uint8}
    kwargs = dict(next_of="obs", stack_compress="obs") if packed else {}
    buffer = cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=ALPHA, **kwargs)
    added = [0]

    def add(fields, streams, priorities):
        buffer.add(**fields, priorities=priorities)
        added[0] += len(priorities)

    def sample_update(rng):
        sample = buffer.sample(SAMPLE_BATCH, beta=BETA)
        buffer.update_priorities(sample["indexes"], rng.random(SAMPLE_BATCH))

    def sample_fields():
        sample = buffer.sample(SAMPLE_BATCH, beta=BETA)
        # cpprb returns slots; the transition id is the latest add that landed there.
        slots = sample["indexes"].astype(np.int64)
        ids = slots + (added[0] - 1 - slots) // capacity * capacity
        return ids, {k: sample[k] for k in ("obs", "action", "next_obs")}
    return add, sample_update, sample_fields


def worker(name, capacity, batch_size):
    """Fills one contender, reports on stdout, then times sample+update calls on request.

    Protocol (stdin/stdout lines of JSON): after filling it prints the fill results; each line
    "N" read makes it time N sample+update calls and print their seconds; EOF ends it.
    """
    data = AtariStreams(batch_size, channels_last=name != "ours-chw")
    process = psutil.Process()
    rss_before = process.memory_info().rss
    add, sample_update, sample_fields = make_buffer(name, capacity)
    rng = np.random.default_rng(1)
    # 10% past full, so the frame ring (6% larger than capacity) has wrapped: steady state.
    add_seconds, batches = 0.0, -(-capacity * 11 // (10 * batch_size))
    for b in range(batches):
        fields, streams = data.batch(b)
        priorities = rng.random(batch_size)
        start = time.perf_counter()
        add(fields, streams, priorities)
        add_seconds += time.perf_counter() - start
    del fields
    rss = process.memory_info().rss - rss_before
    ids, got = sample_fields()
    want, _ = data.transitions(ids)
    exact = all(np.array_equal(got[k].reshape(want[k].shape), want[k]) for k in got)
    for _ in range(50):  # first calls fault pages in (sum tree, output blocks) and run slower
        sample_update(rng)
    print(json.dumps(dict(add_per_s=batches * batch_size / add_seconds, rss=rss, exact=exact)),
          flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            start = time.perf_counter()
            sample_update(rng)
            times.append(time.perf_counter() - start)
        print(json.dumps(times), flush=True)


class Contender:
    """A worker subprocess: filled on creation, then asked for sample+update timings."""

    def __init__(self, name, capacity, batch_size):
        self.name, self.capacity, self.times = name, capacity, []
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", name, "--capacity",
             str(capacity), "--batch_size", str(batch_size)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.fill = self._read()

    def _read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} died (exit code {self.process.wait()})")
        return json.loads(line)

    def time_calls(self, calls):
        self.process.stdin.write(f"{calls}\n")
        self.process.stdin.flush()
        self.times += self._read()

    def result(self):
        self.process.stdin.close()
        self.process.wait()
        return dict(self.fill, name=self.name, capacity=self.capacity,
                    sample_update_per_s=1.0 / statistics.median(self.times))


def measure(names, capacity, args):
    """Fills each contender in turn (alone), then times them in alternating rounds."""
    contenders = []
    try:
        for name in names:
            contenders.append(Contender(name, capacity, args.batch_size))
            print(f"  {name} filled to {capacity}", file=sys.stderr)
        # Alternating rounds expose every contender to the same load on a shared machine.
        for _ in range(args.rounds):
            for c in contenders:
                c.time_calls(args.repeats // args.rounds)
        return {c.name: c.result() for c in contenders}
    finally:
        for c in contenders:
            c.process.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=100_000, help="side-by-side capacity")
    parser.add_argument("--big_capacity", type=int, default=1_000_000,
                        help="capacity for ours-chw alone (0: skip)")
    parser.add_argument("--batch_size", type=int, default=256, help="transitions per add")
    parser.add_argument("--repeats", type=int, default=400,
                        help="timed sample+update calls per contender")
    parser.add_argument("--rounds", type=int, default=40, help="alternations of contenders")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.capacity, args.batch_size)
        return
    results = measure(args.contenders.split(","), args.capacity, args)
    rows = []
    base = results.get("cpprb")
    for name, r in results.items():
        ratio = lambda key: r[key] / base[key] if base else float("nan")  # noqa: E731
        rows.append([name, r["capacity"], r["add_per_s"], ratio("add_per_s"),
                     r["sample_update_per_s"], ratio("sample_update_per_s"), r["rss"] / GiB,
                     ratio("rss"), r["rss"] / r["capacity"], r["rss"] / r["capacity"] * 1e6 / GiB,
                     str(r["exact"])])
    print(f"Side by side at capacity {args.capacity}, add batches of {args.batch_size}, "
          f"sample+update of {SAMPLE_BATCH} (median of {args.repeats}); ratios against cpprb:")
    timing.print_table(["contender", "capacity", "add tr/s", "x cpprb", "sample+update /s", "x cpprb",
                 "RSS GiB", "x cpprb", "bytes/tr", "GiB at 1M", "exact"], rows)
    if base:
        # cpprb-packed holds about the memory ours does: the same-memory contender.
        packed = results.get("cpprb-packed")
        targets = []
        for name in (n for n in results if n.startswith("ours")):
            r = results[name]
            speed = r["sample_update_per_s"] / base["sample_update_per_s"]
            memory = r["rss"] / base["rss"]
            targets += [[name, "sample+update ours/cpprb >= 1", speed,
                         "met" if speed >= 1 else "missed"]]
            if packed:
                speed = r["sample_update_per_s"] / packed["sample_update_per_s"]
                targets += [[name, "sample+update ours/cpprb-packed >= 1", speed,
                             "met" if speed >= 1 else "missed"]]
            targets += [[name, "memory ours/cpprb <= 0.25", memory,
                         "met" if memory <= 0.25 else "missed"]]
        timing.print_table(["contender", "target", "value", "result"], targets)
    if args.big_capacity:
        r = measure(["ours-chw"], args.big_capacity, args)["ours-chw"]
        print(f"ours-chw alone at capacity {args.big_capacity}:")
        timing.print_table(["capacity", "add tr/s", "sample+update /s", "RSS GiB", "bytes/tr",
                     "target RSS <= 8 GiB", "exact"],
                    [[r["capacity"], r["add_per_s"], r["sample_update_per_s"], r["rss"] / GiB,
                      r["rss"] / r["capacity"], "met" if r["rss"] <= 8 * GiB else "missed",
                      str(r["exact"])]])


if __name__ == "__main__":
    main()
