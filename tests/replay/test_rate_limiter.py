"""The replay owns its rate limit: adds and samples wait on it, close() releases them."""

import threading
import time

import numpy as np
import pytest

from replay.prioritized import PrioritizedReplay
from replay.rate_limiter import MinSize, SampleToInsertRatio

SPEC = {"x": ((2,), np.float32)}


def batch(n):
    return {"x": np.ones((n, 2), np.float32)}, np.ones(n)


def in_thread(fn):
    """Runs fn in a thread; returns (thread, box) where box[0] holds its result."""
    box = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    return thread, box


def test_sampling_waits_for_the_warm_up():
    replay = PrioritizedReplay(64, SPEC, rate_limiter=MinSize(10))
    thread, box = in_thread(lambda: replay.sample(4))
    replay.add(*batch(6))
    time.sleep(0.2)
    assert thread.is_alive()  # 6 < 10 inserted
    replay.add(*batch(6))
    thread.join(5)
    assert box and box[0].ids.shape == (4,)


def test_the_ratio_holds_back_whichever_side_runs_ahead():
    limiter = SampleToInsertRatio(samples_per_insert=2.0, min_size=8, tolerance=4)
    replay = PrioritizedReplay(256, SPEC, rate_limiter=limiter)
    # x = 2 * (inserted - 8) - sampled; a sample of 8 needs x >= 4, an insert x <= 4.
    replay.add(*batch(8))  # the warm-up: x = 0
    replay.add(*batch(4))  # x = 8
    assert replay.sample(8) is not None  # x = 0
    thread, box = in_thread(lambda: replay.sample(8))  # the learner is ahead: waits
    time.sleep(0.2)
    assert thread.is_alive()
    replay.add(*batch(4))  # x = 8: the waiting sample goes, x = 0
    thread.join(5)
    assert box and box[0] is not None
    replay.add(*batch(4))  # x = 8: the actors are ahead now
    thread, box = in_thread(lambda: replay.add(*batch(4)))
    time.sleep(0.2)
    assert thread.is_alive()
    replay.sample(8)  # x = 0: the waiting add goes
    thread.join(5)
    assert box and box[0] is not None
    assert limiter.waited_s["insert"] > 0.1 and limiter.waited_s["sample"] > 0.1


@pytest.mark.parametrize("side", ["add", "sample"])
def test_close_releases_waiting_calls_and_adds_nothing(side):
    limiter = SampleToInsertRatio(samples_per_insert=1.0, min_size=4, tolerance=2)
    replay = PrioritizedReplay(64, SPEC, rate_limiter=limiter)
    replay.add(*batch(4))
    replay.add(*batch(3))  # x = 3 > tolerance: adds wait; a sample of 16 needs x >= 14
    call = (lambda: replay.add(*batch(4))) if side == "add" else (lambda: replay.sample(16))
    thread, box = in_thread(call)
    time.sleep(0.2)
    assert thread.is_alive()
    before = replay.stats()
    replay.close()
    thread.join(5)
    assert box == [None] and replay.stats() == before
    assert replay.add(*batch(1)) is None and replay.sample(1) is None


def test_a_restored_replay_keeps_its_warm_up_and_ratio(tmp_path):
    source = PrioritizedReplay(64, SPEC, rate_limiter=MinSize(10))
    source.add(*batch(12))
    source.sample(4)
    source.save(str(tmp_path / "replay.npz"))
    limiter = SampleToInsertRatio(samples_per_insert=1.0, min_size=10, tolerance=4)
    restored = PrioritizedReplay(64, SPEC, rate_limiter=limiter)
    restored.load(str(tmp_path / "replay.npz"))
    # 12 inserted, 4 sampled: 2 more samples allowed at once, a batch of 8 is not.
    assert restored.sample(2) is not None
    thread, box = in_thread(lambda: restored.sample(8))
    time.sleep(0.2)
    assert thread.is_alive()
    restored.close()
    thread.join(5)


def test_bad_limiter_settings_raise():
    with pytest.raises(ValueError, match="min_size"):
        MinSize(-1)
    with pytest.raises(ValueError, match="samples_per_insert"):
        SampleToInsertRatio(0.0, 10, 4)
