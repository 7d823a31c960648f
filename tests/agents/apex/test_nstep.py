"""Tests for agents.apex.nstep.NStepBuilder against a slow per-env list reference."""

import envpool
import numpy as np
import pytest

from agents.apex.nstep import NStepBuilder


class ReferenceNStep:
    """Obviously correct n-step builder: per env a list of pending entries, float64 sums."""

    def __init__(self, n, gamma):
        self.n, self.gamma, self.pending = n, gamma, {}

    def step(self, env_ids, obs, rewards, terminated, truncated, first, q_values, actions):
        out = []  # (env, obs, action, reward, discount, next_obs, priority)
        for b, env in enumerate(env_ids):
            env = int(env)
            if first[b]:
                self.pending[env] = []
            entries = self.pending.setdefault(env, [])
            for entry in entries:
                entry["rewards"].append(float(rewards[b]))
            final = terminated[b] or truncated[b]
            keep = []
            for entry in entries:
                m = len(entry["rewards"])
                if final or m == self.n:
                    ret = sum(self.gamma ** k * r for k, r in enumerate(entry["rewards"]))
                    discount = 0.0 if terminated[b] else self.gamma ** m
                    priority = abs(ret + discount * np.max(q_values[b]) - entry["q"])
                    out.append((env, entry["obs"], entry["action"], ret, discount,
                                obs[b].copy(), priority))
                else:
                    keep.append(entry)
            if not final:
                keep.append(dict(obs=obs[b].copy(), action=int(actions[b]),
                                 q=float(q_values[b, actions[b]]), rewards=[]))
            self.pending[env] = keep
        return out


def by_env(rows):
    grouped = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    return grouped


def assert_same(output, reference_rows):
    """Checks one step's output against the reference's rows: same per-env lists, in order."""
    if output is None:
        assert reference_rows == []
        return
    t, p, s = output
    assert t["action"].dtype == np.int32 and t["reward"].dtype == np.float32
    assert t["discount"].dtype == np.float32 and p.dtype == np.float32 and s.dtype == np.int64
    rows = [(int(s[i]), t["obs"][i], t["action"][i], t["reward"][i], t["discount"][i],
             t["next_obs"][i], p[i]) for i in range(len(s))]
    got, want = by_env(rows), by_env(reference_rows)
    assert got.keys() == want.keys()
    for env in want:
        assert len(got[env]) == len(want[env])
        for g, w in zip(got[env], want[env]):
            np.testing.assert_array_equal(g[1], w[1])  # obs
            assert g[2] == w[2]  # action
            np.testing.assert_allclose(g[3], w[3], rtol=1e-6, atol=1e-6)  # reward
            np.testing.assert_allclose(g[4], w[4], rtol=1e-6, atol=0)  # discount, exact 0
            np.testing.assert_array_equal(g[5], w[5])  # next_obs
            np.testing.assert_allclose(g[6], w[6], rtol=1e-5, atol=1e-5)  # priority


def random_stream(rng, num_envs, steps, num_actions, obs_shape, max_len=6, dtype=np.float32):
    """Yields recv batches of interleaved envs with episodes of 1..max_len steps.

    Each env's episode ends terminated, truncated or both; the next observation of the env is
    the first of a new episode. Observation values count up, so each one is unique.
    """
    counter = 0
    state = [dict(t=None, length=0) for _ in range(num_envs)]  # t=None: next obs is a first
    for _ in range(steps):
        batch = rng.integers(1, num_envs + 1)
        env_ids = rng.permutation(num_envs)[:batch]
        obs = np.zeros((batch,) + obs_shape, dtype)
        rewards = np.zeros(batch)
        terminated = np.zeros(batch, bool)
        truncated = np.zeros(batch, bool)
        first = np.zeros(batch, bool)
        for b, env in enumerate(env_ids):
            s = state[env]
            obs[b] = counter % 256 if dtype == np.uint8 else counter
            counter += 1
            if s["t"] is None:
                s["t"], s["length"] = 0, rng.integers(1, max_len + 1)
                first[b] = True
                continue
            s["t"] += 1
            rewards[b] = rng.normal()
            if s["t"] == s["length"]:
                kind = rng.integers(3)
                terminated[b], truncated[b] = kind in (0, 2), kind in (1, 2)
                s["t"] = None
        q_values = rng.normal(size=(batch, num_actions))
        actions = rng.integers(0, num_actions, batch)
        yield env_ids, obs, rewards, terminated, truncated, first, q_values, actions


