"""Tests for replay.frames.FrameStackStorage: bit-exact stacks from deduplicated frames.

The reference is a plain copy of every transition kept by slot: whatever the storage shares,
every resident transition must gather back byte for byte.
"""

import numpy as np
import pytest

from replay.frames import FrameStackStorage
from replay.prioritized import PrioritizedReplay

H = W = 84
STACK = 4


def spec(stack_axis=0, frame=(H, W)):
    obs = (STACK,) + frame if stack_axis == 0 else frame + (STACK,)
    return {"obs": (obs, np.uint8), "action": ((), np.int32), "reward": ((), np.float32),
            "discount": ((), np.float32), "next_obs": (obs, np.uint8)}


def make(capacity, stack_axis=0, **kwargs):
    return FrameStackStorage(spec(stack_axis), capacity, stack_axis=stack_axis, **kwargs)


class NStep:
    """Reference n-step builder: (s_t, a_t, sum_k gamma^k r_{t+k}, discount, s_{t+n}) per env.

    At an episode end the pending transitions flush with the final observation as next_obs
    (discount 0 after a termination, gamma^k after a truncation, which bootstraps).
    """

    def __init__(self, n=3, gamma=0.99):
        self.n, self.gamma, self.pending = n, gamma, {}

    def step(self, env, obs, action, reward, next_obs, terminated, truncated):
        pending = self.pending.setdefault(env, [])
        pending.append((obs, action, reward))
        out = []
        while pending and (len(pending) == self.n or terminated or truncated):
            rewards = [r for _, _, r in pending]
            ret = sum(self.gamma ** k * r for k, r in enumerate(rewards))
            discount = 0.0 if terminated else self.gamma ** len(rewards)
            s, a, _ = pending.pop(0)
            out.append((env, dict(obs=s, action=a, reward=ret, discount=discount,
                                  next_obs=next_obs)))
        return out


def batch_of(items, stack_axis=0):
    """Stacks a list of (stream, transition) with channels-first obs into write arguments."""
    fields = {k: np.stack([t[k] for _, t in items]) for k in items[0][1]}
    if stack_axis == -1:
        for k in ("obs", "next_obs"):
            fields[k] = np.ascontiguousarray(np.moveaxis(fields[k], 1, -1))
    fields["action"] = fields["action"].astype(np.int32)
    for k in ("reward", "discount"):
        fields[k] = fields[k].astype(np.float32)
    return fields, np.array([s for s, _ in items])


class Checked:
    """A storage driven like the replay drives it (FIFO slots), checked against full copies."""

    def __init__(self, storage):
        self.storage, self.capacity = storage, storage.capacity
        self.cursor = self.transitions = 0
        self.expected = None
        self.live = np.zeros(self.capacity, bool)
        self.victims = 0

    def write(self, items):
        storage, batch = self.storage, len(items)
        fields, streams = batch_of(items)
        if self.expected is None:
            self.expected = {k: np.zeros((self.capacity,) + v.shape[1:], v.dtype)
                             for k, v in fields.items()}
        slots = (self.cursor + np.arange(batch)) % self.capacity
        self.cursor += batch
        self.transitions += batch
        written, _ = batch_of(items, storage.stack_axis)
        victims = storage.write(slots, written, streams)
        assert not np.isin(victims, slots).any()
        assert self.live[victims].all()  # each victim reported once, and only live slots
        self.live[victims] = False
        self.victims += len(victims)
        for k, v in fields.items():
            self.expected[k][slots] = v
        self.live[slots] = True
        self.check()

    def check(self):
        live = np.flatnonzero(self.live)
        handle = self.storage.locate(live)
        assert self.storage.intact(handle).all()
        got = self.storage.gather(handle)
        if self.storage.stack_axis == -1:
            got = {k: np.moveaxis(v, -1, 1) if k.endswith("obs") else v for k, v in got.items()}
        for k, v in self.expected.items():
            if not np.array_equal(got[k], v[live]):  # (assert_array_equal is 10x slower)
                np.testing.assert_array_equal(got[k], v[live], err_msg=k)


