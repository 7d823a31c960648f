"""A call of `PrioritizedReplay` that raises leaves the replay exactly as it was.

Property: for add, update_priorities and load, with plain and frame storage, every rejected
input leaves `state_dict()` unchanged, so the counters, `len()` and the contents stay right.
"""

import numpy as np
import pytest

from replay.frames import FrameStackStorage
from replay.prioritized import PrioritizedReplay

SPEC = {"x": ((3,), np.float32), "tag": ((), np.int64)}
FRAME_SPEC = {"obs": ((2, 4, 4), np.uint8), "next_obs": ((2, 4, 4), np.uint8),
              "tag": ((), np.int64)}


def plain_batch(tags):
    tags = np.asarray(tags, np.int64)
    return {"x": np.stack([tags, -tags, tags], axis=1).astype(np.float32), "tag": tags}


def frame_batch(tags):
    tags = np.asarray(tags, np.int64)
    frames = (tags[:, None, None, None] + np.arange(3)[None, :, None, None]) % 251
    frames = np.broadcast_to(frames, (len(tags), 3, 4, 4)).astype(np.uint8)
    return {"obs": frames[:, :2].copy(), "next_obs": frames[:, 1:].copy(), "tag": tags}


def plain_replay(alpha=1.0):
    return PrioritizedReplay(8, SPEC, alpha=alpha)


def frame_replay(alpha=1.0):
    return PrioritizedReplay(8, storage=FrameStackStorage(FRAME_SPEC, 8, stack_axis=0),
                             alpha=alpha)


KINDS = {"plain": (plain_replay, plain_batch, {}),
         "frames": (frame_replay, frame_batch, {"streams": np.zeros(2, np.int64)})}


def assert_same_state(before, after):
    assert sorted(before) == sorted(after)
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=key)


def bad_calls(replay, make_batch, extra):
    """(name, call) pairs that must each raise ValueError."""
    good = make_batch([20, 21])
    huge = np.array([1e308, 1.0])  # passes the replay's own check, overflows the sum tree
    return [
        ("add: priority overflowing the tree", lambda: replay.add(good, huge, **extra)),
        ("add: negative priority", lambda: replay.add(good, [-1.0, 1.0], **extra)),
        ("add: NaN priority", lambda: replay.add(good, [np.nan, 1.0], **extra)),
        ("add: wrong priority count", lambda: replay.add(good, [1.0], **extra)),
        ("add: more than capacity", lambda: replay.add(
            make_batch(np.arange(9)), np.ones(9),
            **({"streams": np.zeros(9, np.int64)} if extra else {}))),
        ("add: missing field", lambda: replay.add(
            {k: v for k, v in good.items() if k != "tag"}, np.ones(2), **extra)),
        ("update: overflowing priority", lambda: replay.update_priorities([0, 1], huge)),
        ("update: float ids", lambda: replay.update_priorities(np.array([0.0, 1.7]),
                                                               [1.0, 1.0])),
        ("update: unknown id", lambda: replay.update_priorities([0, 99], [1.0, 1.0])),
        ("update: infinite priority", lambda: replay.update_priorities([0, 1], [np.inf, 1])),
    ]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_rejected_call_leaves_the_state_unchanged(kind):
    make_replay, make_batch, extra = KINDS[kind]
    replay = make_replay()
    replay.add(make_batch([1, 2]), [1.0, 2.0], **extra)
    replay.add(make_batch([3, 4]), [0.5, 3.0], **extra)
    before = replay.state_dict()
    for name, call in bad_calls(replay, make_batch, extra):
        with pytest.raises(ValueError):
            call()
        assert_same_state(before, replay.state_dict())
    assert len(replay) == 4 and replay.stats()["added"] == 4


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_rejected_state_leaves_the_replay_unchanged(kind, tmp_path):
    make_replay, make_batch, extra = KINDS[kind]
    source = make_replay()
    source.add(make_batch([5, 6]), [1.0, 1.0], **extra)
    good = source.state_dict()
    replay = make_replay()
    replay.add(make_batch([1, 2]), [1.0, 2.0], **extra)
    before = replay.state_dict()

    storage_key = next(k for k in good if k.startswith("storage/"))
    broken = {
        "a storage field missing": {k: v for k, v in good.items() if k != storage_key},
        "a storage field reshaped": good | {storage_key: good[storage_key][:1]},
        "a counter missing": {k: v for k, v in good.items() if k != "counters/added"},
        "a garbage sampler state": good | {"rng": np.array("{not json")},
        "another alpha": good | {"alpha": np.float64(0.5)},
        "a tree of another capacity": good | {"tree/capacity": np.int64(4)},
    }
    for name, state in broken.items():
        with pytest.raises(ValueError):
            replay.load_state_dict(state)
        assert_same_state(before, replay.state_dict())

    garbage = tmp_path / "replay.npz"
    garbage.write_bytes(b"\x80\x04not an archive" * 10)
    with pytest.raises(ValueError, match="not a readable replay archive"):
        replay.load(str(garbage))
    assert_same_state(before, replay.state_dict())
