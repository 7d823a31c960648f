"""Tests for agents.impala.unroll.UnrollBuilder against a slow per-env list reference."""

import envpool
import jax.numpy as jnp
import numpy as np
import pytest

from agents.impala.unroll import UnrollBuilder, Unrolls, stack_unrolls
from ops.vtrace import vtrace


class ReferenceUnrolls:
    """Obviously correct unroll builder: per env a list of row dicts, cut every T + 1 rows."""

    def __init__(self, unroll_length, gamma):
        self.T, self.gamma, self.rows = unroll_length, gamma, {}

    def step(self, env_ids, obs, rewards, terminated, truncated, actions, logits, version):
        out = []  # one dict per completed unroll, in batch order
        for b, env in enumerate(env_ids):
            rows = self.rows.setdefault(int(env), [])
            rows.append(dict(obs=obs[b].copy(), reward=float(rewards[b]),
                             terminated=bool(terminated[b]), truncated=bool(truncated[b]),
                             action=int(actions[b]), logits=np.float32(logits[b]),
                             version=version))
            if len(rows) == self.T + 1:
                out.append(self.unroll(int(env), rows))
                self.rows[int(env)] = [rows[-1]]
        return out

    def unroll(self, env, rows):
        steps = []
        for prev, nxt in zip(rows[:-1], rows[1:]):
            if prev["terminated"] or prev["truncated"]:  # pseudo step into a new episode
                steps.append(dict(reward=0.0, discount=0.0, end=True, mask=0.0))
            else:
                steps.append(dict(reward=nxt["reward"],
                                  discount=0.0 if nxt["terminated"] else self.gamma,
                                  end=nxt["terminated"] or nxt["truncated"], mask=1.0))
        return dict(env=env, rows=list(rows), steps=steps)

    def pending(self):
        return sum(len(rows) for rows in self.rows.values())


def assert_same(output, reference_unrolls, T, num_actions):
    """Checks one step's `Unrolls` against the reference's unrolls, field by field, exactly."""
    if output is None:
        assert reference_unrolls == []
        return
    assert isinstance(output, Unrolls)
    K = len(reference_unrolls)
    assert output.obs.shape[:2] == (K, T + 1)
    for name, shape, dtype in [("actions", (K, T), np.int32), ("rewards", (K, T), np.float32),
                               ("discounts", (K, T), np.float32),
                               ("episode_ends", (K, T), np.bool_),
                               ("masks", (K, T), np.float32),
                               ("behaviour_logits", (K, T, num_actions), np.float32),
                               ("param_versions", (K, T), np.int64), ("env_ids", (K,), np.int64)]:
        field = getattr(output, name)
        assert field.shape == shape and field.dtype == dtype, (name, field.shape, field.dtype)
    np.testing.assert_array_equal(output.env_ids, [u["env"] for u in reference_unrolls])
    for k, u in enumerate(reference_unrolls):
        rows, steps = u["rows"], u["steps"]
        np.testing.assert_array_equal(output.obs[k], np.stack([r["obs"] for r in rows]))
        np.testing.assert_array_equal(output.actions[k], [r["action"] for r in rows[:-1]])
        np.testing.assert_array_equal(output.behaviour_logits[k],
                                      np.stack([r["logits"] for r in rows[:-1]]))
        np.testing.assert_array_equal(output.param_versions[k],
                                      [r["version"] for r in rows[:-1]])
        np.testing.assert_array_equal(output.rewards[k],
                                      np.float32([s["reward"] for s in steps]))
        np.testing.assert_array_equal(output.discounts[k],
                                      np.float32([s["discount"] for s in steps]))
        np.testing.assert_array_equal(output.episode_ends[k], [s["end"] for s in steps])
        np.testing.assert_array_equal(output.masks[k], [s["mask"] for s in steps])


