"""The arithmetic of a run's env steps over several processes: each process's share of the
budget at a start (resumed with as many processes, fewer or more), the counts' exact sum across
processes, and `RunStats` reading the run's total while its budget counts its own steps."""

import threading

import jax
import numpy as np
import pytest

from agents.parallel import sharding
from agents.parallel.step_counts import decode, encode, make_sync, process_share
from agents.run.stats import RunStats


def shares(total, done, n):
    return [process_share(total, done, n, i) for i in range(n)]


def test_shares_add_up_to_what_is_left_and_differ_by_at_most_one():
    for total, done, n in [(12_000, 0, 2), (12_001, 3_000, 2), (10, 3, 4), (7, 0, 3),
                           (50_000_000, 12_345_677, 8)]:
        parts = shares(total, done, n)
        assert sum(parts) == total - done
        assert max(parts) - min(parts) <= 1


def test_a_resume_with_another_process_count_splits_the_total_left():
    # 2 -> 1: the checkpoint holds both processes' 8,000 steps; one process does the rest.
    assert shares(12_000, 8_000, 1) == [4_000]
    # 1 -> 2: 4,000 done by one process; the two share the 8,000 left.
    assert shares(12_000, 4_000, 2) == [4_000, 4_000]
    # Nothing left (a resume past the budget): no process takes a step.
    assert shares(12_000, 12_500, 3) == [0, 0, 0]


def test_a_process_id_outside_the_job_is_refused():
    with pytest.raises(ValueError, match=r"process_id must be in \[0, num_processes=2\)"):
        process_share(100, 0, 2, 2)


def test_counts_sum_exactly_beyond_int32():
    counts = [[2**31 - 1, 5], [2**31 + 7, 0], [3, 2**40]]  # three processes' counts
    summed = np.sum([encode(c) for c in counts], axis=0, dtype=np.int32)  # as the device sums
    assert decode(summed) == [2**32 + 9, 2**40 + 5]
    with pytest.raises(ValueError, match="counts must be in"):
        encode([-1])


def test_sync_on_one_process_returns_its_own_counts_and_stop():
    sync = make_sync(sharding.learner_mesh(jax.devices()[:1]))
    assert sync(False, [3_000_000_000, 4]) == (False, [3_000_000_000, 4])
    assert sync(True, [0, 0]) == (True, [0, 0])


def test_stats_read_the_run_total_and_budget_their_own_steps():
    stats = RunStats()
    stats.load_state_dict({"env_steps": 8_000, "episodes": 40, "wall_ms": 0})
    stop = threading.Event()
    stats.stop_at("env_steps", 8_000 + 100, stop)  # this process's share: 100 more
    stats.add(env_steps=60)
    assert stats.since_start(("env_steps", "episodes")) == [60, 0]
    stats.set_others({"env_steps": 500, "episodes": 3})  # the other processes' since the start
    assert stats.get("env_steps") == 8_560
    assert stats.snapshot()["episodes"] == 43
    assert stats.state_dict() == {"env_steps": 8_560, "episodes": 43, "wall_ms": 0}
    assert not stop.is_set()  # the others' steps do not spend this process's share
    stats.add(env_steps=40)
    assert stop.is_set()
    # A resume from that checkpoint counts on from the total.
    again = RunStats()
    again.load_state_dict(stats.state_dict())
    assert again.get("env_steps") == 8_600 and again.since_start(("env_steps",)) == [0]
