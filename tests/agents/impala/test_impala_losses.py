"""The IMPALA loss against a float64 NumPy reference, A2C, and the paper's properties."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.impala.losses import impala_loss

JIT_VARIANTS = [pytest.param(False, id="no_jit"), pytest.param(True, id="jit")]
GAMMA = 0.9


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def reference_targets(v, r, d, ends, masks, rho, lam, rho_bar, c_bar, pg_rho_bar):
    """V-trace of eq. (1) as the explicit sum, float64, one [T] series (v is [T+1]).

    v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} d_i c_i) delta_t, the product stopped after an
    episode end and before a pseudo step; the pg advantage uses the target of the next state.
    """
    T = len(r)
    cut = [bool(ends[t]) or (t + 1 < T and masks[t + 1] == 0) for t in range(T)]
    delta = [min(rho_bar, rho[t]) * (r[t] + d[t] * v[t + 1] - v[t]) for t in range(T)]
    c = [lam * min(c_bar, rho[t]) for t in range(T)]
    vs = np.empty(T)
    for s in range(T):
        total, weight = 0.0, 1.0
        for t in range(s, T):
            total += weight * delta[t]
            if cut[t]:
                break
            weight *= d[t] * c[t]
        vs[s] = v[s] + total
    adv = np.empty(T)
    for s in range(T):
        next_target = v[s + 1] if (s == T - 1 or cut[s]) else vs[s + 1]
        adv[s] = min(pg_rho_bar, rho[s]) * (r[s] + d[s] * next_target - v[s])
    return vs, adv


def reference_loss(feats, w_pi, w_v, actions, mu_logits, r, d, ends, masks, *, baseline_cost,
                   entropy_cost, lam, rho_bar, c_bar, pg_rho_bar, reduction):
    """The loss and its analytic gradient w.r.t. (w_pi, w_v) of the linear network, float64.

    feats [T+1, B, F]; logits z_t = feats_t @ w_pi, values v_t = feats_t @ w_v. With the targets
    vs and advantages A constant, per step (m the mask, p = softmax(z), e_a the one-hot action):
      d(-m log p_a A)/dz = -m A (e_a - p),
      d(-c_H m H)/dz = c_H m p (log p + H)        (dH/dz_j = -p_j (log p_j + H)),
      d(c_V m (vs - v)^2 / 2)/dv = -c_V m (vs - v).
    """
    f = np.asarray(feats, np.float64)
    T, B = r.shape
    z = f[:-1] @ w_pi  # [T, B, A]
    v = f @ w_v  # [T+1, B]
    logp = log_softmax(z)
    mu_logp = log_softmax(np.asarray(mu_logits, np.float64))
    p = np.exp(logp)
    logp_a = np.take_along_axis(logp, actions[..., None], -1)[..., 0]
    rho = np.exp(logp_a - np.take_along_axis(mu_logp, actions[..., None], -1)[..., 0])
    vs, adv = np.empty((T, B)), np.empty((T, B))
    for b in range(B):
        vs[:, b], adv[:, b] = reference_targets(v[:, b], r[:, b], d[:, b], ends[:, b],
                                                masks[:, b], rho[:, b], lam, rho_bar, c_bar,
                                                pg_rho_bar)
    entropy = -(p * logp).sum(-1)  # [T, B]
    scale = 1.0 if reduction == "sum" else 1.0 / max(masks.sum(), 1.0)
    pg = -(masks * logp_a * adv).sum() * scale
    baseline = 0.5 * (masks * (vs - v[:-1]) ** 2).sum() * scale
    ent = -(masks * entropy).sum() * scale
    loss = pg + baseline_cost * baseline + entropy_cost * ent

    onehot = np.eye(z.shape[-1])[actions]
    dz = (-(masks * adv)[..., None] * (onehot - p)
          + entropy_cost * masks[..., None] * p * (logp + entropy[..., None])) * scale
    dv = -baseline_cost * masks * (vs - v[:-1]) * scale  # [T, B]
    grad_pi = np.einsum("tbf,tba->fa", f[:-1], dz)
    grad_v = np.einsum("tbf,tb->f", f[:-1], dv)
    kl = (np.exp(mu_logp) * (mu_logp - logp)).sum(-1)  # [T, B]: KL(mu || pi) per step
    trace_product = np.mean([np.prod([lam * min(c_bar, rho[t, b]) for t in range(T)
                                      if masks[t, b] > 0]) for b in range(B)])
    return loss, (grad_pi, grad_v), dict(vs=vs, adv=adv, rho=rho, entropy=entropy, kl=kl,
                                         trace_product=trace_product)


def make_batch(rng, T=7, B=4, F=5, A=3):
    feats = rng.normal(size=(T + 1, B, F))
    w_pi = rng.normal(scale=0.7, size=(F, A))
    w_v = rng.normal(size=F)
    mu_logits = rng.normal(size=(T, B, A))
    actions = rng.integers(0, A, (T, B))
    r = rng.normal(size=(T, B))
    ends = rng.uniform(size=(T, B)) < 0.2
    terminated = ends & (rng.uniform(size=(T, B)) < 0.5)  # the other ends are truncations
    masks = np.ones((T, B))
    masks[1:][ends[:-1] & (rng.uniform(size=(T - 1, B)) < 0.5)] = 0.0  # envpool reset steps
    masks[-1, 0] = 0.0  # a pseudo step not announced by an episode end
    d = GAMMA * (1.0 - terminated) * masks
    return feats, w_pi, w_v, actions, mu_logits, r, d, ends, masks


def network_loss(params, feats, actions, mu_logits, r, d, ends, masks, **kwargs):
    w_pi, w_v = params
    return impala_loss(feats[:-1] @ w_pi, feats @ w_v, actions, mu_logits, r, d, ends, masks,
                       **kwargs)


def to_jax(batch):
    return [jnp.asarray(x) if x.dtype in (bool, np.int64) and x.ndim else
            jnp.asarray(x, jnp.float32) for x in batch]


PAPER = dict(lam=1.0, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0)
CLIPS = dict(lam=0.8, rho_bar=1.5, c_bar=0.9, pg_rho_bar=1.2)


@pytest.mark.parametrize("jit,reduction,hparams", [
    pytest.param(False, "sum", PAPER, id="no_jit-sum-paper"),
    pytest.param(True, "sum", PAPER, id="jit-sum-paper"),
    pytest.param(True, "mean", PAPER, id="jit-mean-paper"),
    pytest.param(True, "sum", CLIPS, id="jit-sum-clips"),
    pytest.param(False, "mean", CLIPS, id="no_jit-mean-clips"),
])
def test_loss_and_gradient_match_float64_reference(jit, reduction, hparams):
    rng = np.random.default_rng(0)
    feats, w_pi, w_v, actions, mu_logits, r, d, ends, masks = make_batch(rng)
    costs = dict(baseline_cost=0.5, entropy_cost=0.1)
    kwargs = dict(costs, lambda_=hparams["lam"], clip_rho_threshold=hparams["rho_bar"],
                  clip_c_threshold=hparams["c_bar"],
                  clip_pg_rho_threshold=hparams["pg_rho_bar"], reduction=reduction)
    fn = jax.value_and_grad(lambda p, *data: network_loss(p, *data, **kwargs), has_aux=True)
    fn = jax.jit(fn) if jit else fn
    jw_pi, jw_v, *data = to_jax([w_pi, w_v, feats, actions, mu_logits, r, d, ends, masks])
    (loss, metrics), (g_pi, g_v) = fn((jw_pi, jw_v), *data)

    expected, (e_pi, e_v), aux = reference_loss(
        feats, w_pi, w_v, actions, mu_logits, r, d, ends, masks, **costs, reduction=reduction,
        **hparams)
    assert aux["rho"].max() > hparams["rho_bar"]  # the clips are exercised
    np.testing.assert_allclose(loss, expected, rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(g_pi, e_pi, rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(g_v, e_v, rtol=2e-4, atol=1e-5)

    m = masks.sum()
    np.testing.assert_allclose(metrics["loss"], expected, rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(metrics["entropy"], (masks * aux["entropy"]).sum() / m, rtol=1e-5)
    np.testing.assert_allclose(metrics["pg_advantage_abs"],
                               (masks * np.abs(aux["adv"])).sum() / m, rtol=1e-5)
    np.testing.assert_allclose(metrics["rho"], (masks * aux["rho"]).sum() / m, rtol=1e-5)
    np.testing.assert_allclose(metrics["rho_clipped_fraction"],
                               (masks * (aux["rho"] > hparams["rho_bar"])).sum() / m, rtol=1e-6)
    np.testing.assert_allclose(metrics["behaviour_kl"], (masks * aux["kl"]).sum() / m,
                               rtol=1e-4)
    np.testing.assert_allclose(metrics["trace_product"], aux["trace_product"], rtol=1e-4)
    np.testing.assert_allclose(
        metrics["pg_loss"] + 0.5 * metrics["baseline_loss"] + 0.1 * metrics["entropy_loss"],
        loss, rtol=1e-6)


def loss_fn(target_logits, values, actions, behaviour_logits, r, d, ends, masks, **kwargs):
    return impala_loss(target_logits, values, actions, behaviour_logits, r, d, ends, masks,
                       **kwargs)[0]


grad_logits_and_values = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1)),
                                 static_argnames=("reduction",))


def random_steps(rng, T, B, A):
    logits = jnp.asarray(rng.normal(size=(T, B, A)), jnp.float32)
    values = jnp.asarray(rng.normal(size=(T + 1, B)), jnp.float32)
    actions = jnp.asarray(rng.integers(0, A, (T, B)))
    r = jnp.asarray(rng.normal(size=(T, B)), jnp.float32)
    return logits, values, actions, r


def targets_from_value_gradient(values, grad_values, masks):
    """With baseline_cost=1, entropy_cost=0 and the sum, dL/dV(x_t) = -m_t (vs_t - V(x_t))."""
    return np.where(masks > 0, values[:-1] - grad_values[:-1], np.nan)


@pytest.mark.parametrize("jit", JIT_VARIANTS)
def test_on_policy_lambda_one_is_a2c_with_n_step_returns(jit):
    rng = np.random.default_rng(1)
    T, B, A = 6, 3, 4
    logits, values, actions, r = random_steps(rng, T, B, A)
    d = jnp.full((T, B), GAMMA)
    ends = jnp.zeros((T, B), bool)
    masks = jnp.ones((T, B))

    @jax.jit
    def a2c(logits, values):
        returns = [values[-1]]
        for t in reversed(range(T)):  # G_t = r_t + gamma G_{t+1}, G_T = V(x_T)
            returns.insert(0, r[t] + d[t] * returns[0])
        advantage = jax.lax.stop_gradient(jnp.stack(returns[:-1])) - values[:-1]  # [T, B]
        log_pi = jax.nn.log_softmax(logits)
        log_pi_a = jnp.take_along_axis(log_pi, actions[..., None], -1)[..., 0]
        entropy = -jnp.sum(jnp.exp(log_pi) * log_pi, -1)
        return (-jnp.sum(log_pi_a * jax.lax.stop_gradient(advantage))
                + 0.5 * 0.5 * jnp.sum(jnp.square(advantage)) - 0.01 * jnp.sum(entropy))

    def impala(logits, values):
        return impala_loss(logits, values, actions, logits, r, d, ends, masks)[0]

    impala = jax.jit(impala) if jit else impala
    loss, grads = jax.value_and_grad(impala, argnums=(0, 1))(logits, values)
    expected, expected_grads = jax.value_and_grad(a2c, argnums=(0, 1))(logits, values)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    for g, e in zip(grads, expected_grads):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6)


def test_masked_steps_contribute_nothing():
    rng = np.random.default_rng(2)
    T, B, A = 5, 2, 3
    logits, values, actions, r = random_steps(rng, T, B, A)
    mu = jnp.asarray(rng.normal(size=(T, B, A)), jnp.float32)
    # Column 0: an episode ends at step 1, step 2 is the pseudo reset step (envpool).
    # Column 1: step 4 is padding, not announced by an episode end.
    ends = jnp.zeros((T, B), bool).at[1, 0].set(True)
    masks = jnp.ones((T, B)).at[2, 0].set(0.0).at[4, 1].set(0.0)
    pseudo = masks == 0
    junk = dict(r=rng.normal(size=(T, B)) * 100, logits=rng.normal(size=(T, B, A)) * 10,
                mu=rng.normal(size=(T, B, A)) * 10, actions=(actions + 1) % A)

    def scramble(x, new):
        p = pseudo.reshape(pseudo.shape + (1,) * (x.ndim - 2))
        return jnp.where(p, jnp.asarray(new, x.dtype), x)

    for name, d1 in [("terminated", 0.0), ("truncated", GAMMA)]:
        d = jnp.full((T, B), GAMMA).at[1, 0].set(d1) * masks
        kwargs = dict(baseline_cost=0.5, entropy_cost=0.1, lambda_=0.9,
                      clip_rho_threshold=2.0, reduction="sum")
        loss, (g_logits, g_values) = grad_logits_and_values(
            logits, values, actions, mu, r, d, ends, masks, **kwargs)
        scrambled = (scramble(logits, junk["logits"]), values, scramble(actions, junk["actions"]),
                     scramble(mu, junk["mu"]), scramble(r, junk["r"]),
                     scramble(d, GAMMA), scramble(ends, True), masks)
        loss2, (g_logits2, g_values2) = grad_logits_and_values(*scrambled, **kwargs)
        np.testing.assert_allclose(loss2, loss, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(g_values2, g_values, rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(g_logits2[~pseudo], g_logits[~pseudo], rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(g_logits2[pseudo], 0.0)
        np.testing.assert_array_equal(g_values[:-1][pseudo], 0.0)  # pseudo V(x_t) not regressed

        # V at the pseudo step's observation is the final state of column 0's episode: the
        # bootstrap of a truncation, unused after a termination.
        shifted = values.at[2, 0].add(5.0)
        loss3, _ = grad_logits_and_values(logits, shifted, actions, mu, r, d, ends, masks,
                                          **kwargs)
        if name == "terminated":
            np.testing.assert_allclose(loss3, loss, rtol=1e-6)
        else:
            assert abs(float(loss3) - float(loss)) > 1e-2


def test_truncation_bootstraps_and_termination_does_not():
    rng = np.random.default_rng(3)
    T, B, A = 4, 1, 3
    logits, values, actions, r = random_steps(rng, T, B, A)
    masks = jnp.ones((T, B))
    v, rr, g = np.asarray(values[:, 0], np.float64), np.asarray(r[:, 0], np.float64), GAMMA

    def targets(d1, end1):
        d = jnp.full((T, B), GAMMA).at[1, 0].set(d1)
        ends = jnp.zeros((T, B), bool).at[1, 0].set(end1)
        _, (_, g_values) = grad_logits_and_values(  # on-policy: rho = c = 1
            logits, values, actions, logits, r, d, ends, masks, baseline_cost=1.0,
            entropy_cost=0.0, reduction="sum")
        return targets_from_value_gradient(np.asarray(values), np.asarray(g_values),
                                           np.asarray(masks))[:, 0]

    vs3 = rr[3] + g * v[4]
    vs2 = rr[2] + g * vs3
    for name, vs1, got in [
            ("terminated", rr[1], targets(0.0, True)),
            ("truncated", rr[1] + g * v[2], targets(GAMMA, True)),
            ("continuing", rr[1] + g * vs2, targets(GAMMA, False))]:
        expected = [rr[0] + g * vs1, vs1, vs2, vs3]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=name)


def test_entropy_is_a_bonus():
    rng = np.random.default_rng(4)
    T, B, A = 5, 3, 4
    logits, values, actions, r = random_steps(rng, T, B, A)
    logits = logits * 3  # start far from uniform
    d, ends, masks = jnp.full((T, B), GAMMA), jnp.zeros((T, B), bool), jnp.ones((T, B))
    data = (values, actions, logits, r, d, ends, masks)

    grad_logits = jax.jit(jax.grad(loss_fn))

    def step(entropy_cost, lr=0.05):
        grad = grad_logits(logits, *data, entropy_cost=entropy_cost)
        return logits - lr * grad

    def entropy(z):
        log_pi = jax.nn.log_softmax(z)
        return float(-jnp.sum(jnp.exp(log_pi) * log_pi))

    assert entropy(step(1.0)) > entropy(step(0.0))
    # The entropy term alone (the difference of the two gradients) ascends the entropy.
    assert entropy(logits - (step(0.0) - step(1.0))) > entropy(logits)
    # The loss falls as entropy_cost grows (d loss / d entropy_cost = -sum H < 0).
    d_cost = jax.jit(jax.grad(lambda c: loss_fn(logits, *data, entropy_cost=c)))(0.01)
    np.testing.assert_allclose(d_cost, -entropy(logits), rtol=1e-5)


def test_no_gradient_through_importance_weights_or_bootstrap():
    rng = np.random.default_rng(5)
    T, B, A = 4, 2, 3
    logits, values, actions, r = random_steps(rng, T, B, A)
    mu = jnp.asarray(rng.normal(size=(T, B, A)), jnp.float32)
    d, ends, masks = jnp.full((T, B), GAMMA), jnp.zeros((T, B), bool), jnp.ones((T, B))
    grad_fn = jax.jit(jax.grad(loss_fn, argnums=(3, 1)))
    g_mu, g_values = grad_fn(logits, values, actions, mu, r, d, ends, masks)
    np.testing.assert_array_equal(g_mu, 0.0)
    np.testing.assert_array_equal(g_values[-1], 0.0)
    assert np.all(np.asarray(g_values[:-1]) != 0.0)


def test_mean_reduction_and_no_real_steps():
    rng = np.random.default_rng(6)
    T, B, A = 4, 3, 2
    logits, values, actions, r = random_steps(rng, T, B, A)
    d, ends = jnp.full((T, B), GAMMA), jnp.zeros((T, B), bool)
    masks = jnp.ones((T, B)).at[-1].set(0.0)
    args = (logits, values, actions, logits, r, d * masks, ends)
    loss = jax.jit(impala_loss, static_argnames="reduction")
    total, metrics = loss(*args, masks)
    mean, mean_metrics = loss(*args, masks, reduction="mean")
    np.testing.assert_allclose(mean, total / 9.0, rtol=1e-6)
    np.testing.assert_allclose(mean_metrics["entropy"], metrics["entropy"], rtol=1e-6)
    for reduction in ("sum", "mean"):
        value, empty = loss(*args, jnp.zeros((T, B)), reduction=reduction)
        assert float(value) == 0.0
        assert all(np.isfinite(x) for x in empty.values())


def test_extra_batch_axes_equal_flattened_batch():
    rng = np.random.default_rng(7)
    T, B, K, A = 4, 2, 3, 3
    logits, values, actions, r = random_steps(rng, T, B * K, A)
    mu = jnp.asarray(rng.normal(size=(T, B * K, A)), jnp.float32)
    d = jnp.asarray(GAMMA * (rng.uniform(size=(T, B * K)) > 0.2), jnp.float32)
    ends = jnp.asarray(rng.uniform(size=(T, B * K)) < 0.3)
    masks = jnp.ones((T, B * K))
    loss = jax.jit(impala_loss, static_argnames="lambda_")
    flat = loss(logits, values, actions, mu, r, d, ends, masks, lambda_=0.7)
    nested = loss(*(x.reshape((x.shape[0], B, K) + x.shape[2:]) for x in
                           (logits, values, actions, mu, r, d, ends, masks)), lambda_=0.7)
    for key in flat[1]:
        np.testing.assert_allclose(nested[1][key], flat[1][key], rtol=1e-5, err_msg=key)


def test_jitted_loss_does_not_retrace():
    fn = chex.assert_max_traces(loss_fn, n=1)
    fn = jax.jit(fn)
    rng = np.random.default_rng(8)
    for _ in range(3):
        logits, values, actions, r = random_steps(rng, 3, 2, 2)
        fn(logits, values, actions, logits, r, jnp.full((3, 2), GAMMA), jnp.zeros((3, 2), bool),
           jnp.ones((3, 2)))


def _valid(T=3, B=2, A=4):
    return dict(target_logits=jnp.zeros((T, B, A)), values=jnp.zeros((T + 1, B)),
                actions=jnp.zeros((T, B), jnp.int32), behaviour_logits=jnp.zeros((T, B, A)),
                rewards=jnp.zeros((T, B)), discounts=jnp.zeros((T, B)),
                episode_ends=jnp.zeros((T, B), bool), masks=jnp.ones((T, B)))


@pytest.mark.parametrize("name,bad", [
    ("values", jnp.zeros((3, 2))),          # no bootstrap row
    ("values", jnp.zeros((4, 3))),          # wrong batch
    ("target_logits", jnp.zeros((4,))),     # no action axis
    ("behaviour_logits", jnp.zeros((3, 2, 5))),
    ("actions", jnp.zeros((3, 2), jnp.float32)),
    ("actions", jnp.zeros((3, 2, 1), jnp.int32)),
    ("rewards", jnp.zeros((2, 2))),
    ("discounts", jnp.zeros((3,))),
    ("episode_ends", jnp.zeros((3, 2), jnp.float32)),
    ("masks", jnp.ones((3, 2, 1))),
])
def test_bad_inputs_raise_naming_the_argument(name, bad):
    args = _valid()
    args[name] = bad
    with pytest.raises(ValueError, match=name):
        impala_loss(*args.values())
    with pytest.raises(ValueError, match=name):
        jax.jit(impala_loss)(*args.values())


def test_bad_hyperparameters_raise():
    with pytest.raises(ValueError, match="reduction"):
        impala_loss(*_valid().values(), reduction="max")
    with pytest.raises(ValueError, match="clip_c_threshold"):
        impala_loss(*_valid().values(), clip_rho_threshold=1.0, clip_c_threshold=2.0)
