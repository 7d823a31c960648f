"""Replay under contention: 4 adding threads and 1 sampling/updating thread sharing one lock.

PrioritizedReplay with FrameStackStorage (Atari stacks [4, 84, 84], capacity 200K, filled
first) from benchmarks/bench_replay.py's synthetic streams. Each adder is an actor with 8 envs:
batches of 64 transitions (8 streams x 8 steps), premade so that the measurement is the replay,
not the batch making. The sampler is a learner without a network: sample(512), then
update_priorities(512). Three phases of `--duration` seconds each: adders alone, sampler alone,
both together; the table shows how much each side keeps of its solo rate when sharing the lock
(and the 2 cores of this machine: the GIL and memory bandwidth are shared too).

    .venv/bin/python benchmarks/bench_replay_contention.py [--duration 30] [--capacity 200000]
"""

import argparse
import os
import threading
import time

import numpy as np

import timing
from bench_replay import SAMPLE_BATCH, AtariStreams, make_buffer

ADDERS, ADD_BATCH, PREMADE_BATCHES = 4, 64, 16


class Worker(threading.Thread):
    """Calls `step()` (returning how many items it handled) until stopped; keeps any error."""

    def __init__(self, step, stop):
        super().__init__(daemon=True)
        self.step, self.stop, self.count, self.error = step, stop, 0, None

    def run(self):
        try:
            while not self.stop.is_set():
                self.count += self.step()
        except BaseException as e:  # re-raised by the main thread
            self.error = e
            self.stop.set()


def adder_step(add, thread, rate):
    """An actor's add: premade consecutive batches of its own 32 streams, cycled.

    With `rate` (transitions/s for this adder), it sleeps between adds like an actor that waits
    for its envs; without, it adds as fast as it can.
    """
    data = AtariStreams(ADD_BATCH, num_streams=32, streams_per_batch=8, seed=thread + 1)
    batches = [data.batch(b) for b in range(PREMADE_BATCHES)]
    rng, state = np.random.default_rng(thread), {"i": 0, "start": None}

    def step():
        if state["start"] is None:
            state["start"] = time.perf_counter()
        if rate:
            time.sleep(max(0.0, state["start"] + state["i"] * ADD_BATCH / rate
                           - time.perf_counter()))
        fields, streams = batches[state["i"] % PREMADE_BATCHES]
        state["i"] += 1
        add(fields, streams + 1000 * (thread + 1), rng.random(ADD_BATCH))
        return ADD_BATCH
    return step


def run_phase(steps, duration):
    """Runs one Worker per step function for `duration` s; returns each one's count per s."""
    stop = threading.Event()
    workers = [Worker(step, stop) for step in steps]
    start = time.perf_counter()
    for w in workers:
        w.start()
    stop.wait(duration)
    stop.set()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    for w in workers:
        if w.error is not None:
            raise w.error
    return [w.count / elapsed for w in workers]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per phase")
    parser.add_argument("--capacity", type=int, default=200_000)
    parser.add_argument("--add_rate", type=float, default=0.0,
                        help="total transitions/s the adders aim for (0: as fast as they can)")
    args = parser.parse_args()
    add, sample_update, _ = make_buffer("ours-chw", args.capacity)
    fill = AtariStreams(256, seed=0)
    rng = np.random.default_rng(0)
    for b in range(-(-args.capacity // 256)):
        fields, streams = fill.batch(b)
        add(fields, streams, rng.random(256))
    sampler_rng = np.random.default_rng(1)

    def sampler():
        sample_update(sampler_rng)
        return 1

    adders = lambda: [adder_step(add, t, args.add_rate / ADDERS)  # noqa: E731
                      for t in range(ADDERS)]
    alone_in = sum(run_phase(adders(), args.duration))
    alone_out = run_phase([sampler], args.duration)[0]
    *together_in, together_out = run_phase(adders() + [sampler], args.duration)
    together_in = sum(together_in)
    print(f"FrameStackStorage [4, 84, 84] at capacity {args.capacity}; {ADDERS} adders x "
          f"{ADD_BATCH} transitions, 1 sampler of sample({SAMPLE_BATCH}) + "
          f"update_priorities({SAMPLE_BATCH}); adders aim for "
          f"{args.add_rate or 'unlimited'} transitions/s; {args.duration:g} s per phase, "
          f"{os.cpu_count()} CPUs")
    timing.print_table(["phase", "transitions/s in", "batches/s out", "in vs alone",
                        "out vs alone"],
                [["adders alone", alone_in, "-", 1.0, "-"],
                 ["sampler alone", "-", alone_out, "-", 1.0],
                 ["together", together_in, together_out, together_in / alone_in,
                  together_out / alone_out]])


if __name__ == "__main__":
    main()
