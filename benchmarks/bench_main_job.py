"""The main job (Ape-X on CartPole-v1 to the solved line) against Stable-Baselines3's DQN.

Each seed runs both, one process at a time, alternating which goes first, so that both see the
same machine (wall time here varies up to 2x between hours): ours is `make run`'s command
(`experiments/run_apex.py --flagfile=experiments/configs/apex_cartpole.cfg`, in a temporary run
folder), the peer `benchmarks/peers/sb3_dqn_cartpole.py` (its tuned settings) in its own
environment `.venv-peers` (`make bench-peers`). Both stop at the same line: a mean greedy return
>= 475 over 10 evaluation episodes.

Reported per contender, median over seeds: process wall time (start-up, training, shutdown and
what each writes at the end; what a user waits for), training time to the solved line (each
process's own clock), env steps to the solved line (not noisy, unlike time), and CPU use.
Targets: ours/SB3 process wall <= 0.75, env steps <= 2.

    make bench-peers          # builds .venv-peers, then runs this
    .venv/bin/python benchmarks/bench_main_job.py --seeds=0,1,2,3,4
"""

import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

import timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
flags.DEFINE_list("seeds", ["0", "1", "2", "3", "4"], "seeds; each runs both contenders")
flags.DEFINE_string("peer_python", os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    "the Python of the environment with Stable-Baselines3")
flags.DEFINE_list("ours_flags", [], "extra flags for ours, e.g. --ours_flags=--samples_per_insert=8")
FLAGS = flags.FLAGS


def ours_command(seed: int, run_dir: str) -> list[str]:
    return [sys.executable, os.path.join(ROOT, "experiments", "run_apex.py"),
            f"--flagfile={os.path.join(ROOT, 'experiments', 'configs', 'apex_cartpole.cfg')}",
            f"--seed={seed}", f"--run_dir={run_dir}", *FLAGS.ours_flags]


def peer_command(seed: int) -> list[str]:
    return [FLAGS.peer_python, os.path.join(ROOT, "benchmarks", "peers", "sb3_dqn_cartpole.py"),
            f"--seed={seed}"]


def parse_ours(out: str) -> tuple[bool, int, float]:
    """(solved, env steps, training seconds) from the main job's last line."""
    m = re.search(r"done: solved=(\w+) env_steps=([\d,]+) updates=[\d,]+ in (\d+) s", out)
    if not m:
        raise RuntimeError(f"the main job printed no summary line:\n{out[-3000:]}")
    return m.group(1) == "True", int(m.group(2).replace(",", "")), float(m.group(3))


def parse_peer(out: str) -> tuple[bool, int, float]:
    m = re.search(r"solved=(\w+) env_steps=(\d+) train_s=([\d.]+)", out)
    if not m:
        raise RuntimeError(f"the peer printed no summary line:\n{out[-3000:]}")
    return m.group(1) == "True", int(m.group(2)), float(m.group(3))


def timed(command: list[str]) -> tuple[str, float, float]:
    """(output, process wall seconds, CPU seconds of the process and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command} exited {done.returncode}:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout + done.stderr, wall, cpu


def main(argv):
    del argv
    if not os.path.exists(FLAGS.peer_python):
        raise ValueError(f"peer_python {FLAGS.peer_python} does not exist; run `make bench-peers`")
    rows, results = [], {"ours": [], "sb3": []}
    for i, seed in enumerate(int(s) for s in FLAGS.seeds):
        with tempfile.TemporaryDirectory() as run_dir:
            jobs = {"ours": (ours_command(seed, run_dir), parse_ours),
                    "sb3": (peer_command(seed), parse_peer)}
            for name in (("ours", "sb3") if i % 2 == 0 else ("sb3", "ours")):
                command, parse = jobs[name]
                out, wall, cpu = timed(command)
                solved, steps, train_s = parse(out)
                results[name].append(dict(wall=wall, train=train_s, steps=steps, cpu=cpu / wall))
                rows.append([seed, name, solved, wall, train_s, steps, f"{100 * cpu / wall:.0f}%"])
                print(f"seed {seed} {name}: solved={solved} wall {wall:.1f} s, training "
                      f"{train_s:.1f} s, {steps} env steps, CPU {100 * cpu / wall:.0f}%",
                      flush=True)
    timing.print_table(["seed", "contender", "solved", "process wall s", "training s",
                        "env steps", "CPU"], rows)
    medians = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
               for name, runs in results.items()}
    ratio = {k: medians["ours"][k] / medians["sb3"][k] for k in ("wall", "train", "steps")}
    timing.print_table(
        ["median", "process wall s", "training s", "env steps", "CPU"],
        [[name, m["wall"], m["train"], m["steps"], f"{100 * m['cpu']:.0f}%"]
         for name, m in medians.items()]
        + [["ours/SB3", ratio["wall"], ratio["train"], ratio["steps"], ""]])
    print(f"targets: process wall <= 0.75: {'met' if ratio['wall'] <= 0.75 else 'missed'}; "
          f"env steps <= 2: {'met' if ratio['steps'] <= 2 else 'missed'}")


if __name__ == "__main__":
    app.run(main)