def random_stream(rng, num_envs, steps, num_actions, obs_shape, max_len=6, dtype=np.float32):
    """Yields step() arguments for recv batches of interleaved envs, episodes of 1..max_len steps.

    Each episode ends terminated, truncated or both; the env's next observation is the first of
    a new episode, with reward 0. Observation values count up, so each one is unique (float).
    The parameter version goes up every few batches.
    """
    counter = 0
    state = [dict(t=None, length=0) for _ in range(num_envs)]  # t=None: next obs is a first
    for i in range(steps):
        batch = rng.integers(1, num_envs + 1)
        env_ids = rng.permutation(num_envs)[:batch]
        obs = np.zeros((batch,) + obs_shape, dtype)
        rewards = np.zeros(batch, np.float32)
        terminated = np.zeros(batch, bool)
        truncated = np.zeros(batch, bool)
        for b, env in enumerate(env_ids):
            s = state[env]
            obs[b] = counter % 256 if dtype == np.uint8 else counter
            counter += 1
            if s["t"] is None:
                s["t"], s["length"] = 0, rng.integers(1, max_len + 1)
                continue
            s["t"] += 1
            rewards[b] = rng.normal()
            if s["t"] == s["length"]:
                kind = rng.integers(3)
                terminated[b], truncated[b] = kind in (0, 2), kind in (1, 2)
                s["t"] = None
        logits = rng.normal(size=(batch, num_actions)).astype(np.float32)
        actions = rng.integers(0, num_actions, batch)
        yield env_ids, obs, rewards, terminated, truncated, actions, logits, i // 5


@pytest.mark.parametrize("T, gamma, num_envs, max_len", [
    (5, 0.9, 4, 6), (1, 0.99, 3, 4), (3, 1.0, 1, 2), (4, 0.0, 2, 9), (8, 0.95, 5, 3)])
def test_matches_reference_on_random_interleaved_streams(T, gamma, num_envs, max_len):
    rng = np.random.default_rng(T * 10 + num_envs)
    obs_shape, num_actions = (2, 3), 3
    builder = UnrollBuilder(num_envs, T, gamma, obs_shape, np.float32, num_actions)
    reference = ReferenceUnrolls(T, gamma)
    last_row = {}  # env -> obs[T] of its previous unroll
    seen = dict(unrolls=0, pseudo_first=0, final_last=0, term_inside=0, trunc_inside=0)
    for args in random_stream(rng, num_envs, 300, num_actions, obs_shape, max_len):
        output = builder.step(*args)
        want = reference.step(*args)
        assert_same(output, want, T, num_actions)
        assert builder.pending() == reference.pending()
        for k, u in enumerate(want):
            env = u["env"]
            if env in last_row:  # the overlap row is bit-identical
                assert output.obs[k, 0].tobytes() == last_row[env].tobytes()
            last_row[env] = output.obs[k, T].copy()
            final = [r["terminated"] or r["truncated"] for r in u["rows"]]
            seen["unrolls"] += 1
            seen["pseudo_first"] += final[0]
            seen["final_last"] += final[T] and not final[T - 1]
            for prev, row in zip(final[:T - 1], u["rows"][1:T]):
                seen["term_inside"] += not prev and row["terminated"]
                seen["trunc_inside"] += not prev and row["truncated"] and not row["terminated"]
    # The stream covers both end kinds inside unrolls and final rows at unroll boundaries.
    assert seen["unrolls"] > 30 and seen["pseudo_first"] > 0 and seen["final_last"] > 0, seen
    if T > 1:
        assert seen["term_inside"] > 0 and seen["trunc_inside"] > 0, seen


