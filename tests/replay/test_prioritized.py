"""Tests for replay.prioritized.PrioritizedReplay with plain array storage."""

import threading

import numpy as np
import pytest
from scipy import stats

from replay.prioritized import PrioritizedReplay
from replay.storage import ArrayStorage

SPEC = {"x": ((3,), np.float32), "tag": ((), np.int64)}


def batch(tags):
    tags = np.asarray(tags, np.int64)
    return {"x": np.stack([tags, 2 * tags + 1, -tags], axis=1).astype(np.float32), "tag": tags}


def test_add_returns_ids_and_sample_returns_what_was_added():
    replay = PrioritizedReplay(8, SPEC)
    ids = replay.add(batch([10, 11, 12]), np.ones(3))
    np.testing.assert_array_equal(ids, [0, 1, 2])
    assert len(replay) == 3
    sample = replay.sample(16)
    assert set(sample.ids) <= {0, 1, 2}
    np.testing.assert_array_equal(sample.transitions["tag"], sample.ids + 10)
    np.testing.assert_array_equal(sample.transitions["x"], batch(sample.ids + 10)["x"])
    assert sample.weights.dtype == np.float32 and sample.weights.shape == (16,)


def test_nbytes_counts_the_full_replay_whether_or_not_it_is_filled():
    replay = PrioritizedReplay(1000, SPEC)
    # x: 3 float32, tag: int64; a complex128 node pair per leaf of 1024; one int64 id per slot.
    want = 1000 * (3 * 4 + 8) + 2 * 1024 * 16 + 1000 * 8
    assert replay.nbytes == want
    replay.add(batch(np.arange(10)), np.ones(10))
    assert replay.nbytes == want


def test_nbytes_of_atari_frame_storage_counts_the_frame_ring():
    from replay.frames import FrameStackStorage
    spec = {"obs": ((4, 84, 84), np.uint8), "action": ((), np.int32),
            "next_obs": ((4, 84, 84), np.uint8)}
    replay = PrioritizedReplay(1000, storage=FrameStackStorage(spec, 1000, stack_axis=0))
    frames = 1000 + 1000 // 16 + 1024  # the default ring
    slot_seqs, oldest = 1000 * 2 * 4 * 8, 1000 * 8
    want = frames * 84 * 84 + slot_seqs + oldest + 1000 * 4 + 2 * 1024 * 16 + 1000 * 8
    assert replay.nbytes == want


def test_sampling_frequencies_follow_priorities_to_the_alpha():
    replay = PrioritizedReplay(10, SPEC, alpha=0.6, priority_epsilon=0.0, seed=1)
    priorities = np.array([0.5, 1, 2, 3, 4, 0, 6, 7, 8, 0.1])
    replay.add(batch(np.arange(10)), priorities)
    counts = np.zeros(10)
    for _ in range(400):
        np.add.at(counts, replay.sample(50).transitions["tag"], 1)
    p = priorities ** 0.6 / np.sum(priorities ** 0.6)
    assert counts[5] == 0  # zero priority (no epsilon) is never drawn
    live = p > 0
    assert stats.chisquare(counts[live], counts.sum() * p[live]).pvalue > 1e-3


def test_importance_weights_match_reference():
    replay = PrioritizedReplay(6, SPEC, alpha=0.7, beta=0.5, priority_epsilon=1e-3)
    priorities = np.array([0.2, 1.0, 3.0, 0.05, 2.0])
    replay.add(batch(np.arange(5)), priorities)
    sample = replay.sample(32)
    scaled = (priorities + 1e-3) ** 0.7
    P = scaled / scaled.sum()
    w = (5 * P) ** -0.5
    np.testing.assert_allclose(sample.probabilities, P[sample.ids], rtol=1e-12)
    np.testing.assert_allclose(sample.weights, w[sample.ids] / w.max(), rtol=1e-6)
    replay.beta = 1.0
    np.testing.assert_allclose(replay.sample(4).weights <= 1.0, True)


def test_fifo_eviction_and_counters():
    replay = PrioritizedReplay(5, SPEC)
    replay.add(batch(np.arange(4)), np.ones(4))
    replay.add(batch(np.arange(4, 7)), np.ones(3))
    assert len(replay) == 5
    tags = set(replay.sample(200).transitions["tag"])
    assert tags == {2, 3, 4, 5, 6}
    s = replay.stats()
    assert (s["added"], s["evicted"], s["size"]) == (7, 2, 5)


def test_stale_priority_updates_are_dropped():
    replay = PrioritizedReplay(4, SPEC, priority_epsilon=0.0, alpha=1.0)
    replay.add(batch(np.arange(4)), np.ones(4))
    replay.add(batch([100, 101]), np.ones(2))  # overwrites ids 0 and 1 (slots 0 and 1)
    assert replay.update_priorities([0, 1, 2, 3], np.full(4, 1000.0)) == 2
    # The new transitions in slots 0 and 1 kept their own priority of 1.
    sample = replay.sample(64)
    expected = {4: 1.0, 5: 1.0, 2: 1000.0, 3: 1000.0}
    np.testing.assert_allclose(sample.probabilities,
                               [expected[i] / 2002.0 for i in sample.ids])
    s = replay.stats()
    assert (s["updates_applied"], s["updates_stale"]) == (2, 2)


