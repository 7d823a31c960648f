"""The Ape-X learner update: data-parallel over 4 faked devices equals one device."""

import dataclasses

import jax
import numpy as np
import pytest

from agents.apex.config import ApexConfig
from agents.apex.learner import init_state, make_optimizer, make_update
from agents.apex.network import QNetwork
from agents.parallel import sharding

CONFIG = ApexConfig(env="CartPole-v1", torso="mlp", mlp_hidden_sizes=(32, 32),
                    head_hidden_sizes=(), batch_size=16, min_replay_size=0,
                    target_update_period=3, optimizer="adam", learning_rate=1e-2)


def random_batch(rng, size):
    return dict(obs=rng.normal(size=(size, 4)).astype(np.float32),
                action=rng.integers(0, 2, size).astype(np.int32),
                reward=rng.normal(size=size).astype(np.float32),
                discount=(0.97 * (rng.uniform(size=size) > 0.1)).astype(np.float32),
                next_obs=rng.normal(size=(size, 4)).astype(np.float32),
                weights=rng.uniform(0.2, 1.0, size).astype(np.float32))


def run_updates(config, devices, batches):
    network = QNetwork(2, "mlp", (("hidden_sizes", (32, 32)),), True)
    mesh = sharding.learner_mesh(devices)
    state = init_state(network, make_optimizer(config), np.zeros(4, np.float32),
                       jax.random.PRNGKey(0))
    update, zero = make_update(network, config, mesh, state.params)
    state = zero.place_state(state, mesh)
    out = []
    for batch in batches:
        state, metrics, priorities = update(state, sharding.put_batch(batch, mesh))
        out.append((jax.device_get(metrics), np.asarray(priorities)))
    return zero.host_state(state), out


@pytest.mark.parametrize("zero_stage", [0, 1, 2])
@pytest.mark.parametrize("optimizer", ["adam", "rmsprop_centered"])
def test_four_devices_equal_one(optimizer, zero_stage):
    assert jax.device_count() == 4, "conftest.py fakes 4 CPU devices"
    # A moderate epsilon keeps the adaptive optimizers from turning float32 noise in a near-zero
    # gradient into a full-size step (Adam's update is ~lr * sign(g) when |g| >> epsilon).
    config = dataclasses.replace(CONFIG, optimizer=optimizer, learning_rate=1e-3,
                                 optimizer_epsilon=1e-3)
    rng = np.random.default_rng(0)
    batches = [random_batch(rng, 16) for _ in range(5)]
    state_1, out_1 = run_updates(config, jax.devices()[:1], batches)
    state_4, out_4 = run_updates(dataclasses.replace(config, zero_stage=zero_stage),
                                 jax.devices(), batches)
    # Summing the gradient in 4 parts reorders float32 additions, nothing more.
    tolerance = dict(rtol=1e-4, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, **tolerance), state_1, state_4)
    for (m1, p1), (m4, p4) in zip(out_1, out_4):
        np.testing.assert_allclose(p1, p4, **tolerance)
        np.testing.assert_allclose(m1["loss"], m4["loss"], **tolerance)
    assert int(state_4.steps) == 5
    # The target network was copied at update 3 and not since.
    assert not np.allclose(state_4.params["params"]["DuelingQHead_0"]["value_out"]["kernel"],
                           state_4.target_params["params"]["DuelingQHead_0"]["value_out"][
                               "kernel"])


def test_target_network_copies_on_schedule():
    """target_update_period=3: the target equals the parameters after update 3 (and 6), and
    after updates 4 and 5 still holds update 3's parameters."""
    rng = np.random.default_rng(1)
    batches = [random_batch(rng, 16) for _ in range(6)]
    states = [run_updates(CONFIG, jax.devices()[:1], batches[:n])[0] for n in (3, 5, 6)]
    after_3, after_5, after_6 = states
    jax.tree.map(np.testing.assert_array_equal, after_3.params, after_3.target_params)
    jax.tree.map(np.testing.assert_array_equal, after_3.params, after_5.target_params)
    assert not np.array_equal(jax.tree.leaves(after_5.params)[0],
                              jax.tree.leaves(after_5.target_params)[0])
    jax.tree.map(np.testing.assert_array_equal, after_6.params, after_6.target_params)


def test_batch_that_does_not_split_over_devices_raises():
    with pytest.raises(ValueError, match="batch_size=18"):
        sharding.check_divisible(18, sharding.learner_mesh(jax.devices()))


def test_three_learner_devices_equal_one():
    """The device split of the actor/learner layout: batch 48 over devices 1-3."""
    config = dataclasses.replace(CONFIG, batch_size=48, learning_rate=1e-3,
                                 optimizer_epsilon=1e-3, zero_stage=1)
    rng = np.random.default_rng(3)
    batches = [random_batch(rng, 48) for _ in range(3)]
    state_1, _ = run_updates(dataclasses.replace(config, zero_stage=0), jax.devices()[:1],
                             batches)
    state_3, _ = run_updates(config, jax.devices()[1:], batches)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 state_1, state_3)
