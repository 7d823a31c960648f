"""ZeRO: optimizer-state bytes per device and optimizer-step time by stage and device count.

For the Nature DQN network (Ape-X, centered RMSProp) and the IMPALA deep ResNet (RMSProp), at
N = 1, 2, 4, 8 faked CPU devices and ZeRO stages 0, 1, 2: the bytes of optimizer state on one
device, read from the arrays' shards, and the median time of one data-parallel optimizer step
(gradient reduction, clipping, update, parameter gather) with the gradients given. Forward and
backward passes are the same for every stage and are left out. Each N runs in its own process,
since the device count is fixed when JAX starts.

    python benchmarks/bench_zero.py [--devices 1,2,4,8] [--repeats 20]
"""

import argparse
import functools
import json
import os
import subprocess
import sys

import timing

NETWORKS = ("nature", "impala_resnet")


def worker(num_devices: int, repeats: int) -> list[dict]:
    import jax
    import numpy as np
    import optax
    from jax.sharding import NamedSharding, PartitionSpec as P

    from agents.parallel import sharding
    from agents.parallel.zero import ZeroOptimizer
    from networks import make_torso
    from networks.heads import DuelingQHead, PolicyValueHead

    frames = np.zeros((1, 84, 84, 4), np.uint8)
    mesh = sharding.learner_mesh(jax.devices()[:num_devices])
    rows = []
    for name in NETWORKS:
        torso = make_torso(name)
        head = DuelingQHead(6) if name == "nature" else PolicyValueHead(6)
        features = torso.init(jax.random.PRNGKey(0), frames)
        params = dict(torso=features, head=head.init(
            jax.random.PRNGKey(1), torso.apply(features, frames)))
        optimizer = (optax.rmsprop(6.25e-5, decay=0.95, eps=1.5e-7, centered=True)
                     if name == "nature" else optax.rmsprop(6e-4, decay=0.99, eps=0.01))
        grads = jax.tree.map(lambda p: np.full(p.shape, 1e-3, np.float32), params)
        for stage in (0, 1, 2):
            zero = ZeroOptimizer(optimizer, params, num_devices, stage, max_grad_norm=40.0)
            state = jax.device_put(zero.init(params), NamedSharding(mesh, zero.state_spec))
            replicated = sharding.put_replicated(params, mesh)
            local_grads = sharding.put_replicated(grads, mesh)

            @jax.jit
            @functools.partial(jax.shard_map, mesh=mesh,
                               in_specs=(P(), P(), zero.state_spec),
                               out_specs=(P(), zero.state_spec, P()))
            def step(p, g, s):
                return zero.step(p, sharding.per_device(g), s)

            out = step(replicated, local_grads, state)
            seconds = timing.median_seconds(
                lambda: step(replicated, local_grads, state), repeats=repeats)
            device = jax.devices()[0]
            per_device = sum(s.data.nbytes for leaf in jax.tree.leaves(out[1])
                             for s in leaf.addressable_shards if s.device == device)
            rows.append(dict(network=name, devices=num_devices, stage=stage,
                             params=zero.size, state_bytes=per_device, step_ms=seconds * 1e3))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeats)))
        return
    rows = []
    for n in (int(d) for d in args.devices.split(",")):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(n),
                              "--repeats", str(args.repeats)],
                             env=env, capture_output=True, text=True, check=True)
        rows += json.loads(out.stdout.strip().splitlines()[-1])
    base = {(r["network"], r["devices"]): r for r in rows if r["stage"] == 0}
    table = [[r["network"], r["devices"], r["stage"], f"{r['params']:,}",
              f"{r['state_bytes'] / 2**20:.2f}",
              f"{r['state_bytes'] / base[(r['network'], r['devices'])]['state_bytes']:.3f}",
              r["step_ms"]] for r in rows]
    timing.print_table(["network", "N", "stage", "params", "opt state MiB/device",
                        "vs stage 0", "step ms"], table)


if __name__ == "__main__":
    main()
