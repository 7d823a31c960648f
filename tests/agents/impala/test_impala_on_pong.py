"""The IMPALA learner's update on real Pong unrolls against a float64 reference, unroll by unroll.

The loss is tested on hand-built arrays (test_impala_losses.py) and the actor's unrolls against
the game itself (tests/agents/test_atari_streams.py). This joins the two where a learning run
does: the learner's own update (batching, the transfer, the time-major transpose, the bootstrap
row, the loss terms as logged) on unrolls the real actor made on Pong, against each unroll's
terms recomputed in float64 from the network's outputs with V-trace written out as its sum.
The learner's parameters differ from the actor's, so the ratios pi/mu are not 1 and clip.
"""

import dataclasses
import threading

import jax
import numpy as np
import pytest
from test_impala_losses import log_softmax, reference_targets

from agents.impala.actor import make_policy
from agents.impala.builder import make_actors, make_network, make_queue
from agents.impala.config import ImpalaConfig
from agents.impala.learner import init_state, make_optimizer, make_update
from agents.parallel import sharding
from agents.run.envs import actor_env_settings, env_info
from agents.run.param_server import ParamServer
from agents.run.stats import RunStats

NUM_UNROLLS = 24  # 4 envs x 6 unrolls of 20 steps: 120 steps per env, past Pong's first points
CONFIG = ImpalaConfig(env="Pong-v5", num_actors=1, envs_per_actor=4, actor_batch_size=2,
                      noop_max=30, max_episode_frames=108_000, run_dir="unused",
                      torso="impala_shallow", unroll_length=20, batch_size=NUM_UNROLLS,
                      queue_size=NUM_UNROLLS + 8, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0)


@pytest.fixture(scope="module")
def pong():
    """(network, the learner's parameters, `Unrolls` [K, T(+1), ...] from the real actor)."""
    info = env_info(actor_env_settings(CONFIG, 0))
    network = make_network(CONFIG, info)
    sample = np.zeros((1, *info.obs_shape), info.obs_dtype)
    server = ParamServer()
    server.publish(network.init(jax.random.PRNGKey(0), sample))  # mu: the actor's
    queue = make_queue(CONFIG)
    [actor] = make_actors(CONFIG, info, make_policy(network), queue, server, RunStats())
    stop = threading.Event()
    thread = threading.Thread(target=actor.run, args=(stop,))
    thread.start()
    try:
        for _ in range(2400):
            if len(queue) >= NUM_UNROLLS or not thread.is_alive():
                break
            stop.wait(0.05)
    finally:
        stop.set()
        thread.join(30)
    assert len(queue) >= NUM_UNROLLS, "the actor made too few unrolls within 2 minutes"
    unrolls = queue.get_batch(NUM_UNROLLS, threading.Event())
    params = network.init(jax.random.PRNGKey(1), sample)  # pi: the learner's, not mu
    return network, params, unrolls


def reference_terms(network, params, unrolls, reduction: str) -> dict[str, float]:
    """The loss terms of `agents.impala.losses` for the whole batch, float64, one unroll at a
    time from the network's outputs on that unroll's frames alone."""
    totals = dict(pg_loss=0.0, baseline_loss=0.0, entropy_loss=0.0, entropy=0.0,
                  pg_advantage_abs=0.0, rho=0.0)
    for k in range(len(unrolls.actions)):
        logits, values = jax.device_get(network.apply(params, unrolls.obs[k]))  # [T+1, A], [T+1]
        logp = log_softmax(np.asarray(logits[:-1], np.float64))  # [T, A]
        mu_logp = log_softmax(np.asarray(unrolls.behaviour_logits[k], np.float64))
        a = unrolls.actions[k][:, None]
        logp_a = np.take_along_axis(logp, a, -1)[:, 0]  # [T]
        rho = np.exp(logp_a - np.take_along_axis(mu_logp, a, -1)[:, 0])
        v = np.asarray(values, np.float64)
        m = np.asarray(unrolls.masks[k], np.float64)
        vs, adv = reference_targets(v, unrolls.rewards[k], unrolls.discounts[k],
                                    unrolls.episode_ends[k], m, rho, CONFIG.lambda_,
                                    CONFIG.rho_bar, CONFIG.c_bar, CONFIG.pg_rho_bar)
        entropy = -(np.exp(logp) * logp).sum(-1)
        totals["pg_loss"] -= (m * logp_a * adv).sum()
        totals["baseline_loss"] += 0.5 * (m * (vs - v[:-1]) ** 2).sum()
        totals["entropy_loss"] -= (m * entropy).sum()
        totals["entropy"] += (m * entropy).sum()
        totals["pg_advantage_abs"] += (m * np.abs(adv)).sum()
        totals["rho"] += (m * rho).sum()
    steps = float(unrolls.masks.sum())
    scale = 1.0 if reduction == "sum" else 1.0 / steps
    terms = {k: totals[k] * scale for k in ("pg_loss", "baseline_loss", "entropy_loss")}
    terms["loss"] = (terms["pg_loss"] + CONFIG.baseline_cost * terms["baseline_loss"]
                     + CONFIG.entropy_cost * terms["entropy_loss"])
    return terms | {k: totals[k] / steps for k in ("entropy", "pg_advantage_abs", "rho")}


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_learner_update_on_pong_unrolls_matches_the_float64_reference(pong, reduction):
    network, params, unrolls = pong
    assert np.any(unrolls.rewards != 0), "no point scored in the unrolls: nothing to check"
    config = dataclasses.replace(CONFIG, reduction=reduction)
    mesh = sharding.learner_mesh(jax.devices()[:2])  # two learner devices, as a real run may
    state = init_state(network, make_optimizer(config), unrolls.obs[0, 0], jax.random.PRNGKey(1))
    state = state._replace(params=params)
    update, zero = make_update(network, config, mesh, state.params)
    fields = unrolls._asdict()
    del fields["param_versions"], fields["env_ids"]
    _, metrics = update(zero.place_state(state, mesh), sharding.put_batch(fields, mesh))
    metrics = jax.device_get(metrics)
    assert np.all(np.isfinite(metrics.pop("health")))  # [2]: the loss and the parameters' norm
    metrics = {k: float(v) for k, v in metrics.items()}
    expected = reference_terms(network, params, unrolls, reduction)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    assert 0 < metrics["rho_clipped_fraction"] < 1  # pi != mu: V-trace's clipping is at work
