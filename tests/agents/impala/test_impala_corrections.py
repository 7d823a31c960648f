"""The four off-policy treatments of IMPALA's loss (Espeholt et al. 2018, Sec. 5.2.2) against a
float64 NumPy reference on hand-built unrolls: loss and gradients w.r.t. logits and values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_impala_losses import log_softmax, reference_targets

from agents.impala.losses import CORRECTIONS, EPSILON_CORRECTION, impala_loss

GAMMA = 0.9
COSTS = dict(baseline_cost=0.5, entropy_cost=0.1)


def reference(z, v, actions, mu_logits, r, d, ends, masks, correction, rho_bar=1.0, c_bar=1.0,
              lam=1.0, epsilon=EPSILON_CORRECTION):
    """Loss, dL/dz [T, B, A] and dL/dv [T+1, B] of one correction, float64, step by step.

    Targets: V-trace's explicit sum (`reference_targets`) with clipped ratios for V-trace, and
    every ratio 1, unclipped, for the others; is_1step scales its own step's advantage by the
    unclipped ratio.
    """
    T, B, _ = z.shape
    logp = log_softmax(z)
    p = np.exp(logp)
    logp_a = np.take_along_axis(logp, actions[..., None], -1)[..., 0]
    mu_a = np.take_along_axis(log_softmax(mu_logits), actions[..., None], -1)[..., 0]
    ratio = np.exp(logp_a - mu_a)  # [T, B]
    loss, dz, dv = 0.0, np.zeros_like(z), np.zeros_like(v)
    for b in range(B):
        if correction == "vtrace":
            vs, advs = reference_targets(v[:, b], r[:, b], d[:, b], ends[:, b], masks[:, b],
                                         ratio[:, b], lam, rho_bar, c_bar, 1.0)
        else:
            vs, advs = reference_targets(v[:, b], r[:, b], d[:, b], ends[:, b], masks[:, b],
                                         np.ones(T), lam, np.inf, np.inf, np.inf)
        if correction == "is_1step":
            advs = advs * ratio[:, b]
        for s in range(T):
            m = masks[s, b]
            adv = advs[s]
            onehot = np.eye(z.shape[-1])[actions[s, b]]
            pa = p[s, b, actions[s, b]]
            if correction == "epsilon":
                log_term = np.log(pa + epsilon)
                dlog = pa / (pa + epsilon) * (onehot - p[s, b])
            else:
                log_term, dlog = logp_a[s, b], onehot - p[s, b]
            entropy = -(p[s, b] * logp[s, b]).sum()
            loss += m * (-log_term * adv + COSTS["baseline_cost"] * 0.5 * (vs[s] - v[s, b]) ** 2
                         - COSTS["entropy_cost"] * entropy)
            dz[s, b] += m * (-adv * dlog + COSTS["entropy_cost"] * p[s, b]
                             * (logp[s, b] + entropy))
            dv[s, b] += -m * COSTS["baseline_cost"] * (vs[s] - v[s, b])
    return loss, dz, dv


def hand_built_unroll(seed=0, T=6, B=3, A=3):
    """Off-policy data: behaviour logits far from the target's; two episode ends (one a
    termination, one a truncation), a pseudo step after an end, and an action the target policy
    has all but ruled out (the case epsilon-correction is for)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=1.5, size=(T, B, A))
    z[2, 1] = [-20.0, 5.0, 5.0]  # pi(a=0) ~ 2e-11
    mu_logits = rng.normal(scale=1.5, size=(T, B, A))
    mu_logits[2, 1] = [3.0, 0.0, 0.0]
    actions = rng.integers(0, A, (T, B))
    actions[2, 1] = 0
    v = rng.normal(size=(T + 1, B))
    r = rng.normal(size=(T, B))
    ends = np.zeros((T, B), bool)
    ends[1, 0] = ends[3, 2] = True
    terminated = np.zeros((T, B), bool)
    terminated[1, 0] = True  # (3, 2) is a truncation: it bootstraps
    masks = np.ones((T, B))
    masks[2, 0] = 0.0  # envpool's reset step after the termination
    d = GAMMA * (1.0 - terminated) * masks
    return z, v, actions, mu_logits, r, d, ends, masks