@pytest.mark.parametrize("n, gamma, num_envs", [(3, 0.9, 5), (1, 0.99, 3), (4, 0.5, 1),
                                                (2, 1.0, 4), (3, 0.0, 2)])
@pytest.mark.parametrize("check_inputs", [True, False])  # actors build without the checks
def test_matches_reference_on_random_interleaved_streams(n, gamma, num_envs, check_inputs):
    rng = np.random.default_rng(n * 10 + num_envs)
    obs_shape = (2, 3)
    builder = NStepBuilder(num_envs, n, gamma, obs_shape, np.float32, check_inputs=check_inputs)
    reference = ReferenceNStep(n, gamma)
    emitted = 0
    for batch in random_stream(rng, num_envs, 300, 4, obs_shape):
        output = builder.step(*batch)
        assert_same(output, reference.step(*batch))
        emitted += 0 if output is None else len(output.streams)
        assert builder.pending() == sum(len(v) for v in reference.pending.values())
    assert emitted > 100


def test_hand_computed_returns_discounts_and_priorities():
    gamma = 0.5
    for end, discounts in [("terminated", [0.125, 0.0, 0.0, 0.0]),
                           ("truncated", [0.125, 0.125, 0.25, 0.5]),
                           ("both", [0.125, 0.0, 0.0, 0.0])]:
        builder = NStepBuilder(1, 3, gamma, (), np.float32)
        q = np.array([[1.0, 2.0], [0.0, 3.0], [4.0, -1.0], [0.5, 0.0], [10.0, 20.0]])
        actions = np.array([1, 0, 0, 1, 0])
        rewards = [0.0, 1.0, 2.0, 3.0, 4.0]
        outputs = []
        for t in range(5):
            last = t == 4
            outputs.append(builder.step(
                [0], [float(t)], [rewards[t]], [last and end != "truncated"],
                [last and end != "terminated"], [t == 0], q[t:t + 1], actions[t:t + 1]))
        assert outputs[:3] == [None] * 3
        first_out, last_out = outputs[3], outputs[4]
        np.testing.assert_array_equal(first_out.transitions["obs"], [0.0])
        np.testing.assert_array_equal(first_out.transitions["next_obs"], [3.0])
        np.testing.assert_allclose(first_out.transitions["reward"], [1 + 0.5 * 2 + 0.25 * 3])
        # |R + gamma^3 max Q(o3) - Q(o0, a0=1)| = |2.75 + 0.125 * 0.5 - 2|
        np.testing.assert_allclose(first_out.priorities, [abs(2.75 + 0.125 * 0.5 - 2.0)])
        t = last_out.transitions
        np.testing.assert_array_equal(t["obs"], [1.0, 2.0, 3.0])  # oldest first
        np.testing.assert_array_equal(t["next_obs"], [4.0, 4.0, 4.0])
        np.testing.assert_array_equal(t["action"], [0, 0, 1])
        np.testing.assert_allclose(t["reward"], [2 + 0.5 * 3 + 0.25 * 4, 3 + 0.5 * 4, 4.0])
        np.testing.assert_array_equal(
            np.concatenate([first_out.transitions["discount"], t["discount"]]), discounts)
        q_taken = np.array([0.0, 4.0, 0.0])
        np.testing.assert_allclose(
            last_out.priorities, np.abs(t["reward"] + t["discount"] * 20.0 - q_taken), rtol=1e-6)
        assert builder.pending() == 0


def test_final_observation_starts_no_entry_and_next_episode_is_separate():
    builder = NStepBuilder(1, 3, 0.9, (), np.float32)
    q, a = np.zeros((1, 2)), np.zeros(1, int)
    builder.step([0], [0.0], [0.0], [False], [False], [True], q, a)
    out = builder.step([0], [1.0], [1.0], [True], [False], [False], q, a)
    assert len(out.streams) == 1 and builder.pending() == 0
    builder.step([0], [2.0], [0.0], [False], [False], [True], q, a)
    assert builder.pending() == 1
    out = builder.step([0], [3.0], [5.0], [False], [True], [False], q, a)
    np.testing.assert_array_equal(out.transitions["obs"], [2.0])
    np.testing.assert_allclose(out.transitions["discount"], [0.9])


