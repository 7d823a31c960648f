"""One process of a two-process IMPALA learner (run by test_two_processes.py), and the
single-process reference it is compared with."""

import sys

import numpy as np

T, A, BATCH = 5, 3, 8


def config():
    from agents.impala.config import ImpalaConfig
    return ImpalaConfig(env="CartPole-v1", torso="mlp", mlp_hidden_sizes=(16,), unroll_length=T,
                        batch_size=BATCH, optimizer="rmsprop", learning_rate=1e-3,
                        total_env_steps=10_000)


def batches(count=3, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        masks = (rng.uniform(size=(BATCH, T)) > 0.1).astype(np.float32)
        out.append(dict(obs=rng.normal(size=(BATCH, T + 1, 4)).astype(np.float32),
                        actions=rng.integers(0, A, (BATCH, T)).astype(np.int32),
                        rewards=rng.normal(size=(BATCH, T)).astype(np.float32),
                        discounts=(0.99 * masks).astype(np.float32),
                        episode_ends=masks == 0, masks=masks,
                        behaviour_logits=rng.normal(size=(BATCH, T, A)).astype(np.float32)))
    return out


def train(devices, rows=slice(None)):
    """Updates on `batches()` over a mesh of `devices`, feeding `rows` of each batch from this
    process; returns the flat parameters."""
    import jax
    from jax.flatten_util import ravel_pytree

    from agents.impala.learner import init_state, make_optimizer, make_update
    from agents.impala.network import PolicyValueNetwork
    from agents.parallel import sharding

    cfg = config()
    network = PolicyValueNetwork(A, "mlp", (("hidden_sizes", (16,)),))
    mesh = sharding.learner_mesh(devices)
    state = init_state(network, make_optimizer(cfg), np.zeros(4, np.float32),
                       jax.random.PRNGKey(0))
    update, zero = make_update(network, cfg, mesh, state.params)
    state = zero.place_state(state, mesh)
    for batch in batches():
        local = {k: v[rows] for k, v in batch.items()}
        state, _ = update(state, sharding.put_batch(local, mesh))
    return np.asarray(ravel_pytree(zero.host_state(state).params)[0])


if __name__ == "__main__":
    process_id, address, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    from agents.parallel import distributed
    distributed.initialize(2, process_id, address)
    import jax
    devices = distributed.global_learner_devices(())
    assert jax.process_count() == 2 and len(devices) == 2 * jax.local_device_count()
    half = BATCH // 2
    np.save(out, train(devices, slice(process_id * half, (process_id + 1) * half)))
    distributed.shutdown(2)
