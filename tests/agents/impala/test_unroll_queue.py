"""IMPALA's channel: the bounded queue of unrolls (backpressure, dynamic batching, close)."""

import threading
import time

import numpy as np
import pytest

from agents.impala.unroll import Unrolls, stack_unrolls
from agents.impala.unroll_queue import UnrollQueue, split_unrolls

T = 3


def unrolls(k: int, first_env: int = 0) -> Unrolls:
    """K distinguishable unrolls of T steps (env ids first_env..first_env+K-1)."""
    ids = np.arange(first_env, first_env + k, dtype=np.int64)
    return Unrolls(obs=np.repeat(ids, (T + 1) * 4).reshape(k, T + 1, 4).astype(np.float32),
                   actions=np.zeros((k, T), np.int32), rewards=np.zeros((k, T), np.float32),
                   discounts=np.ones((k, T), np.float32), episode_ends=np.zeros((k, T), bool),
                   masks=np.ones((k, T), np.float32),
                   behaviour_logits=np.zeros((k, T, 2), np.float32),
                   param_versions=np.zeros((k, T), np.int64), env_ids=ids)


def test_split_and_stack_round_trip():
    whole = unrolls(3)
    parts = split_unrolls(whole)
    assert len(parts) == 3 and parts[1].obs.shape == (1, T + 1, 4)
    for a, b in zip(stack_unrolls(parts), whole):
        np.testing.assert_array_equal(a, b)


def test_put_counts_unrolls_not_groups_and_get_batch_keeps_their_order():
    q, stop = UnrollQueue(8), threading.Event()
    assert q.put(unrolls(3), stop) and q.put(unrolls(2, first_env=3), stop)
    assert len(q) == 5 and q.status() == dict(queue=5)
    batch = q.get_batch(4, stop)
    np.testing.assert_array_equal(batch.env_ids, [0, 1, 2, 3])
    assert batch.obs.shape == (4, T + 1, 4) and len(q) == 1


def test_a_full_queue_holds_the_actor_back_until_the_learner_takes_a_batch():
    q, stop, result = UnrollQueue(2), threading.Event(), []
    assert q.put(unrolls(2), stop)
    producer = threading.Thread(target=lambda: result.append(q.put(unrolls(1, 2), stop)))
    producer.start()
    time.sleep(0.3)
    assert producer.is_alive() and len(q) == 2  # waiting, not growing
    assert q.get_batch(1, stop).env_ids.tolist() == [0]  # room: the producer gets through
    producer.join(timeout=2)
    assert result == [True] and len(q) == 2


@pytest.mark.parametrize("how", ["stop", "close"])
def test_stop_or_close_wakes_a_waiting_put_and_get_batch(how):
    full, empty, stop, result = UnrollQueue(1), UnrollQueue(4), threading.Event(), []
    assert full.put(unrolls(1), stop)
    waiting = [threading.Thread(target=lambda: result.append(full.put(unrolls(1), stop))),
               threading.Thread(target=lambda: result.append(empty.get_batch(1, stop)))]
    for t in waiting:
        t.start()
    time.sleep(0.3)
    assert all(t.is_alive() for t in waiting)  # a full queue, an empty one
    if how == "stop":
        stop.set()
    else:
        full.close()
        empty.close()
    for t in waiting:
        t.join(timeout=2)
    assert not any(t.is_alive() for t in waiting) and sorted(map(str, result)) == ["False",
                                                                                  "None"]


def test_get_batch_counts_the_time_it_waited():
    q, stop = UnrollQueue(4), threading.Event()
    threading.Timer(0.3, lambda: q.put(unrolls(1), stop)).start()
    assert q.get_batch(1, stop) is not None and q.waited_s >= 0.25


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="queue_size must be >= 1"):
        UnrollQueue(0)
