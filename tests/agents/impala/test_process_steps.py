"""A run's env steps over several jax.distributed processes: what is logged, checkpointed and
compared with the budget is the sum over processes, and a resume with another process count
goes on from that total (IMPALA on CartPole, processes on loopback)."""

import csv
import os
import re

from agents.run import checkpoint
from tests.agents.fault_injection import launch_processes

# The unrolls a process's actors have under way or queued when the run stops (never trained
# on, but stepped): 32 envs, 8 queued unrolls of 20 steps and one recv batch each.
SLACK = 32 * 20 + 8 * 20 + 64


def newest(run_dir) -> tuple[int, int]:
    """(env_steps, updates) of the newest checkpoint."""
    meta = checkpoint.read_meta(checkpoint.latest_checkpoint(os.path.join(run_dir,
                                                                          "checkpoints")))
    return meta["counters"]["env_steps"], meta["updates"]


def logged(run_dir) -> list[int]:
    with open(os.path.join(run_dir, "train.csv")) as f:
        return [int(float(row["env_steps"])) for row in csv.DictReader(f)]


def own_steps(out: str) -> int:
    """The env steps this process's own actors took in this start (its done line)."""
    return int(re.search(r"this process: ([\d,]+)", out).group(1).replace(",", ""))


def test_steps_are_summed_over_processes_and_resumes_go_on_from_the_total(tmp_path):
    run = str(tmp_path)
    flags = [f"--run_dir={run}", "--log_period_s=0.5", "--solved_return=inf",
             "--eval_period=1000000000", "--queue_size=16"]
    launch_processes(1, *flags, "--total_env_steps=3000")
    first, _ = newest(run)
    assert 3000 <= first <= 3000 + SLACK

    # 1 -> 2 processes: the two share what is left, and the checkpoint holds both ones' steps.
    outs = launch_processes(2, *flags, "--resume", "--total_env_steps=9000")
    second, _ = newest(run)
    assert 9000 - 2 * SLACK <= second <= 9000 + 2 * SLACK, second
    by_process = [own_steps(out) for out in outs]
    assert all(steps >= 1000 for steps in by_process), by_process  # both did their part
    # At most the steps process 1 took after the last update both joined are not counted.
    assert first + sum(by_process) - SLACK <= second <= first + sum(by_process), (
        first, by_process, second)
    assert logged(run)[-1] == second  # train.csv says what the checkpoint holds
    assert re.search(r"env steps [\d,]+ of total_env_steps=9,000 done", outs[1])

    # 2 -> 1 process: goes on from the two processes' total, not from process 0's steps.
    out, = launch_processes(1, *flags, "--resume", "--total_env_steps=12000")
    third, _ = newest(run)
    assert 12000 <= third <= 12000 + SLACK
    assert own_steps(out) == third - second
    assert logged(run)[-1] == third
