"""The papers' Atari configs run as a user starts them, for a fixed time: frames/s and updates/s.

For a GPU host (`bench_gpu.py --run_seconds 120` calls it after the learner part): each agent's
paper flagfile (`experiments/configs/<agent>_atari.cfg`) runs through
`experiments/run_<agent>.py` with as many actor threads as help on the host
(`actor_threads`), in-run evaluations and periodic checkpoints off, and is stopped after
`seconds`. Rates come from the
run's own `train.csv`, after its first report (compilation and, for Ape-X, the replay's fill
to min_replay_size stay out of the learner's rate but not of the frames/s).

Anchors (per second): the Ape-X paper's learner made 19 updates of batch 512 on one P100
(Horgan et al. 2018, Sec. 4); Cleanba's IMPALA ran about 24K frames on one A100 with 10 CPUs
(200M frames in 136 minutes, Huang et al. 2023).

    python benchmarks/paper_runs.py --seconds 120

Imports neither JAX nor envpool itself: the runs are separate processes.
"""

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAME_SKIP = 4
ANCHORS = {"apex": ("updates/s", 19.0, "Ape-X paper, one P100"),
           "impala": ("frames/s", 24_000.0, "Cleanba IMPALA, one A100")}


def actor_threads(cores: int) -> int:
    """Actor threads for a host of `cores`: at most 4. Python threads share one interpreter
    lock, and on a 16-core H200 host 14 actor threads made 0.45x (IMPALA) and 0.70x (Ape-X)
    the frames/s of 4, with the learner starved (BUILD_NOTES, "GPU check")."""
    return max(1, min(4, cores - 2))


def train_rows(run_dir: str) -> list[dict[str, float]]:
    path = os.path.join(run_dir, "train.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)}
                for row in csv.DictReader(f)]


def rates(rows: list[dict[str, float]]) -> dict[str, float]:
    """Frames/s and updates/s between the first and the last report of a run."""
    if len(rows) < 2:
        return {"frames/s": float("nan"), "updates/s": float("nan"), "reports": len(rows)}
    first, last = rows[0], rows[-1]
    seconds = last["wall_s"] - first["wall_s"]
    return {"frames/s": FRAME_SKIP * (last["env_steps"] - first["env_steps"]) / seconds,
            "updates/s": (last.get("updates", 0.0) - first.get("updates", 0.0)) / seconds,
            "reports": len(rows)}


def run_paper_config(agent: str, seconds: float, num_actors: int) -> dict[str, float]:
    """Starts `run_<agent>.py` on its paper flagfile, stops it after `seconds`, returns rates."""
    with tempfile.TemporaryDirectory(prefix=f"paper_{agent}_") as run_dir:
        command = [sys.executable, os.path.join(ROOT, "experiments", f"run_{agent}.py"),
                   f"--flagfile={os.path.join(ROOT, 'experiments/configs', agent + '_atari.cfg')}",
                   f"--num_actors={num_actors}", f"--run_dir={run_dir}", "--log_period_s=10",
                   "--eval_period=1000000000", "--checkpoint_period_s=1000000000"]
        # The calling process (bench_gpu.py) may hold most of the GPU's memory already.
        env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
        process = subprocess.Popen(command, cwd=ROOT, env=env)
        try:
            process.wait(timeout=seconds)
            raise RuntimeError(f"{agent} run exited early with code {process.returncode}")
        except subprocess.TimeoutExpired:
            pass
        result = rates(train_rows(run_dir))
        # The rates are read; the final checkpoint (Ape-X: the replay too) is not needed.
        process.send_signal(signal.SIGKILL)
        process.wait()
        return result


def run_and_print(agents: list[str], seconds: float, num_actors: int) -> None:
    """Runs each agent's paper config in turn and prints its rates against its anchor."""
    for agent in agents:
        start = time.perf_counter()
        result = run_paper_config(agent, seconds, num_actors)
        unit, anchor, source = ANCHORS[agent]
        print(f"{agent}_atari.cfg, {num_actors} actor threads, "
              f"{time.perf_counter() - start:.0f} s: {result['frames/s']:,.0f} frames/s, "
              f"{result['updates/s']:.2f} updates/s ({result['reports']} reports); "
              f"{unit} against {source} {anchor:,.0f}: {result[unit] / anchor:.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--agents", default="impala,apex")
    parser.add_argument("--num_actors", type=int, default=actor_threads(os.cpu_count() or 1))
    args = parser.parse_args()
    run_and_print(args.agents.split(","), args.seconds, args.num_actors)


if __name__ == "__main__":
    main()
