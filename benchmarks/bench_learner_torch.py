"""IMPALA's learner update on this CPU, JAX against a PyTorch reference, side by side.

The update of `experiments/configs/impala_pong_cpu_group_norm_batch8.cfg` (shallow torso with
GroupNorm, T=20, B=8, V-trace, RMSProp, clip 40) as the learner jits it, under XLA's default
options, and the same network, loss and optimizer in PyTorch
(`benchmarks/peers/torch_impala_learner.py`, checked against the JAX loss and update by
`tests/benchmarks/test_torch_impala_learner.py`), on the same synthetic batch. Each framework
lives in its own worker process, built and compiled once; the parent then has them run in
turn, `--rounds` times, alternating which goes first, so that the load of a shared machine hits
both alike. Only the ratio torch/JAX of a run means anything on a busy host.

torch is not a requirement of the project; install the pinned CPU wheel beside the project
(not into .venv, where tensorboardX would import it) and put it on the path:

    python -m pip install --no-deps --target .venv-peers/torch-site \
        -r benchmarks/peers/requirements-torch.txt
    PYTHONPATH=.:.venv-peers/torch-site .venv/bin/python benchmarks/bench_learner_torch.py \
        [--seconds 10] [--rounds 4] [--torch_variant one_thread_compile] \
        [--jax_variant default]  # or eigen_one_thread: XLA on one thread, as torch

Torch options tried (`torch_impala_learner.py --variants ...`, medians of 2-3 rounds of 5 s,
torch 2.13.0+cpu, 2 cores shared with other jobs, load average about 5): 2 threads (torch's
default) 350-475 ms/update, with channels_last 344-360, torch.compile 558, compile +
channels_last 200-555, OMP_WAIT_POLICY=PASSIVE 85; one thread 77-80, with channels_last 42-54,
compile 37-41, compile + channels_last 44-45. Likely cause: torch's two OpenMP threads meet at
a barrier in every op, and on an oversubscribed host one of them is often descheduled (PASSIVE
waiting recovers most of it). One thread with torch.compile (inductor) was fastest, 1.11x one
thread with channels_last in a head-to-head of 3 rounds; its first compile takes about 35 s
(then cached in /tmp/torchinductor_$USER).

One run, 2026-12-05, same host and load, `--seconds 12 --rounds 4`: jax 133.9 ms/update, torch
(one_thread_compile) 38.9, torch/jax 0.29 (rounds 0.27-0.30). The comparison is torch's best
options against XLA's defaults (two threads); XLA's one-thread setting
(`bench_learner_cpu.py --variants default,eigen_one_thread`) was not run beside it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = "experiments/configs/impala_pong_cpu_group_norm_batch8.cfg"


def jax_worker():
    """Builds the JAX update (`bench_learner_cpu.build_update`) and returns its (run, params
    count)."""
    import bench_learner_cpu

    one, params, _ = bench_learner_cpu.build_update()
    return one, params


def torch_worker(variant: str):
    """Builds the torch update under `variant` and returns its (run, params count)."""
    sys.path.insert(0, os.path.join(HERE, "peers"))
    import torch_impala_learner as peer  # imports torch

    from agents.impala.config import ImpalaConfig
    from agents.run.envs import actor_env_settings, env_info
    from agents.run.flags import config_from_flagfile

    config = config_from_flagfile(ImpalaConfig, CONFIG)
    settings = peer.settings_from_config(config, env_info(actor_env_settings(config, 0)))
    learner = peer.make_learner(settings, variant)
    batch = peer.make_batch(settings)

    def one():
        learner.update(peer.to_torch(batch))  # synchronous on the CPU

    return one, learner.num_params


def serve(framework: str, variant: str) -> None:
    """Worker loop: build and warm up, report, then time `run S` requests until `quit`."""
    start = time.perf_counter()
    one, params = jax_worker() if framework == "jax" else torch_worker(variant)
    for _ in range(3):  # the first compiles
        one()
    print(json.dumps(dict(params=params, setup_s=time.perf_counter() - start)), flush=True)
    for line in sys.stdin:
        if line.split()[0] != "run":
            break
        seconds, times = float(line.split()[1]), []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(times) < 3:
            t0 = time.perf_counter()
            one()
            times.append(time.perf_counter() - t0)
        print(json.dumps(dict(ms=1e3 * statistics.median(times), updates=len(times))),
              flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="timed seconds of each framework in each round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--torch_variant", default="one_thread_compile",
                        help="a VARIANTS name of benchmarks/peers/torch_impala_learner.py")
    parser.add_argument("--jax_variant", default="default",
                        help="a VARIANTS name of benchmarks/bench_learner_cpu.py (XLA's options)")
    parser.add_argument("--worker", choices=("jax", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        serve(args.worker, args.torch_variant)
        return

    sys.path.insert(0, os.path.join(HERE, "peers"))
    import torch_impala_learner as peer  # for the variant's environment (torch, idle, here)

    import bench_learner_cpu

    if args.torch_variant not in peer.VARIANTS:
        raise ValueError(f"--torch_variant: one of {sorted(peer.VARIANTS)}")
    if args.jax_variant not in bench_learner_cpu.VARIANTS:
        raise ValueError(f"--jax_variant: one of {sorted(bench_learner_cpu.VARIANTS)}")
    envs = dict(jax=bench_learner_cpu.variant_env(args.jax_variant),
                torch=peer.variant_env(args.torch_variant))
    workers, ready = {}, {}
    for name in ("jax", "torch"):  # built one after the other: compiling needs both cores
        workers[name] = subprocess.Popen(
            [sys.executable, __file__, "--worker", name, "--torch_variant",
             args.torch_variant], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=envs[name])
        line = workers[name].stdout.readline()
        if not line:
            raise RuntimeError(f"the {name} worker failed to start (its stderr above)")
        ready[name] = json.loads(line)
        print(f"{name}: ready in {ready[name]['setup_s']:.1f} s, "
              f"{ready[name]['params']:,} parameters", flush=True)
    assert ready["jax"]["params"] == ready["torch"]["params"], ready
    ms = {name: [] for name in workers}
    try:
        for r in range(args.rounds):
            order = ("jax", "torch") if r % 2 == 0 else ("torch", "jax")
            for name in order:
                workers[name].stdin.write(f"run {args.seconds}\n")
                workers[name].stdin.flush()
                ms[name].append(json.loads(workers[name].stdout.readline())["ms"])
            print(f"round {r + 1}: jax {ms['jax'][-1]:.1f} ms/update, torch "
                  f"{ms['torch'][-1]:.1f} ms/update, torch/jax "
                  f"{ms['torch'][-1] / ms['jax'][-1]:.2f}", flush=True)
    finally:
        for w in workers.values():
            w.stdin.write("quit\n")
            w.stdin.close()
            w.wait()
    jax_ms, torch_ms = statistics.median(ms["jax"]), statistics.median(ms["torch"])
    ratios = [t / j for t, j in zip(ms["torch"], ms["jax"])]
    label, jax_label = f"torch ({args.torch_variant})", f"jax ({args.jax_variant})"
    width = max(len(label), len(jax_label))
    print(f"{jax_label:{width}s} {jax_ms:8.1f} ms/update (median of rounds)")
    print(f"{label:{width}s} {torch_ms:8.1f} ms/update")
    print(f"{'torch/jax':{width}s} {statistics.median(ratios):8.2f} "
          f"(median of the rounds' ratios; {min(ratios):.2f}-{max(ratios):.2f})")

if __name__ == "__main__":
    main()