def test_envpool_pong_is_bit_exact_with_one_frame_per_transition():
    """Real Pong with truncations every 40 steps, 4 envs interleaved, the ring wrapping often."""
    envpool = pytest.importorskip("envpool")
    num_envs, capacity = 4, 400
    env = envpool.make("Pong-v5", env_type="gymnasium", num_envs=num_envs, batch_size=num_envs,
                       episodic_life=False, reward_clip=True, repeat_action_probability=0.0,
                       noop_max=30, max_episode_steps=40, stack_num=STACK, seed=0)
    checked = {
        "chw": Checked(make(capacity)),
        "hwc": Checked(make(capacity, -1)),
        # No slack: the ring wraps before the slots do, so some slots must be evicted.
        "tight": Checked(make(capacity, frame_capacity=capacity)),
    }
    rng = np.random.default_rng(0)
    builder, pending = NStep(n=3), []
    obs, _ = env.reset()
    # max_episode_steps counts agent steps (envpool's elapsed_step); after an episode ends the
    # next step returns the new episode's first observation (its action is ignored).
    new_episode = np.zeros(num_envs, bool)
    for step in range(400):
        actions = rng.integers(0, 6, num_envs)
        next_obs, reward, terminated, truncated, info = env.step(actions)
        for i, env_id in enumerate(info["env_id"]):
            if not new_episode[i]:
                pending += builder.step(int(env_id), obs[i].copy(), actions[i], reward[i],
                                        next_obs[i].copy(), terminated[i], truncated[i])
        new_episode = terminated | truncated
        obs = next_obs
        if step % 3 == 2 and pending:
            for c in checked.values():
                c.write(pending)
            pending = []
    env.close()
    for name, c in checked.items():
        assert c.transitions > 3 * capacity, name
    assert checked["chw"].victims == checked["hwc"].victims == 0
    assert checked["tight"].victims > 0
    for name in ("chw", "hwc"):
        storage = checked[name].storage
        assert storage.frames_written / checked[name].transitions < 1.2, name
    assert checked["chw"].storage.frames_written == checked["hwc"].storage.frames_written


def episode(rng, length, n=3, frames=None, frame=(H, W)):
    """Transitions of one synthetic episode of `length` steps (frames f_0 .. f_length).

    The first stack repeats f_0, like envpool's reset; the last n transitions' next_obs is the
    final stack s_length.
    """
    if frames is None:
        frames = rng.integers(0, 256, (length + 1,) + frame, np.uint8)
    padded = np.concatenate([np.repeat(frames[:1], STACK - 1, 0), frames])
    stacks = np.stack([padded[t:t + STACK] for t in range(length + 1)])  # [L + 1, 4, H, W]
    return [dict(obs=stacks[t], action=t, reward=1.0, discount=0.99 ** n,
                 next_obs=stacks[min(t + n, length)]) for t in range(length)]


def interleave(rng, episodes_by_stream):
    """Merges streams' transitions in a random interleaving that keeps each stream in order."""
    queues = {s: [t for ep in eps for t in ep] for s, eps in episodes_by_stream.items()}
    order = np.concatenate([np.full(len(q), s) for s, q in queues.items()])
    rng.shuffle(order)
    cursors = dict.fromkeys(queues, 0)
    out = []
    for s in order.tolist():
        out.append((s, queues[s][cursors[s]]))
        cursors[s] += 1
    return out


def write_all(checked, items, batch=16):
    for i in range(0, len(items), batch):
        checked.write(items[i:i + batch])


@pytest.mark.parametrize("stack_axis", [0, -1])
def test_one_new_frame_per_step_across_resets_and_short_episodes(stack_axis):
    """Exactly L + 1 frames an episode of L steps, including episodes shorter than n = 3."""
    rng = np.random.default_rng(1)
    lengths = {0: [30, 1, 2, 25, 3], 1: [2, 40, 1, 1], 2: [50]}
    episodes = {s: [episode(rng, L) for L in ls] for s, ls in lengths.items()}
    c = Checked(make(60, stack_axis))
    write_all(c, interleave(rng, episodes))
    assert c.victims == 0
    assert c.storage.frames_written == sum(L + 1 for ls in lengths.values() for L in ls)


def test_frames_of_any_size():
    """5 x 7 frames: 35 bytes, hashed as 4 words and a 3-byte tail."""
    rng = np.random.default_rng(9)
    frame = (5, 7)
    episodes = {0: [episode(rng, 12, frame=frame)], 1: [episode(rng, 9, frame=frame)]}
    storage = FrameStackStorage(spec(-1, frame), 30, stack_axis=-1)
    items = interleave(rng, episodes)
    fields, streams = batch_of(items, stack_axis=-1)
    storage.write(np.arange(len(items)), fields, streams)
    assert storage.frames_written == 13 + 10
    for k, v in storage.gather(storage.locate(np.arange(len(items)))).items():
        np.testing.assert_array_equal(v, fields[k], err_msg=k)


