"""Sum tree: replay.sum_tree.SumTree against cpprb's C++ segment tree, at capacity 2^20 and 10^6.

cpprb 11.0.0 keeps its sum and min segment trees inside `PrioritizedReplayBuffer` (the Cython
sampler exposes no methods), so it is measured through the buffer: a buffer of tiny items
(env_dict {"a": {"shape": 1}}, alpha=1, eps=0) filled to capacity with the same priorities as
our tree. Its `sample(512)` also gathers the 512 tiny items and computes importance weights
(p_i / p_min) ** -beta, so our `sample` is shown alone and with the same weights computed
(`get` + `min`). `set(512)` is compared with `update_priorities` of the same random indices and
priorities. Calls alternate between the two, timed with perf_counter_ns; medians after warm-up.
Target: ours within 1.5x of cpprb (ratio ours/cpprb <= 1.5).

    .venv/bin/python benchmarks/bench_sum_tree.py [--repeats 5000]
"""

import argparse
import statistics
import time

import numpy as np

import timing

import cpprb

from replay.sum_tree import SumTree

BETA = 0.4  # Schaul et al. 2016's importance-sampling exponent at the start of training.
TARGET_RATIO = 1.5


def interleaved_medians_us(fns, *, repeats, warmup):
    """Median microseconds per call of each function, called in alternation."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter_ns()
            fn()
            times[name].append(time.perf_counter_ns() - start)
    return {name: statistics.median(t) / 1e3 for name, t in times.items()}


def cycle(batches):
    """Returns a function that gives the next (indices, priorities) pair on each call."""
    state = {"i": 0}

    def next_batch():
        state["i"] = (state["i"] + 1) % len(batches)
        return batches[state["i"]]

    return next_batch


def bench_capacity(capacity, batch_size, repeats, warmup):
    rng = np.random.default_rng(0)
    priorities = rng.random(capacity) + 1e-3
    tree = SumTree(capacity)
    start = time.perf_counter()
    tree.set(np.arange(capacity), priorities)
    fill_ours = time.perf_counter() - start
    buffer = cpprb.PrioritizedReplayBuffer(
        capacity, {"a": {"shape": 1}}, alpha=1.0, eps=0.0)
    start = time.perf_counter()
    buffer.add(a=np.zeros((capacity, 1), np.float32), priorities=priorities)
    fill_cpprb = time.perf_counter() - start
    assert buffer.get_stored_size() == capacity
    print(f"capacity {capacity}: fill {fill_ours * 1e3:.0f} ms ours, "
          f"{fill_cpprb * 1e3:.0f} ms cpprb (add of {capacity} tiny items)")

    # Fresh random batches each call, shared by both, so neither gets a warm cache of one batch.
    batches = [(rng.integers(0, capacity, batch_size), rng.random(batch_size) + 1e-3)
               for _ in range(64)]
    ours_batch, cpprb_batch = cycle(batches), cycle(batches)
    sample_rng = np.random.default_rng(1)

    def ours_sample_weights():
        indices = tree.sample(batch_size, sample_rng)
        return (tree.get(indices) / tree.min) ** -BETA

    rows = []
    for op, ours, theirs in [
        (f"sample({batch_size})", lambda: tree.sample(batch_size, sample_rng),
         lambda: buffer.sample(batch_size, beta=BETA)),
        (f"sample({batch_size})+IS weights", ours_sample_weights,
         lambda: buffer.sample(batch_size, beta=BETA)),
        (f"set({batch_size})", lambda: tree.set(*ours_batch()),
         lambda: buffer.update_priorities(*cpprb_batch())),
    ]:
        t = interleaved_medians_us(dict(ours=ours, cpprb=theirs), repeats=repeats, warmup=warmup)
        ratio = t["ours"] / t["cpprb"]
        met = "met" if ratio <= TARGET_RATIO else "missed"
        rows.append([capacity, op, t["ours"], t["cpprb"], ratio, met])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5000, help="timed calls per op")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per op first")
    parser.add_argument("--batch_size", type=int, default=512)
    args = parser.parse_args()
    rows = []
    for capacity in (2**20, 10**6):
        rows += bench_capacity(capacity, args.batch_size, args.repeats, args.warmup)
    print("cpprb sample() also gathers the tiny items and computes IS weights; cpprb stores "
          "priorities as float32, ours as float64.")
    timing.print_table(["capacity", "op", "ours us", "cpprb us", "ratio ours/cpprb",
                 f"target <= {TARGET_RATIO}"], rows)


if __name__ == "__main__":
    main()