def test_hand_written_unrolls_with_a_final_row_at_the_boundary():
    gamma = 0.5
    builder = UnrollBuilder(1, 3, gamma, (), np.float32, 2)
    # obs: 0 1 2 3(truncated) | 4(first) 5 6(terminated) | 7(first) ...; the reward 9 that
    # comes with the first observation 4 belongs to no transition and is dropped.
    stream = [(0.0, 0.0, False, False), (1.0, 1.0, False, False), (2.0, 2.0, False, False),
              (3.0, 3.0, False, True), (4.0, 9.0, False, False), (5.0, 5.0, False, False),
              (6.0, 6.0, True, False), (7.0, 0.0, False, False)]
    outputs = []
    for i, (o, r, term, trunc) in enumerate(stream):
        outputs.append(builder.step([0], [o], [r], [term], [trunc], [i % 2],
                                    [[float(i), -float(i)]], param_version=i))
    assert [out is None for out in outputs] == [True, True, True, False, True, True, False, True]
    first, second = outputs[3], outputs[6]
    np.testing.assert_array_equal(first.obs, [[0, 1, 2, 3]])
    np.testing.assert_array_equal(first.rewards, [[1, 2, 3]])
    np.testing.assert_array_equal(first.discounts, [[0.5, 0.5, 0.5]])  # truncation bootstraps
    np.testing.assert_array_equal(first.episode_ends, [[False, False, True]])
    np.testing.assert_array_equal(first.masks, [[1, 1, 1]])
    np.testing.assert_array_equal(first.actions, [[0, 1, 0]])
    np.testing.assert_array_equal(first.param_versions, [[0, 1, 2]])
    np.testing.assert_array_equal(first.behaviour_logits[0, :, 0], [0, 1, 2])
    np.testing.assert_array_equal(second.obs, [[3, 4, 5, 6]])  # starts at the final row
    np.testing.assert_array_equal(second.rewards, [[0, 5, 6]])
    np.testing.assert_array_equal(second.discounts, [[0, 0.5, 0]])  # pseudo, real, terminated
    np.testing.assert_array_equal(second.episode_ends, [[True, False, True]])
    np.testing.assert_array_equal(second.masks, [[0, 1, 1]])
    np.testing.assert_array_equal(second.actions, [[1, 0, 1]])  # row 3's action carried over
    np.testing.assert_array_equal(second.param_versions, [[3, 4, 5]])
    np.testing.assert_array_equal(second.behaviour_logits[0, :, 1], [-3, -4, -5])
    assert builder.pending() == 2  # rows 6 and 7
    builder.reset()
    assert builder.pending() == 0


def test_returned_arrays_do_not_alias_the_builder():
    builder = UnrollBuilder(1, 1, 0.9, (2,), np.float32, 2)
    args = lambda o: ([0], [[o, o]], [1.0], [False], [False], [0], [[0.0, 0.0]], 0)  # noqa: E731
    builder.step(*args(1.0))
    out = builder.step(*args(2.0))
    builder.step(*args(3.0))
    np.testing.assert_array_equal(out.obs, [[[1, 1], [2, 2]]])