def test_first_observation_drops_a_stale_window_without_emitting():
    builder = NStepBuilder(2, 3, 0.9, (), np.float32)
    q, a = np.zeros((2, 2)), np.zeros(2, int)
    builder.step([0, 1], [0.0, 1.0], [0, 0], [False] * 2, [False] * 2, [True] * 2, q, a)
    builder.step([0, 1], [2.0, 3.0], [1, 1], [False] * 2, [False] * 2, [False] * 2, q, a)
    assert builder.pending() == 4
    out = builder.step([1], [4.0], [0.0], [False], [False], [True], q[:1], a[:1])
    assert out is None and builder.pending() == 3
    builder.reset()
    assert builder.pending() == 0


def test_outputs_add_to_a_replay_with_the_builder_spec():
    from replay.prioritized import PrioritizedReplay
    builder = NStepBuilder(3, 2, 0.9, (2,), np.uint8)
    replay = PrioritizedReplay(64, builder.spec)
    rng = np.random.default_rng(0)
    for batch in random_stream(rng, 3, 40, 2, (2,), dtype=np.uint8):
        output = builder.step(*batch)
        if output is not None:
            replay.add(*output)
    assert len(replay) > 10


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_envs=0), "num_envs"), (dict(n=0), "n must"), (dict(gamma=1.5), "gamma"),
    (dict(gamma=float("nan")), "gamma")])
def test_constructor_validation(kwargs, match):
    args = dict(num_envs=2, n=3, gamma=0.9, obs_shape=(2,), obs_dtype=np.float32) | kwargs
    with pytest.raises(ValueError, match=match):
        NStepBuilder(**args)


def test_step_validation():
    builder = NStepBuilder(2, 3, 0.9, (2,), np.uint8)
    good = dict(env_ids=np.array([0, 1]), obs=np.zeros((2, 2), np.uint8), rewards=np.zeros(2),
                terminated=np.zeros(2, bool), truncated=np.zeros(2, bool),
                first=np.ones(2, bool), q_values=np.zeros((2, 3)), actions=np.array([0, 2]))
    builder.step(**good)
    for change, match in [(dict(env_ids=np.array([0, 2])), "env_ids"),
                          (dict(env_ids=np.array([1, 1])), "unique"),
                          (dict(obs=np.zeros((2, 3), np.uint8)), "obs"),
                          (dict(obs=np.zeros((2, 2), np.float32)), "dtype"),
                          (dict(rewards=np.zeros(3)), "rewards"),
                          (dict(terminated=np.zeros((2, 1), bool)), "terminated"),
                          (dict(q_values=np.zeros(2)), "q_values"),
                          (dict(actions=np.array([0, 3])), "actions")]:
        with pytest.raises(ValueError, match=match):
            builder.step(**(good | change))
    # The action sent for a final observation is ignored, so it is not checked.
    builder.step(**(good | dict(actions=np.array([0, -1]), truncated=np.array([False, True]))))


def test_matches_reference_on_envpool_cartpole_async():
    num_envs, n, gamma, num_actions = 4, 3, 0.97, 2
    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, batch_size=2,
                       seed=3, max_episode_steps=20)
    builder = NStepBuilder(num_envs, n, gamma, (4,), np.float32)
    reference = ReferenceNStep(n, gamma)
    rng = np.random.default_rng(0)
    ends = dict(terminated=0, truncated=0)
    env.async_reset()
    for _ in range(600):
        obs, rewards, terminated, truncated, info = env.recv()
        env_ids = info["env_id"]
        q_values = rng.normal(size=(len(env_ids), num_actions))
        actions = rng.integers(0, num_actions, len(env_ids))
        batch = (env_ids, obs, rewards, terminated, truncated, info["elapsed_step"] == 0,
                 q_values, actions)
        assert_same(builder.step(*batch), reference.step(*batch))
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int((truncated & ~terminated).sum())
        env.send(actions, env_ids)
    assert ends["terminated"] > 5 and ends["truncated"] > 5, ends