@pytest.mark.parametrize("jit", [False, True], ids=["no_jit", "jit"])
@pytest.mark.parametrize("correction", CORRECTIONS)
def test_each_correction_matches_float64_reference(correction, jit):
    z, v, actions, mu_logits, r, d, ends, masks = hand_built_unroll()

    def loss(z, v):
        return impala_loss(z, v, jnp.asarray(actions), jnp.asarray(mu_logits, jnp.float32),
                           jnp.asarray(r, jnp.float32), jnp.asarray(d, jnp.float32),
                           jnp.asarray(ends), jnp.asarray(masks, jnp.float32), **COSTS,
                           correction=correction)[0]

    fn = jax.value_and_grad(loss, argnums=(0, 1))
    fn = jax.jit(fn) if jit else fn
    value, (g_z, g_v) = fn(jnp.asarray(z, jnp.float32), jnp.asarray(v, jnp.float32))
    expected, e_z, e_v = reference(z, v, actions, mu_logits, r, d, ends, masks, correction)
    np.testing.assert_allclose(value, expected, rtol=2e-5, atol=2e-4)
    np.testing.assert_allclose(g_z, e_z, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(g_v, e_v, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("epsilon", [1e-2, 0.3])
def test_a_larger_epsilon_matches_the_reference(epsilon):
    """`epsilon` reaches the loss; at 0.3 it weakens the gradient of every step, not only the
    near-impossible action's."""
    z, v, actions, mu_logits, r, d, ends, masks = hand_built_unroll()
    args = (jnp.asarray(actions), jnp.asarray(mu_logits, jnp.float32),
            jnp.asarray(r, jnp.float32), jnp.asarray(d, jnp.float32), jnp.asarray(ends),
            jnp.asarray(masks, jnp.float32))
    fn = jax.value_and_grad(lambda z: impala_loss(z, jnp.asarray(v, jnp.float32), *args,
                                                  **COSTS, correction="epsilon",
                                                  epsilon=epsilon)[0])
    value, g_z = fn(jnp.asarray(z, jnp.float32))
    expected, e_z, _ = reference(z, v, actions, mu_logits, r, d, ends, masks, "epsilon",
                                 epsilon=epsilon)
    np.testing.assert_allclose(value, expected, rtol=2e-5, atol=2e-4)
    np.testing.assert_allclose(g_z, e_z, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("correction", CORRECTIONS)
@pytest.mark.parametrize("epsilon", [EPSILON_CORRECTION, 0.2])
def test_unlikely_fraction_counts_real_steps_below_epsilon(correction, epsilon):
    z, v, actions, mu_logits, r, d, ends, masks = hand_built_unroll()
    _, metrics = impala_loss(jnp.asarray(z, jnp.float32), jnp.asarray(v, jnp.float32),
                             jnp.asarray(actions), jnp.asarray(mu_logits, jnp.float32),
                             jnp.asarray(r, jnp.float32), jnp.asarray(d, jnp.float32),
                             jnp.asarray(ends), jnp.asarray(masks, jnp.float32), **COSTS,
                             correction=correction, epsilon=epsilon)
    pi_a = np.take_along_axis(np.exp(log_softmax(z)), actions[..., None], -1)[..., 0]
    expected = (masks * (pi_a < epsilon)).sum() / masks.sum()
    assert expected > 0  # the near-impossible action at least
    np.testing.assert_allclose(metrics["unlikely_fraction"], expected, rtol=1e-6)


@pytest.mark.parametrize("epsilon", [0.0, -1e-6, float("nan")])
def test_a_bad_epsilon_raises_naming_it(epsilon):
    z, v, actions, mu_logits, r, d, ends, masks = hand_built_unroll()
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        impala_loss(z, v, actions, mu_logits, r, d, ends, masks, correction="epsilon",
                    epsilon=epsilon)


def test_the_corrections_differ_where_they_should():
    z, v, actions, mu_logits, r, d, ends, masks = hand_built_unroll()
    out = {c: reference(z, v, actions, mu_logits, r, d, ends, masks, c) for c in CORRECTIONS}
    # None and epsilon share their targets (the value gradients), V-trace's differ.
    np.testing.assert_allclose(out["none"][2], out["epsilon"][2])
    np.testing.assert_allclose(out["none"][2], out["is_1step"][2])
    assert np.abs(out["none"][2] - out["vtrace"][2]).max() > 1e-3
    # Epsilon bounds the policy gradient of the all-but-impossible action; none does not.
    assert abs(out["epsilon"][0] - out["none"][0]) > 0.1  # log(1e-6) vs log(2e-11), times A
    assert np.abs(out["epsilon"][1][2, 1]).max() < 1e-3 < np.abs(out["none"][1][2, 1]).max()


def test_on_policy_data_makes_every_correction_the_same():
    z, v, actions, _, r, d, ends, masks = hand_built_unroll()
    z[2, 1] = [0.0, 0.5, 1.0]  # no near-impossible action, so epsilon changes nothing visible
    results = [reference(z, v, actions, z, r, d, ends, masks, c) for c in CORRECTIONS]
    for other in results[1:]:
        np.testing.assert_allclose(other[0], results[0][0], rtol=1e-5)


def test_an_unknown_correction_raises_naming_it():
    z, v, actions, mu_logits, r, d, ends, masks = hand_built_unroll()
    with pytest.raises(ValueError, match=r"correction must be one of .*vtrace.*got 'retrace'"):
        impala_loss(z, v, actions, mu_logits, r, d, ends, masks, correction="retrace")