def test_vtrace_on_unrolls_gives_discounted_returns_to_episode_end_or_bootstrap():
    """With mu = pi and lambda = 1, V-trace's targets are the Monte-Carlo returns.

    For a real step t: v_t = sum_k gamma^k r_{t+k+1} up to the step into the episode's final
    observation; after a termination nothing more, after a truncation + gamma^m V(final obs);
    if the unroll ends first, + gamma^m V(obs[T]). Computed here from the reference's raw rows.
    """
    T, gamma, num_envs, num_actions = 6, 0.9, 3, 2
    rng = np.random.default_rng(7)
    values = rng.normal(size=100_000)  # V of each observation, by its unique value
    builder = UnrollBuilder(num_envs, T, gamma, (), np.float32, num_actions)
    reference = ReferenceUnrolls(T, gamma)
    got, ref_unrolls = [], []
    for args in random_stream(rng, num_envs, 200, num_actions, (), max_len=5):
        output = builder.step(*args)
        ref_unrolls += reference.step(*args)
        if output is not None:
            got.append(output)
    batch = stack_unrolls(got)
    assert len(batch.env_ids) == len(ref_unrolls) > 20

    v = values[batch.obs.astype(np.int64)].astype(np.float32)  # [K, T + 1]
    rho = np.ones((T, len(batch.env_ids)), np.float32)
    out = vtrace(jnp.asarray(v[:, :T].T), jnp.asarray(v[:, 1:].T), jnp.asarray(batch.rewards.T),
                 jnp.asarray(batch.discounts.T), jnp.asarray(rho), lambda_=1.0,
                 episode_end_t=jnp.asarray(batch.episode_ends.T))
    vs, adv = np.asarray(out.vs).T, np.asarray(out.pg_advantages).T  # [K, T]

    kinds = dict(terminated=0, truncated=0, unroll_end=0)
    for k, u in enumerate(ref_unrolls):
        rows = u["rows"]
        value = [values[int(r["obs"])] for r in rows]
        for t in range(T):
            if rows[t]["terminated"] or rows[t]["truncated"]:
                assert batch.masks[k, t] == 0  # pseudo step: no target to check
                continue
            ret, weight = 0.0, 1.0
            for j in range(t + 1, T + 1):
                ret += weight * rows[j]["reward"]
                weight *= gamma
                if rows[j]["terminated"]:
                    kinds["terminated"] += 1
                    break
                if rows[j]["truncated"]:
                    ret += weight * value[j]
                    kinds["truncated"] += 1
                    break
                if j == T:
                    ret += weight * value[T]
                    kinds["unroll_end"] += 1
            np.testing.assert_allclose(vs[k, t], ret, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(adv[k, t], ret - value[t], rtol=1e-5, atol=1e-5)
    assert min(kinds.values()) > 10, kinds


def test_stack_unrolls_and_spec():
    builder = UnrollBuilder(3, 2, 0.9, (2,), np.uint8, 4)
    rng = np.random.default_rng(1)
    outputs = [o for o in (builder.step(*a) for a in random_stream(rng, 3, 40, 4, (2,),
                                                                   dtype=np.uint8)) if o]
    batch = stack_unrolls(outputs)
    assert len(batch.env_ids) == sum(len(o.env_ids) for o in outputs)
    for name, (shape, dtype) in builder.spec.items():
        field = getattr(batch, name)
        assert field.shape[1:] == shape and field.dtype == dtype, name
    np.testing.assert_array_equal(batch.obs[:len(outputs[0].env_ids)], outputs[0].obs)
    with pytest.raises(ValueError, match="at least one"):
        stack_unrolls([])
    other = UnrollBuilder(1, 3, 0.9, (2,), np.uint8, 4)
    for args in random_stream(rng, 1, 10, 4, (2,), dtype=np.uint8):
        if (o := other.step(*args)) is not None:
            break
    with pytest.raises(ValueError, match="obs"):
        stack_unrolls([outputs[0], o])


def test_matches_reference_on_envpool_cartpole_async():
    num_envs, T, gamma, num_actions = 4, 5, 0.97, 2
    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, batch_size=2,
                       seed=5, max_episode_steps=15)
    builder = UnrollBuilder(num_envs, T, gamma, (4,), np.float32, num_actions)
    reference = ReferenceUnrolls(T, gamma)
    rng = np.random.default_rng(0)
    ends = dict(terminated=0, truncated=0, unrolls=0)
    env.async_reset()
    for i in range(600):
        obs, rewards, terminated, truncated, info = env.recv()
        env_ids = info["env_id"]
        logits = rng.normal(size=(len(env_ids), num_actions)).astype(np.float32)
        actions = rng.integers(0, num_actions, len(env_ids))
        args = (env_ids, obs, rewards, terminated, truncated, actions, logits, i // 10)
        output = builder.step(*args)
        assert_same(output, reference.step(*args), T, num_actions)
        ends["unrolls"] += 0 if output is None else len(output.env_ids)
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int((truncated & ~terminated).sum())
        env.send(actions, env_ids)
    env.close()
    assert ends["terminated"] > 5 and ends["truncated"] > 5 and ends["unrolls"] > 100, ends


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_envs=0), "num_envs"), (dict(unroll_length=0), "unroll_length"),
    (dict(unroll_length=2.0), "unroll_length"), (dict(gamma=1.5), "gamma"),
    (dict(gamma=-0.1), "gamma"), (dict(gamma=float("nan")), "gamma"),
    (dict(num_actions=0), "num_actions")])