def test_identical_frames_are_shared_and_never_confused():
    """Black frames repeat within and across episodes; distinct ones must still be exact."""
    rng = np.random.default_rng(2)
    black = np.zeros((21, H, W), np.uint8)
    mixed = rng.integers(0, 256, (21, H, W), np.uint8)
    mixed[::3] = 0  # every third frame black
    nearly = np.zeros((21, H, W), np.uint8)
    nearly[1::2, 40, 40] = 1  # differs from black in one byte
    episodes = {0: [episode(rng, 20, frames=black)] * 3, 1: [episode(rng, 20, frames=mixed)],
                2: [episode(rng, 20, frames=nearly)]}
    c = Checked(make(100))
    write_all(c, interleave(rng, episodes), batch=7)
    # Black: 1 frame for stream 0, 1 for 1, 2 for 2 (plus the random ones of stream 1).
    assert c.storage.frames_written == 1 + (1 + 14) + 2


def test_small_ring_evicts_slots_and_invalidates_handles():
    """Unshareable stacks (8 new frames each) in a ring of 32 frames: each write of 4 wraps it."""
    storage = make(8, frame_capacity=32)
    rng = np.random.default_rng(3)

    def write(slots):
        fields = {k: np.zeros((len(slots),) + shape, dtype) for k, (shape, dtype) in
                  spec().items()}
        fields["obs"] = rng.integers(0, 256, fields["obs"].shape, np.uint8)
        fields["next_obs"] = rng.integers(0, 256, fields["obs"].shape, np.uint8)
        return fields, storage.write(np.array(slots), fields, np.zeros(len(slots), int))

    fields, victims = write([0, 1, 2, 3])
    assert len(victims) == 0 and storage.frames_written == 32
    handle = storage.locate(np.arange(4))
    assert storage.intact(handle).all()
    np.testing.assert_array_equal(storage.gather(handle)["next_obs"], fields["next_obs"])
    _, victims = write([0, 1, 2, 3])  # destroys the first frames, but of the slots it rewrites
    assert len(victims) == 0
    assert not storage.intact(handle).any()  # a gather racing with that write is detected
    fields, victims = write([4, 5, 6, 7])
    np.testing.assert_array_equal(victims, [0, 1, 2, 3])
    assert not storage.intact(storage.locate(victims)).any()
    handle = storage.locate(np.arange(4, 8))
    assert storage.intact(handle).all()
    np.testing.assert_array_equal(storage.gather(handle)["obs"], fields["obs"])
    with pytest.raises(ValueError, match="frame_capacity=32"):
        write([0, 1, 2, 3, 4])  # 40 frames could not all stay in the ring


def test_state_dict_round_trip_keeps_deduplicating(tmp_path):
    rng = np.random.default_rng(4)
    items = interleave(rng, {0: [episode(rng, 30)], 1: [episode(rng, 30)]})
    live, restored = (Checked(make(50, -1)) for _ in range(2))
    write_all(live, items[:31], batch=8)
    write_all(restored, items[:31], batch=8)
    np.savez(tmp_path / "frames.npz", **restored.storage.state_dict())
    restored.storage = make(50, -1)
    with np.load(tmp_path / "frames.npz", allow_pickle=False) as data:
        restored.storage.load_state_dict({k: data[k] for k in data.files})
    restored.check()
    write_all(live, items[31:], batch=8)
    write_all(restored, items[31:], batch=8)
    assert restored.storage.frames_written == live.storage.frames_written == 2 * 31
    np.testing.assert_array_equal(restored.storage.slot_seqs, live.storage.slot_seqs)


def test_load_state_dict_rejects_other_shapes():
    state = make(10).state_dict()
    with pytest.raises(ValueError, match="frames/ring"):
        make(10, frame_capacity=2000).load_state_dict(state)
    with pytest.raises(ValueError, match="frames/slot_seqs"):
        make(10, frame_capacity=10 + 1024).load_state_dict(
            make(11, frame_capacity=10 + 1024).state_dict())
    with pytest.raises(ValueError, match="frames/written"):
        make(10).load_state_dict(
            {k: v for k, v in state.items() if k != "frames/written"})


def test_prioritized_replay_samples_exact_stacks():
    rng = np.random.default_rng(5)
    items = interleave(rng, {0: [episode(rng, 20)], 7: [episode(rng, 15)]})
    replay = PrioritizedReplay(64, storage=make(64))
    fields, streams = batch_of(items)
    ids = replay.add(fields, np.ones(len(items)), streams=streams)
    sample = replay.sample(32)
    rows = np.searchsorted(ids, sample.ids)
    for k, v in sample.transitions.items():
        np.testing.assert_array_equal(v, fields[k][rows], err_msg=k)


