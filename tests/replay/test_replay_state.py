"""A replay's saved state holds what was written, not its preallocated capacity.

An Ape-X checkpoint of a 1,000-step Pong run held the whole preallocated replay (15 GB of
empty frame ring). The state now holds the slots written so far and the ring rows frames went
to; it restores exactly (empty, partly filled, wrapped around), and a state that does not fit
(another capacity, arrays cut short or too long) is still refused.
"""

import os

import numpy as np
import pytest

from replay.frames import FrameStackStorage
from replay.prioritized import PrioritizedReplay

CAPACITY, FRAME = 64, (6, 5)
STACK = 4


def array_replay(capacity=CAPACITY, width=3):
    return PrioritizedReplay(capacity, {"x": ((width,), np.float32), "a": ((), np.int32)},
                             seed=1)


def frame_replay(capacity=CAPACITY, frame=FRAME, frame_capacity=100):
    """A frame ring of 100 rows: 150 transitions wrap it too."""
    obs = ((STACK,) + frame, np.uint8)
    spec = {"obs": obs, "action": ((), np.int32), "next_obs": obs}
    storage = FrameStackStorage(spec, capacity, stack_axis=0, frame_capacity=frame_capacity)
    return PrioritizedReplay(capacity, storage=storage, seed=1)


def add(replay, count, start=0, batch=8):
    """Adds `count` transitions: each of 2 streams shows consecutive frames, so a transition's
    next stack shares 3 frames with its stack (as Atari's do)."""
    rng = np.random.default_rng(start)
    for first in range(start, start + count, batch):
        n = min(batch, start + count - first)
        ids = np.arange(first, first + n)
        if isinstance(replay.storage, FrameStackStorage):
            shape = replay.storage.frame_shape
            frames = lambda t: ((t[:, None] + np.arange(STACK)) % 251)[:, :, None, None] \
                * np.ones(shape, np.uint8)  # [n, stack, H, W]: frame k of a stream is k
            transitions = dict(obs=frames(ids // 2).astype(np.uint8),
                               next_obs=frames(ids // 2 + 1).astype(np.uint8),
                               action=ids.astype(np.int32))
            replay.add(transitions, rng.uniform(0.1, 2.0, n), streams=ids % 2)
        else:
            width = replay.storage.spec["x"][0][0]
            replay.add(dict(x=np.repeat(ids[:, None], width, 1).astype(np.float32),
                            a=ids.astype(np.int32)), rng.uniform(0.1, 2.0, n))


def saved(path):
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def assert_same(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


KINDS = {"arrays": array_replay, "frames": frame_replay}
FILLS = {"empty": 0, "partly filled": 20, "wrapped around": 150}


@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_saved_state_holds_the_filled_part_and_restores_exactly(kind, fill, tmp_path):
    replay = KINDS[kind]()
    add(replay, FILLS[fill])
    if len(replay):
        sample = replay.sample(8)
        replay.update_priorities(sample.ids, np.linspace(0.5, 3.0, 8))
    path = str(tmp_path / "replay.npz")
    replay.save(path)
    state = saved(path)
    filled = min(FILLS[fill], CAPACITY)
    assert len(state["ids"]) == len(state["tree/priorities"]) == filled
    for key, value in state.items():
        if key.startswith("storage/") and value.ndim and "stream" not in key:
            rows = (min(replay.storage.frames_written, replay.storage.frame_capacity)
                    if key == "storage/frames/ring" else filled)
            assert len(value) == rows, key

    restored = KINDS[kind]()
    add(restored, 5, start=1000)  # whatever it held before is replaced
    restored.load(path)
    assert_same(replay.state_dict(), restored.state_dict())
    assert_same(replay.storage.state_dict(), restored.storage.state_dict())  # every slot
    np.testing.assert_array_equal(replay._ids, restored._ids)
    assert replay.stats() == restored.stats() and len(replay) == len(restored)
    add(replay, 12, start=500)
    add(restored, 12, start=500)
    a, b = replay.sample(16), restored.sample(16)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert_same(a.transitions, b.transitions)


def test_a_replay_that_is_filling_saves_small(tmp_path):
    """Capacity 5,000 of 84x84 frames: a 44 MiB ring, of which 12 transitions use 15 rows."""
    replay = frame_replay(capacity=5_000, frame=(84, 84), frame_capacity=None)
    add(replay, 12)
    replay.save(str(tmp_path / "frames.npz"))
    assert os.path.getsize(tmp_path / "frames.npz") < 300_000
    plain = array_replay(capacity=200_000, width=32)  # 26 MiB once full
    add(plain, 12)
    plain.save(str(tmp_path / "plain.npz"))
    assert os.path.getsize(tmp_path / "plain.npz") < 100_000


def whole_state(replay):
    """The state as versions before this layout saved it: every slot and ring row."""
    state = replay.state_dict()
    state.update({f"tree/{k}": v for k, v in replay._tree.state_dict().items()})
    state.update({f"storage/{k}": v for k, v in replay.storage.state_dict().items()})
    state.pop("storage/frames/capacity", None)
    state["ids"] = replay._ids.copy()
    return state


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_state_that_does_not_fit_is_refused_and_one_saved_whole_still_loads(kind):
    source = KINDS[kind]()
    add(source, 20)
    good = source.state_dict()
    field = "storage/data/a" if kind == "arrays" else "storage/data/action"
    broken = {
        "ids cut short": good | {"ids": good["ids"][:10]},
        "ids past the capacity": good | {"ids": np.arange(CAPACITY + 1)},
        "priorities of other slots": good | {"tree/priorities": good["tree/priorities"][:5]},
        "a field cut short": good | {field: good[field][:3]},
        "another capacity": good | {"tree/capacity": np.int64(CAPACITY * 2)},
        "a negative next_id": good | {"next_id": np.int64(-1)},
    }
    if kind == "frames":
        broken |= {
            "another ring": good | {"storage/frames/capacity": np.int64(999)},
            "a ring with rows never written": good | {"storage/frames/ring": np.zeros(
                (good["storage/frames/ring"].shape[0] + 1,) + FRAME, np.uint8)},
            "slot seqs cut short": good | {"storage/frames/slot_seqs":
                                           good["storage/frames/slot_seqs"][:4]},
        }
    replay = KINDS[kind]()
    add(replay, 3, start=77)
    before = replay.state_dict()
    for name, state in broken.items():
        with pytest.raises(ValueError):
            replay.load_state_dict(state)
            pytest.fail(f"{name} was accepted")
        assert_same(before, replay.state_dict())
    replay.load_state_dict(whole_state(source))
    assert_same(good, replay.state_dict())