def test_constructor_validation(kwargs, match):
    args = dict(num_envs=2, unroll_length=3, gamma=0.9, obs_shape=(2,), obs_dtype=np.float32,
                num_actions=3) | kwargs
    with pytest.raises(ValueError, match=match):
        UnrollBuilder(**args)


def test_step_validation():
    builder = UnrollBuilder(2, 3, 0.9, (2,), np.uint8, 3)
    good = dict(env_ids=np.array([0, 1]), obs=np.zeros((2, 2), np.uint8),
                rewards=np.zeros(2), terminated=np.zeros(2, bool), truncated=np.zeros(2, bool),
                actions=np.array([0, 2]), logits=np.zeros((2, 3), np.float32), param_version=0)
    builder.step(**good)
    for change, match in [(dict(env_ids=np.array([0, 2])), "env_ids"),
                          (dict(env_ids=np.array([-1, 0])), "env_ids"),
                          (dict(env_ids=np.array([1, 1])), "unique"),
                          (dict(env_ids=np.array([0.0, 1.0])), "env_ids"),
                          (dict(obs=np.zeros((2, 3), np.uint8)), "obs"),
                          (dict(obs=np.zeros((2, 2), np.float32)), "dtype"),
                          (dict(rewards=np.zeros(3)), "rewards"),
                          (dict(rewards=np.array([0.0, np.nan])), "rewards"),
                          (dict(terminated=np.zeros((2, 1), bool)), "terminated"),
                          (dict(truncated=np.zeros(1, bool)), "truncated"),
                          (dict(actions=np.array([0, 3])), "actions"),
                          (dict(actions=np.array([0.0, 1.0])), "actions"),
                          (dict(logits=np.zeros((2, 4))), "logits"),
                          (dict(logits=np.zeros(2)), "logits"),
                          (dict(logits=np.array([[0, np.nan, 0], [0, 0, 0]])), "finite"),
                          (dict(logits=np.array([[0, 0, 0], [np.inf, 0, 0]])), "finite"),
                          (dict(logits=np.full((2, 3), 1e39)), "finite"),
                          (dict(param_version=-1), "param_version"),
                          (dict(param_version=1.5), "param_version"),
                          (dict(param_version=True), "param_version")]:
        with pytest.raises(ValueError, match=match):
            builder.step(**(good | change))
    assert builder.pending() == 2  # failed calls changed nothing
    # The action sent for a final observation is ignored, so it is not checked; it is stored
    # as 0 so the learner's gather of log pi(a|x) stays in range.
    builder.step(**(good | dict(actions=np.array([0, -1]), truncated=np.array([False, True]))))
    assert builder.pending() == 4
    assert builder.step(**(good | dict(env_ids=np.array([], int), obs=np.zeros((0, 2), np.uint8),
                                       rewards=np.zeros(0), terminated=np.zeros(0, bool),
                                       truncated=np.zeros(0, bool), actions=np.zeros(0, int),
                                       logits=np.zeros((0, 3))))) is None
    assert builder.step(**good) is None
    out = builder.step(**good)  # row 3 completes both unrolls
    np.testing.assert_array_equal(out.actions[:, 1], [0, 0])  # env 1: -1 stored as 0
    np.testing.assert_array_equal(out.masks, [[1, 1, 1], [1, 0, 1]])  # env 1: pseudo step 1