@pytest.mark.parametrize("kwargs, match", [
    (dict(spec={"obs": ((4, 84, 84), np.uint8)}), "not in the spec"),
    (dict(spec={"obs": ((4, 84, 84), np.uint8), "next_obs": ((4, 84, 80), np.uint8)}),
     "different shapes"),
    (dict(spec={"obs": ((4, 84, 84), np.float32), "next_obs": ((4, 84, 84), np.float32)}),
     "uint8"),
    (dict(stack_axis=1), "stack_axis"),
    (dict(frame_capacity=9), "frame_capacity"),
    (dict(capacity=0), "capacity"),
    (dict(obs_fields=("obs",)), "obs_fields"),
])
def test_constructor_validation(kwargs, match):
    args = dict(spec=spec(), capacity=10) | kwargs
    with pytest.raises(ValueError, match=match):
        FrameStackStorage(args.pop("spec"), args.pop("capacity"), **args)


def test_write_requires_streams():
    storage = make(10)
    fields, streams = batch_of([(0, t) for t in episode(np.random.default_rng(6), 2)])
    with pytest.raises(ValueError, match="streams"):
        storage.write(np.arange(2), fields, None)
    with pytest.raises(ValueError, match="streams"):
        storage.write(np.arange(2), fields, streams[:1])


def test_hash_collisions_cost_frames_never_correctness(monkeypatch):
    """With every frame hashing alike, only the byte comparison keeps stacks apart."""
    monkeypatch.setattr(FrameStackStorage, "_hash",
                        lambda self, frames: np.zeros(frames.shape[:-2], np.uint64))
    rng = np.random.default_rng(7)
    c = Checked(make(40))
    write_all(c, interleave(rng, {0: [episode(rng, 30)], 1: [episode(rng, 3)] * 4}), batch=5)
    assert c.storage.frames_written > 31 + 4


def test_reused_frames_are_recent_and_survive_the_write_that_reuses_them():
    storage = make(8, frame_capacity=32)  # reuse window: the newest 8 frames
    rng = np.random.default_rng(8)
    stack = lambda: rng.integers(0, 256, (STACK, H, W), np.uint8)  # noqa: E731
    r = stack()
    first = [(0, dict(obs=stack(), action=0, reward=0.0, discount=1.0, next_obs=stack())),
             (0, dict(obs=r, action=1, reward=0.0, discount=1.0, next_obs=stack()))]
    storage.write(np.array([0, 1]), *batch_of(first))  # r at seqs 8..11, 4 frames before head
    # Repeating r would keep seqs 8..11 but the 28 new frames after it wrap the ring past them.
    second = [(0, dict(obs=r, action=2, reward=0.0, discount=1.0, next_obs=stack()))] + [
        (1, dict(obs=stack(), action=3, reward=0.0, discount=1.0, next_obs=stack()))
        for _ in range(3)]
    storage.write(np.array([2, 3, 4, 5]), *batch_of(second))
    handle = storage.locate(np.array([2, 3, 4, 5]))
    assert storage.intact(handle).all()
    fields, _ = batch_of(second)
    for k, v in storage.gather(handle).items():
        np.testing.assert_array_equal(v, fields[k], err_msg=k)
    # A black screen shown for long is stored again once older than the window.
    black = np.zeros((STACK, H, W), np.uint8)
    still = (2, dict(obs=black, action=0, reward=0.0, discount=1.0, next_obs=black))
    storage.write(np.array([6]), *batch_of([still]))
    storage.write(np.array([7, 0]), *batch_of(second[2:]))  # 16 new frames from stream 1
    head = storage.frames_written
    storage.write(np.array([1]), *batch_of([still]))
    assert storage.frames_written == head + 1
    assert storage.slot_seqs[1].min() == head


def test_frames_sharing_a_hash_but_not_their_bytes_are_both_stored(monkeypatch):
    """Frames hashed by their first byte only. Against the ring (an older frame with the hash)
    the batch still takes the grouped path and stores the new frame; within one batch and
    stream it takes the one-by-one path. Every stack gathers back bit for bit."""
    monkeypatch.setattr(FrameStackStorage, "_hash",
                        lambda self, frames: frames[..., 0, 0].astype(np.uint64))
    rng = np.random.default_rng(10)

    def stack(first_bytes):
        frames = rng.integers(0, 256, (STACK, H, W), np.uint8)
        frames[:, 0, 0] = first_bytes
        return frames

    def transition(first_bytes):
        return dict(obs=stack(first_bytes), action=0, reward=0.0, discount=1.0,
                    next_obs=stack(np.add(first_bytes, STACK)))

    c = Checked(make(16))
    c.write([(0, transition([0, 1, 2, 3]))])
    later = [(0, transition([0, 1, 2, 3]))]  # the same hashes as the ring's frames
    assert c.storage.prepare(*batch_of(later)).groups_exact
    c.write(later)
    assert c.storage.frames_written == 16
    clash = [(1, transition([9, 9, 9, 9]))]  # four distinct frames, one hash, one stream
    assert not c.storage.prepare(*batch_of(clash)).groups_exact
    c.write(clash)
    assert c.storage.frames_written == 16 + 8