def test_duplicate_ids_in_one_update_last_wins():
    replay = PrioritizedReplay(3, SPEC, alpha=1.0, priority_epsilon=0.0)
    replay.add(batch([0, 1, 2]), np.ones(3))
    replay.update_priorities([1, 1, 2], [5.0, 2.0, 1.0])
    sample = replay.sample(30)
    expected = np.array([1.0, 2.0, 1.0]) / 4.0
    np.testing.assert_allclose(sample.probabilities, expected[sample.ids])


@pytest.mark.parametrize("bad", [[-1.0, 1.0], [np.nan, 1.0], [np.inf, 1.0]])
def test_bad_priorities_raise_and_change_nothing(bad):
    replay = PrioritizedReplay(4, SPEC)
    replay.add(batch([0, 1]), np.ones(2))
    before = replay.state_dict()
    with pytest.raises(ValueError, match="priorities"):
        replay.add(batch([2, 3]), bad)
    with pytest.raises(ValueError, match="priorities"):
        replay.update_priorities([0, 1], bad)
    after = replay.state_dict()
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=key)


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match="capacity"):
        PrioritizedReplay(0, SPEC)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedReplay(4, SPEC, alpha=1.5)
    replay = PrioritizedReplay(4, SPEC)
    with pytest.raises(ValueError, match="empty"):
        replay.sample(2)
    with pytest.raises(ValueError, match="beta"):
        replay.beta = -0.1
    with pytest.raises(ValueError, match="tag"):
        replay.add({"x": np.zeros((2, 3), np.float32), "tag": np.zeros((3,), np.int64)},
                   np.ones(2))
    with pytest.raises(ValueError, match="fields"):
        replay.add({"x": np.zeros((2, 3), np.float32)}, np.ones(2))
    with pytest.raises(ValueError, match="batch_size"):
        replay.sample(0)
    with pytest.raises(ValueError, match="ids"):
        replay.update_priorities([7], [1.0])
    assert replay.stats()["added"] == 0


def test_save_and_load_resume_identically(tmp_path):
    replay = PrioritizedReplay(6, SPEC, seed=3)
    replay.add(batch(np.arange(5)), np.arange(1, 6))
    replay.add(batch(np.arange(5, 9)), np.arange(6, 10))
    replay.update_priorities(replay.sample(4).ids, [3.0, 1.0, 2.0, 5.0])
    path = str(tmp_path / "replay.npz")
    replay.save(path)
    restored = PrioritizedReplay(6, SPEC, seed=99)
    restored.load(path)
    assert restored.stats() == replay.stats()
    a, b = replay.sample(8), restored.sample(8)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.weights, b.weights)
    for name in SPEC:
        np.testing.assert_array_equal(a.transitions[name], b.transitions[name])
    np.testing.assert_array_equal(replay.add(batch([50]), [1.0]), restored.add(batch([50]), [1.0]))
    with pytest.raises(ValueError, match="capacity"):
        PrioritizedReplay(7, SPEC).load(path)


def test_concurrent_adders_and_sampler_lose_and_corrupt_nothing():
    capacity, num_adders, adds_per_thread, add_batch = 300, 4, 150, 7
    replay = PrioritizedReplay(capacity, SPEC, seed=0)
    added = {}  # id -> tag, filled by the adders
    errors, sampled_batches = [], [0]
    done = threading.Event()

    def adder(k):
        try:
            for i in range(adds_per_thread):
                tags = (k * 1_000_000 + i * add_batch + np.arange(add_batch))
                ids = replay.add(batch(tags), np.random.default_rng(i).uniform(size=add_batch))
                added.update(zip(ids.tolist(), tags.tolist()))
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    def sampler():
        try:
            while not done.is_set():
                if len(replay) == 0:
                    continue
                s = replay.sample(32)
                # Each row must be whole: its fields all derive from one tag.
                np.testing.assert_array_equal(s.transitions["x"], batch(s.transitions["tag"])["x"])
                replay.update_priorities(s.ids, np.abs(s.transitions["x"][:, 0]) % 7 + 0.1)
                sampled_batches[0] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=adder, args=(k,)) for k in range(num_adders)]
    sampler_thread = threading.Thread(target=sampler)
    sampler_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    done.set()
    sampler_thread.join(timeout=60)
    assert not errors, errors
    total = num_adders * adds_per_thread * add_batch
    s = replay.stats()
    assert s["added"] == total and s["size"] == capacity and s["evicted"] == total - capacity
    assert sorted(added) == list(range(total))
    assert sampled_batches[0] > 0
    # Every resident slot holds exactly the transition its id was added with.
    state = replay.state_dict()
    resident_ids = state["ids"]
    assert sorted(resident_ids) == list(range(total - capacity, total))
    np.testing.assert_array_equal(state["storage/data/tag"], [added[i] for i in resident_ids])


def test_rows_overwritten_during_the_unlocked_copy_are_redrawn():
    class RacingStorage(ArrayStorage):
        """Lets an actor overwrite every slot while the sampler copies outside the lock."""

        race = True

        def gather(self, handle):
            out = super().gather(handle)
            if self.race:
                self.race = False
                replay.add(batch(np.arange(100, 104)), np.ones(4))
            return out

    replay = PrioritizedReplay(4, storage=RacingStorage(SPEC, 4))
    replay.add(batch(np.arange(4)), np.ones(4))
    sample = replay.sample(8)
    assert set(sample.ids) <= {4, 5, 6, 7}
    np.testing.assert_array_equal(sample.transitions["tag"], sample.ids + 96)
    assert replay.stats()["redrawn"] == 8
