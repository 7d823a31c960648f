"""Tests for ops.vtrace against a float64 NumPy reference and the paper's properties."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ops.vtrace import vtrace, vtrace_from_logits

JIT_VARIANTS = [pytest.param(lambda f: f, id="no_jit"), pytest.param(jax.jit, id="jit")]


def reference_vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_=1.0, rho_bar=1.0,
                     c_bar=1.0, pg_rho_bar=1.0, episode_end_t=None):
    """Eq. (1) of Espeholt et al. 2018 as an explicit sum, in float64, one series at a time.

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} discount_i c_i) delta_t, where the product
    also stops at an episode end, and the pg advantage uses the target of the next state.
    """
    v_tm1, v_t, r_t, discount_t, rho_tm1 = (
        np.asarray(a, np.float64) for a in (v_tm1, v_t, r_t, discount_t, rho_tm1))
    T = v_tm1.shape[0]
    lam = np.asarray(lambda_, np.float64)
    if lam.ndim == 1:  # per step: broadcast over the batch axes
        lam = lam.reshape((T,) + (1,) * (v_tm1.ndim - 1))
    lam = np.broadcast_to(lam, v_tm1.shape)
    ends = (np.zeros(v_tm1.shape, bool) if episode_end_t is None
            else np.asarray(episode_end_t, bool))
    vs = np.empty_like(v_tm1)
    pg = np.empty_like(v_tm1)
    for idx in np.ndindex(v_tm1.shape[1:]):
        col = (slice(None),) + idx
        v, vn, r, d, rho = v_tm1[col], v_t[col], r_t[col], discount_t[col], rho_tm1[col]
        lam_c, end = lam[col], ends[col]
        delta = [min(rho_bar, rho[t]) * (r[t] + d[t] * vn[t] - v[t]) for t in range(T)]
        c = [lam_c[t] * min(c_bar, rho[t]) for t in range(T)]
        for s in range(T):
            total, weight = 0.0, 1.0
            for t in range(s, T):
                total += weight * delta[t]
                if end[t]:
                    break
                weight *= d[t] * c[t]
            vs[col][s] = v[s] + total
        for s in range(T):
            next_target = vn[s] if (s == T - 1 or end[s]) else vs[col][s + 1] - v[s + 1] + vn[s]
            pg[col][s] = min(pg_rho_bar, rho[s]) * (r[s] + d[s] * next_target - v[s])
    return vs, pg


def random_inputs(rng, shape, gamma=0.9, terminal_prob=0.1):
    v_tm1 = rng.normal(size=shape)
    bootstrap = rng.normal(size=shape[1:])
    v_t = np.concatenate([v_tm1[1:], bootstrap[None]], axis=0)
    r_t = rng.normal(size=shape)
    discount_t = gamma * (rng.uniform(size=shape) > terminal_prob)
    rho_tm1 = np.exp(rng.normal(scale=0.7, size=shape))
    return [np.float32(a) for a in (v_tm1, v_t, r_t, discount_t, rho_tm1)]


@pytest.mark.parametrize("variant", JIT_VARIANTS)
@pytest.mark.parametrize("shape", [(7,), (6, 3), (5, 2, 3)])
@pytest.mark.parametrize("rho_bar,c_bar,pg_rho_bar,lambda_", [
    (1.0, 1.0, 1.0, 1.0), (2.0, 0.5, 1.5, 0.9), (float("inf"), 1.0, 1.0, 0.5)])
def test_matches_reference(variant, shape, rho_bar, c_bar, pg_rho_bar, lambda_):
    inputs = random_inputs(np.random.default_rng(0), shape)
    fn = variant(lambda *a: vtrace(*a, lambda_=lambda_, clip_rho_threshold=rho_bar,
                                   clip_c_threshold=c_bar, clip_pg_rho_threshold=pg_rho_bar))
    out = fn(*inputs)
    vs, pg = reference_vtrace(*inputs, lambda_=lambda_, rho_bar=rho_bar, c_bar=c_bar,
                              pg_rho_bar=pg_rho_bar)
    np.testing.assert_allclose(out.vs, vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages, pg, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.errors, vs - inputs[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lambda_shape", ["per_step", "per_element"])
def test_lambda_per_step_matches_reference(lambda_shape):
    rng = np.random.default_rng(1)
    inputs = random_inputs(rng, (8, 4))
    lam = rng.uniform(size=(8,) if lambda_shape == "per_step" else (8, 4)).astype(np.float32)
    out = vtrace(*inputs, lambda_=lam, clip_c_threshold=0.8)
    vs, pg = reference_vtrace(*inputs, lambda_=lam, c_bar=0.8)
    np.testing.assert_allclose(out.vs, vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages, pg, rtol=1e-5, atol=1e-5)


def test_on_policy_equals_n_step_bootstrapped_returns():
    rng = np.random.default_rng(2)
    v_tm1, v_t, r_t, discount_t, _ = random_inputs(rng, (10, 3))
    out = vtrace(v_tm1, v_t, r_t, discount_t, np.ones_like(v_tm1))
    returns = np.empty((10, 3))
    for s in range(10):
        g, weight = 0.0, 1.0
        for t in range(s, 10):
            g += weight * np.float64(r_t[t])
            weight *= discount_t[t]
        returns[s] = g + weight * v_t[-1]
    np.testing.assert_allclose(out.vs, returns, rtol=1e-5, atol=1e-5)


def test_lambda_zero_gives_one_step_targets():
    inputs = random_inputs(np.random.default_rng(3), (9, 4))
    v_tm1, v_t, r_t, discount_t, rho_tm1 = inputs
    out = vtrace(*inputs, lambda_=0.0)
    expected = v_tm1 + np.minimum(1.0, rho_tm1) * (r_t + discount_t * v_t - v_tm1)
    np.testing.assert_allclose(out.vs, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("boundary", ["terminated", "truncated"])
def test_trace_across_episode_boundary_equals_traces_apart(boundary):
    rng = np.random.default_rng(4)
    T, k = 12, 5  # step k ends the first episode
    v_tm1, _, r_t, _, rho_tm1 = random_inputs(rng, (T, 2))
    discount_t = np.full((T, 2), 0.95, np.float32)
    v_t = np.concatenate([v_tm1[1:], rng.normal(size=(1, 2))]).astype(np.float32)
    # The value of the state the first episode stopped in; the next row starts a new episode.
    v_t[k] = rng.normal(size=2)
    ends = np.zeros((T, 2), bool)
    ends[k] = True
    if boundary == "terminated":
        discount_t[k] = 0.0
    joint = vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, clip_c_threshold=0.9,
                   episode_end_t=ends if boundary == "truncated" else None)
    first = vtrace(*(a[:k + 1] for a in (v_tm1, v_t, r_t, discount_t, rho_tm1)),
                   clip_c_threshold=0.9)
    second = vtrace(*(a[k + 1:] for a in (v_tm1, v_t, r_t, discount_t, rho_tm1)),
                    clip_c_threshold=0.9)
    for field in ("vs", "pg_advantages"):
        apart = np.concatenate([getattr(first, field), getattr(second, field)])
        np.testing.assert_allclose(getattr(joint, field), apart, rtol=1e-6, atol=1e-6)


def test_truncation_without_episode_end_would_leak_the_next_episode():
    """Shows why episode_end_t exists: a bootstrapping step otherwise carries the next trace."""
    rng = np.random.default_rng(5)
    v_tm1, v_t, r_t, _, rho_tm1 = random_inputs(rng, (6, 1))
    discount_t = np.full((6, 1), 0.9, np.float32)
    ends = np.zeros((6, 1), bool)
    ends[2] = True
    cut = vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, episode_end_t=ends)
    leaked = vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1)
    np.testing.assert_allclose(cut.vs[3:], leaked.vs[3:], rtol=1e-6)
    assert not np.allclose(cut.vs[2], leaked.vs[2])
    vs, _ = reference_vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, episode_end_t=ends)
    np.testing.assert_allclose(cut.vs, vs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stop", [True, False])
def test_gradients_stop_at_targets_when_asked(stop):
    inputs = [jnp.asarray(a) for a in random_inputs(np.random.default_rng(6), (5, 2))]

    def target_sum(v_tm1, v_t):
        out = vtrace(v_tm1, v_t, *inputs[2:], stop_target_gradients=stop)
        return jnp.sum(out.vs) + jnp.sum(out.pg_advantages)

    grads = jax.grad(target_sum, argnums=(0, 1))(*inputs[:2])
    for g in grads:
        assert (np.abs(g).max() == 0.0) == stop
    # errors = vs - v_tm1 always passes gradient to v_tm1: d(sum errors)/d v_tm1 = -1 when stopped.
    g_err = jax.grad(lambda v: jnp.sum(vtrace(v, *inputs[1:]).errors))(inputs[0])
    np.testing.assert_allclose(g_err, -np.ones((5, 2)), atol=1e-6)


def test_no_retracing_for_same_shapes():
    @jax.jit
    @chex.assert_max_traces(n=1)
    def fn(*args):
        return vtrace(*args, lambda_=0.95)

    rng = np.random.default_rng(7)
    for _ in range(3):
        jax.block_until_ready(fn(*random_inputs(rng, (6, 4))))


def test_from_logits_matches_vtrace_on_ratios():
    rng = np.random.default_rng(8)
    T, B, A = 6, 3, 5
    v_tm1, v_t, r_t, discount_t, _ = random_inputs(rng, (T, B))
    mu_logits = rng.normal(size=(T, B, A)).astype(np.float32)
    pi_logits = rng.normal(size=(T, B, A)).astype(np.float32)
    actions = rng.integers(0, A, size=(T, B))
    out = jax.jit(vtrace_from_logits)(mu_logits, pi_logits, actions, v_tm1, v_t, r_t,
                                      discount_t)

    def log_softmax(x):
        x = np.float64(x)
        return x - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - x.max(-1, keepdims=True)

    pick = lambda lp: np.take_along_axis(lp, actions[..., None], -1)[..., 0]  # noqa: E731
    rho = np.exp(pick(log_softmax(pi_logits)) - pick(log_softmax(mu_logits)))
    vs, pg = reference_vtrace(v_tm1, v_t, r_t, discount_t, rho)
    np.testing.assert_allclose(out.log_rhos, np.log(rho), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.vs, vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages, pg, rtol=1e-5, atol=1e-5)
    # No gradient flows through the importance weights into the target logits.
    g = jax.grad(lambda lg: jnp.sum(vtrace_from_logits(
        mu_logits, lg, actions, v_tm1, v_t, r_t, discount_t,
        stop_target_gradients=False).pg_advantages))(jnp.asarray(pi_logits))
    assert np.abs(g).max() == 0.0


def test_same_policy_logits_give_unit_ratios():
    rng = np.random.default_rng(9)
    logits = rng.normal(size=(4, 2, 3)).astype(np.float32)
    actions = rng.integers(0, 3, size=(4, 2))
    v_tm1, v_t, r_t, discount_t, _ = random_inputs(rng, (4, 2))
    out = vtrace_from_logits(logits, logits, actions, v_tm1, v_t, r_t, discount_t)
    np.testing.assert_allclose(out.log_rhos, 0.0, atol=1e-6)


@pytest.mark.parametrize("kwargs,match", [
    (dict(clip_rho_threshold=-1.0), "clip_rho_threshold"),
    (dict(clip_c_threshold=-0.1), "clip_c_threshold"),
    (dict(clip_pg_rho_threshold=float("nan")), "clip_pg_rho_threshold"),
    (dict(clip_rho_threshold=1.0, clip_c_threshold=2.0), "clip_c_threshold"),
    (dict(lambda_=np.ones((3,))), "lambda_"),
])
def test_bad_arguments_raise_value_error(kwargs, match):
    inputs = random_inputs(np.random.default_rng(10), (5, 2))
    with pytest.raises(ValueError, match=match):
        vtrace(*inputs, **kwargs)


def test_shape_mismatch_names_the_argument():
    v_tm1, v_t, r_t, discount_t, rho_tm1 = random_inputs(np.random.default_rng(11), (5, 2))
    with pytest.raises(ValueError, match="r_t"):
        vtrace(v_tm1, v_t, r_t[:4], discount_t, rho_tm1)
    with pytest.raises(ValueError, match="v_tm1"):
        vtrace(v_tm1[0, 0], v_t, r_t, discount_t, rho_tm1)
    with pytest.raises(ValueError, match="episode_end_t"):
        vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, episode_end_t=np.zeros((5,), bool))
    logits = np.zeros((5, 2, 3), np.float32)
    with pytest.raises(ValueError, match="actions"):
        vtrace_from_logits(logits, logits, np.zeros((5, 3), int), v_tm1, v_t, r_t, discount_t)
    with pytest.raises(ValueError, match="target_logits"):
        vtrace_from_logits(logits, logits[..., :2], np.zeros((5, 2), int), v_tm1, v_t, r_t,
                           discount_t)
