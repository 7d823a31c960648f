"""ZeRO stages 1 and 2 give stage 0's parameters with 1/N of the optimizer state per device."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from agents.parallel import sharding
from agents.parallel.zero import ZeroOptimizer

OPTIMIZERS = {
    "adam": lambda: optax.adam(1e-2),
    "rmsprop": lambda: optax.rmsprop(1e-2, decay=0.99, eps=0.01),
    "rmsprop_centered": lambda: optax.rmsprop(1e-3, decay=0.95, eps=1.5e-7, centered=True),
}


def init_params(key):
    k1, k2 = jax.random.split(key)
    # 7 * 5 + 5 + 5 * 3 + 3 = 58 numbers: not a multiple of 4, so the shards are padded.
    return dict(w1=jax.random.normal(k1, (7, 5)) * 0.3, b1=jnp.zeros(5),
                w2=jax.random.normal(k2, (5, 3)) * 0.3, b2=jnp.zeros(3))


def loss(params, batch):
    hidden = jnp.tanh(batch["x"] @ params["w1"] + params["b1"][None])
    return jnp.mean(jnp.square(hidden @ params["w2"] + params["b2"][None] - batch["y"]))


def run(opt_name, stage, devices, batches, params=None, canonical=None, max_grad_norm=1.0):
    mesh = sharding.learner_mesh(devices)
    params = init_params(jax.random.PRNGKey(0)) if params is None else params
    zero = ZeroOptimizer(OPTIMIZERS[opt_name](), params, len(devices), stage, max_grad_norm)
    state = zero.init(params) if canonical is None else zero.from_canonical(canonical)
    state = jax.device_put(state, NamedSharding(mesh, zero.state_spec))
    params = sharding.put_replicated(params, mesh)

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh,
                       in_specs=(P(), zero.state_spec, P(sharding.BATCH_AXIS)),
                       out_specs=(P(), zero.state_spec, P()))
    def step(params, opt_state, batch):
        grads = jax.grad(loss)(sharding.per_device(params), batch)
        return zero.step(params, grads, opt_state)

    for batch in batches:
        params, state, _ = step(params, state, sharding.put_batch(batch, mesh))
    return jax.device_get(params), state, zero


def reference(opt_name, batches, max_grad_norm=1.0):
    params = init_params(jax.random.PRNGKey(0))
    opt = optax.chain(optax.clip_by_global_norm(max_grad_norm), OPTIMIZERS[opt_name]())
    state = opt.init(params)
    for batch in batches:
        updates, state = opt.update(jax.grad(loss)(params, batch), state, params)
        params = optax.apply_updates(params, updates)
    return params


def batches(count, seed=0):
    rng = np.random.default_rng(seed)
    return [dict(x=rng.normal(size=(16, 7)).astype(np.float32),
                 y=rng.normal(size=(16, 3)).astype(np.float32)) for _ in range(count)]


def close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5), a, b)


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
@pytest.mark.parametrize("stage", [0, 1, 2])
def test_every_stage_on_four_devices_equals_plain_optax(opt_name, stage):
    data = batches(6)
    params, _, _ = run(opt_name, stage, jax.devices(), data)
    close(params, reference(opt_name, data))


def per_device_bytes(state) -> int:
    """Bytes of optimizer state on the first device, read from the arrays' shards."""
    device = jax.devices()[0]
    return sum(shard.data.nbytes for leaf in jax.tree.leaves(state)
               for shard in leaf.addressable_shards if shard.device == device)


@pytest.mark.parametrize("stage", [1, 2])
def test_optimizer_state_per_device_is_one_nth_of_stage_zero(stage):
    data = batches(1)
    _, state_0, zero_0 = run("adam", 0, jax.devices(), data)
    _, state_n, zero_n = run("adam", stage, jax.devices(), data)
    full, part = per_device_bytes(state_0), per_device_bytes(state_n)
    # Adam: two moment vectors (58 numbers, padded to 60 = 4 x 15) and a step count.
    assert full == 2 * 58 * 4 + 4
    assert part == 2 * 15 * 4 + 4
    assert zero_n.shard * zero_n.num_devices >= zero_0.shard


def test_checkpoints_move_between_stages_and_device_counts():
    first, second = batches(3, seed=1), batches(3, seed=2)
    params, state, zero = run("adam", 1, jax.devices(), first)
    canonical = zero.to_canonical(jax.device_get(state))
    continued = [run("adam", stage, devices, second, params=params, canonical=canonical)[0]
                 for stage, devices in ((2, jax.devices()[:2]), (0, jax.devices()[:1]),
                                        (1, jax.devices()))]
    expected = reference("adam", first + second)
    for p in continued:
        close(p, expected)


def test_bad_stage_raises():
    with pytest.raises(ValueError, match="stage"):
        ZeroOptimizer(optax.adam(1e-3), init_params(jax.random.PRNGKey(0)), 4, 3)
