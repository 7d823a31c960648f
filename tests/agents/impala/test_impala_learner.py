"""The IMPALA learner update over 4 faked devices equals one device; the lag histogram."""

import dataclasses

import jax
import numpy as np
import pytest

from agents.impala.config import ImpalaConfig
from agents.impala.learner import count_lags, init_state, make_optimizer, make_update
from agents.impala.losses import impala_loss
from agents.impala.network import PolicyValueNetwork
from agents.parallel import sharding

T, A = 5, 3
CONFIG = ImpalaConfig(env="CartPole-v1", torso="mlp", mlp_hidden_sizes=(16,), unroll_length=T,
                      batch_size=8, optimizer="rmsprop", learning_rate=1e-3,
                      total_env_steps=10_000)


def random_unrolls(rng, batch) -> dict:
    masks = (rng.uniform(size=(batch, T)) > 0.1).astype(np.float32)
    ends = rng.uniform(size=(batch, T)) < 0.2
    return dict(obs=rng.normal(size=(batch, T + 1, 4)).astype(np.float32),
                actions=rng.integers(0, A, (batch, T)).astype(np.int32),
                rewards=rng.normal(size=(batch, T)).astype(np.float32),
                discounts=(0.99 * masks * ~(ends & (rng.uniform(size=(batch, T)) < 0.5))
                           ).astype(np.float32),
                episode_ends=ends | (masks == 0),
                masks=masks,
                behaviour_logits=rng.normal(size=(batch, T, A)).astype(np.float32))


def run_updates(config, devices, batches):
    network = PolicyValueNetwork(A, "mlp", (("hidden_sizes", (16,)),))
    mesh = sharding.learner_mesh(devices)
    state = init_state(network, make_optimizer(config), np.zeros(4, np.float32),
                       jax.random.PRNGKey(0))
    update, zero = make_update(network, config, mesh, state.params)
    state = zero.place_state(state, mesh)
    metrics = []
    for batch in batches:
        state, m = update(state, sharding.put_batch(batch, mesh))
        metrics.append(jax.device_get(m))
    return zero.host_state(state), metrics


@pytest.mark.parametrize("zero_stage", [0, 1, 2])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_four_devices_equal_one(reduction, zero_stage):
    config = dataclasses.replace(CONFIG, reduction=reduction)
    rng = np.random.default_rng(0)
    batches = [random_unrolls(rng, 8) for _ in range(4)]
    state_1, _ = run_updates(config, jax.devices()[:1], batches)
    state_4, _ = run_updates(dataclasses.replace(config, zero_stage=zero_stage),
                             jax.devices(), batches)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 state_1, state_4)
    assert int(state_4.steps) == 4


@pytest.mark.parametrize("num_devices,correction", [(1, "vtrace"), (4, "vtrace"), (1, "none"),
                                                    (4, "is_1step")])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_logged_loss_terms_are_the_whole_batch_with_the_runs_reduction(reduction, num_devices,
                                                                       correction):
    """...and with the run's off-policy correction."""
    config = dataclasses.replace(CONFIG, reduction=reduction, correction=correction)
    batch = random_unrolls(np.random.default_rng(1), 8)
    _, [metrics] = run_updates(config, jax.devices()[:num_devices], [batch])
    network = PolicyValueNetwork(A, "mlp", (("hidden_sizes", (16,)),))
    params = init_state(network, make_optimizer(config), np.zeros(4, np.float32),
                        jax.random.PRNGKey(0)).params
    time_major = {k: np.swapaxes(v, 0, 1) for k, v in batch.items()}
    logits, values = network.apply(params, time_major["obs"])
    _, expected = impala_loss(
        logits[:-1], values, time_major["actions"], time_major["behaviour_logits"],
        time_major["rewards"], time_major["discounts"], time_major["episode_ends"],
        time_major["masks"], baseline_cost=config.baseline_cost,
        entropy_cost=config.entropy_cost, correction=correction, reduction=reduction)
    for name in ("loss", "pg_loss", "baseline_loss", "entropy_loss", "entropy"):
        np.testing.assert_allclose(metrics[name], expected[name], rtol=1e-4, err_msg=name)


def test_reward_scale_trains_on_scaled_rewards():
    batch = random_unrolls(np.random.default_rng(2), 8)
    scaled = dict(batch, rewards=batch["rewards"] * np.float32(0.01))
    state_a, [metrics_a] = run_updates(dataclasses.replace(CONFIG, reward_scale=0.01),
                                       jax.devices()[:1], [batch])
    state_b, [metrics_b] = run_updates(CONFIG, jax.devices()[:1], [scaled])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-8),
                 state_a, state_b)
    np.testing.assert_allclose(metrics_a["baseline_loss"], metrics_b["baseline_loss"], rtol=1e-6)
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="reward_scale"):
            dataclasses.replace(CONFIG, reward_scale=bad)


def test_learning_rate_anneals_linearly_to_zero():
    config = dataclasses.replace(CONFIG, total_env_steps=T * 8 * 4, optimizer="adam")
    rng = np.random.default_rng(1)
    batches = [random_unrolls(rng, 8) for _ in range(6)]
    state_4, _ = run_updates(config, jax.devices()[:1], batches[:4])
    state_6, _ = run_updates(config, jax.devices()[:1], batches)
    # After total_updates = 4 the rate is 0: further updates leave the parameters unchanged.
    jax.tree.map(np.testing.assert_array_equal, state_4.params, state_6.params)


def test_with_replay_the_rate_anneals_over_fresh_agent_steps_not_updates():
    # Half of each batch of 8 replayed: 4 fresh unrolls an update, so total_env_steps of
    # T x 8 x 4 agent steps take 8 updates (not 4) before the rate reaches 0.
    config = dataclasses.replace(CONFIG, total_env_steps=T * 8 * 4, optimizer="adam",
                                 replay_proportion=0.5)
    assert config.fresh_unrolls_per_update == 4 and config.total_updates == 8
    rng = np.random.default_rng(1)
    batches = [random_unrolls(rng, 8) for _ in range(10)]
    state_4, _ = run_updates(config, jax.devices()[:1], batches[:4])
    state_8, _ = run_updates(config, jax.devices()[:1], batches[:8])
    state_10, _ = run_updates(config, jax.devices()[:1], batches)
    assert not np.array_equal(jax.tree.leaves(state_4.params)[0],
                              jax.tree.leaves(state_8.params)[0])
    jax.tree.map(np.testing.assert_array_equal, state_8.params, state_10.params)
    two_processes = dataclasses.replace(  # 4 unrolls from each process, 2 of them replayed
        config, num_processes=2, coordinator_address="127.0.0.1:1234")
    assert two_processes.fresh_unrolls_per_update == 4


def test_the_lag_histogram_counts_every_step_of_every_batch():
    counts, mean = count_lags(np.zeros(1, np.int64), np.array([[0, 1], [1, 3]]))
    np.testing.assert_array_equal(counts, [1, 2, 0, 1])
    assert mean == 5 / 4
    counts, mean = count_lags(counts, np.array([[0, 0], [0, 0]]))
    np.testing.assert_array_equal(counts, [5, 2, 0, 1])
    assert mean == 5 / 8  # the whole run's mean, not the last batch's (0)
