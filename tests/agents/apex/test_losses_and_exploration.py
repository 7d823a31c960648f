"""The Ape-X loss against a float64 NumPy reference, and the exploration schedule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.apex.actor import epsilon_greedy, exploration_epsilons
from agents.apex.losses import apex_loss, double_q_td_errors


def reference_td(q_tm1, a, r, d, q_t_online, q_t_target):
    td = np.empty(len(a))
    for i in range(len(a)):
        best = int(np.argmax(q_t_online[i]))
        td[i] = r[i] + d[i] * q_t_target[i, best] - q_tm1[i, a[i]]
    return td


@pytest.mark.parametrize("loss", ["squared", "huber"])
@pytest.mark.parametrize("jit", [False, True])
def test_double_q_loss_with_importance_weights_matches_reference(loss, jit):
    rng = np.random.default_rng(0)
    B, A = 16, 5
    q_tm1, q_t_online, q_t_target = (rng.normal(size=(B, A)) * 3 for _ in range(3))
    a = rng.integers(0, A, B)
    r = rng.normal(size=B)
    d = 0.99 ** 3 * (rng.uniform(size=B) > 0.2)  # some terminations
    w = rng.uniform(0.1, 1.0, B)

    def f(*args):
        td = double_q_td_errors(*args[:6])
        return td, apex_loss(td, args[6], loss, 1.0)

    f = jax.jit(f) if jit else f
    td, value = f(*(jnp.asarray(x, jnp.float32) if x is not a else jnp.asarray(x)
                    for x in (q_tm1, a, r, d, q_t_online, q_t_target, w)))
    expected_td = reference_td(q_tm1, a, r, d, q_t_online, q_t_target)
    np.testing.assert_allclose(td, expected_td, rtol=1e-5, atol=1e-5)
    if loss == "squared":
        per_item = 0.5 * expected_td ** 2
    else:
        abs_td = np.abs(expected_td)
        per_item = np.where(abs_td <= 1.0, 0.5 * abs_td ** 2, abs_td - 0.5)
    np.testing.assert_allclose(value, np.mean(w * per_item), rtol=1e-5)


def test_target_is_constant_and_gradient_only_reaches_the_taken_action():
    q_tm1 = jnp.array([[1.0, 2.0, 3.0]])
    grads = jax.grad(lambda q, qt: apex_loss(double_q_td_errors(
        q, jnp.array([1]), jnp.array([0.5]), jnp.array([0.9]), qt, qt), jnp.ones(1)),
        argnums=(0, 1))(q_tm1, jnp.array([[0.0, 4.0, 1.0]]))
    # td = 0.5 + 0.9 * 4 - 2 = 2.1; d(0.5 td^2)/dq[a] = -td.
    np.testing.assert_allclose(grads[0], [[0.0, -2.1, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(grads[1], 0.0)


def test_termination_does_not_bootstrap():
    td = double_q_td_errors(jnp.zeros((1, 2)), jnp.array([0]), jnp.array([1.0]),
                            jnp.array([0.0]), jnp.full((1, 2), 100.0), jnp.full((1, 2), 100.0))
    np.testing.assert_allclose(td, [1.0])


def test_bad_loss_name_raises():
    with pytest.raises(ValueError, match="loss"):
        apex_loss(jnp.zeros(2), jnp.ones(2), "l1")


def test_exploration_schedule_matches_the_paper():
    eps = exploration_epsilons(8)
    expected = [0.4 ** (1 + 7 * i / 7) for i in range(8)]
    np.testing.assert_allclose(eps, expected)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert np.all(np.diff(eps) < 0)
    np.testing.assert_allclose(exploration_epsilons(1), [0.4])
    with pytest.raises(ValueError, match="num_envs"):
        exploration_epsilons(0)


def test_epsilon_greedy_explores_at_the_given_rates():
    rng = np.random.default_rng(0)
    q = np.tile([[0.0, 1.0, 0.0, 0.0]], (20_000, 1))
    actions = epsilon_greedy(q, np.full(20_000, 0.4), rng)
    # Greedy with prob 0.6, plus a uniform pick that hits the greedy action 1/4 of the time.
    assert abs(np.mean(actions == 1) - (0.6 + 0.4 / 4)) < 0.015
    np.testing.assert_array_equal(epsilon_greedy(q[:5], np.zeros(5), rng), 1)
