"""Sample Factory's APPO on Pong: a frames/s peer for our IMPALA on a 2-core CPU machine.

Runs Sample Factory 2.1.1's own Atari example (`sf_examples.atari.train_atari`, env `atari_pong`)
with its published Atari settings, `sf_examples/atari/atari_params.py` (atari_override_defaults,
chosen there to match CleanRL's PPO): PPO clip 0.1 without V-trace, rollout 128, minibatches of 256,
4 per epoch (1024 samples an iteration), 4 epochs, Adam lr 2.5e-4 decayed linearly, eps 1e-5, gamma
0.99, GAE lambda 0.95, entropy 0.01, value 0.5, gradient clip 0.5, normalized inputs and returns,
the Nature CNN (convnet_atari), frame skip 4, 4 frames stacked, 10M frames by default. Changed for
2 cores only: 2 workers of 4 envs instead of 8 of 1 (the same 8 envs and 1024-sample iterations),
with double-buffered sampling (worker_num_splits=2) and learning while sampling (async_rl=True), as
in the "better parameters" of `docs/09-environment-integrations/atari.md`; the CPU device; and
restart_behavior=overwrite (2.1.1 resumes with torch.load without weights_only=False, which fails on
torch >= 2.6; fixed upstream in commit 143a3e72, not released). Extra `--name=value` arguments go to
Sample Factory after these and override them. Runs in `.venv-peer-sf`
(benchmarks/peers/requirements-sample-factory.txt), never in the project's environment.

The environment is `sf_examples/atari/atari_utils.py` (make_atari_env): gymnasium's
PongNoFrameskip-v4 from ale-py, whose registration fixes repeat_action_probability 0 (no sticky
actions), the minimal action set and frameskip 1 (none of them is a Sample Factory option), then up
to 30 no-ops, frame skip 4 with a max over the last two frames, episodic life, reward clipping to
the sign, 84x84 gray, 4 frames: as ours. It differs from our envpool Pong-v5 in that it presses FIRE
at each reset (FireResetEnv, not an option), resizes the RGB frame before graying it, and normalizes
inputs by running mean and std; returns are logged unclipped per full game.

Where frames/s is printed: every 5 s Sample Factory logs "Fps is (10 sec: A, 60 sec: B, 300 sec: C).
Total num frames: N", in emulator frames (agent steps x 4, summaries_use_frameskip=True), counted
when the learner consumes them, and "Avg episode reward"; at the end "Collected {0: N}, FPS: X",
startup included. This script then prints one line: frames, agent steps, frames/s from the first
training iteration on, and the mean return of the last 100 games. The same goes to
`<train_dir>/<experiment>/sf_log.txt` and TensorBoard (perf/_fps). `--seconds` is a wall-clock limit
from launch, enforced here: 2.1.1's own --train_for_seconds never fires (Runner.total_train_seconds
is never advanced).

    .venv-peer-sf/bin/python benchmarks/peers/sample_factory_pong.py --seconds=600 --train_dir=/tmp/sf

`--stop_return=18` ends the run once the mean return of the last `--stop_games` games (10 by
default: as many as one of our in-run evaluations; full games, actions sampled as in training
and as IMPALA's evaluations sample them) reaches 18, and prints when (wall time from launch and
frames): its time to +18. Sample Factory's own average (`stats_avg`, 100 games, about 19
minutes of play at these rates) trails its policy by far more than one evaluation does. Every
`--report_s` seconds a line gives the wall time, frames and the mean of the last 10 and 100
games: its learning curve.
"""

import argparse
import math
import sys
import time

import ale_py  # noqa: F401  registers PongNoFrameskip-v4; spawned workers re-import this module too
import numpy as np
from sample_factory.algo.runners.runner import AlgoObserver
from sample_factory.algo.utils.misc import ExperimentStatus
from sample_factory.train import make_runner
from sf_examples.atari.train_atari import parse_atari_args, register_atari_components

START = time.perf_counter()


def last_games(runner) -> list:
    """The returns of the last `stats_avg` (100) whole games Sample Factory keeps."""
    return list(runner.policy_avg_stats.get("reward", [[]])[0])


class WallClock(AlgoObserver):
    """Stops training `seconds` after launch, or once the mean return of the last `stop_games`
    games reaches `stop_return`; prints the curve every `report_s` seconds and the frames/s
    after the first iteration."""

    def __init__(self, seconds: int | None, stop_return: float = math.inf,
                 stop_games: int = 10, report_s: float = 60.0):
        self.seconds, self.stop_return, self.first, self.last = seconds, stop_return, None, None
        self.stop_games, self.report_s, self.reported = stop_games, report_s, START
        self.reached = False

    def report(self, now: float, frames: int, games: list) -> None:
        """One line of the learning curve: wall, frames, the mean of the last 10 and 100."""
        means = [f"{np.mean(games[-n:]):.2f}" if len(games) >= n else "n/a" for n in (10, 100)]
        print(f"[sf] wall {now - START:.0f}s frames {frames:,} return last 10 games "
              f"{means[0]} last 100 {means[1]}", flush=True)

    def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
        now, counted = time.perf_counter(), sum(runner.env_steps.values())
        if self.first is None and counted > 0:
            self.first = (now, counted)
        self.last = (now, counted)
        if self.seconds is not None:
            runner.total_train_seconds = now - START  # compared with --train_for_seconds
        games = last_games(runner)
        per_frame = 1 if runner.cfg.summaries_use_frameskip else runner.cfg.env_frameskip
        if now - self.reported >= self.report_s:
            self.reported = now
            self.report(now, counted * per_frame, games)
        window = games[-self.stop_games:]
        if not self.reached and len(window) == self.stop_games \
                and np.mean(window) >= self.stop_return:
            self.reached = True
            print(f"[sf] reached {self.stop_return:g}: mean {np.mean(window):.2f} of the last "
                  f"{len(window)} games at wall {now - START:.0f}s, frames "
                  f"{counted * per_frame:,}", flush=True)
        if self.reached:
            runner.total_train_seconds = math.inf  # ends training after this iteration

    def on_stop(self, runner) -> None:
        if self.first is None:
            return
        (t0, c0), (t1, c1) = self.first, self.last
        per_frame = 1 if runner.cfg.summaries_use_frameskip else runner.cfg.env_frameskip
        frames, skip = c1 * per_frame, runner.cfg.env_frameskip
        fps = (c1 - c0) * per_frame / max(t1 - t0, 1e-9)
        games = last_games(runner)
        mean = float(np.mean(games)) if len(games) else float("nan")
        print(f"[sf] wall {t1 - START:.0f}s frames {frames:,} agent steps {frames // skip:,} "
              f"frames/s {fps:.0f} (after the first iteration) return {mean:.2f} "
              f"(last {len(games)} games)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--seconds", type=int, default=None, help="wall-clock limit from launch")
    parser.add_argument("--train_for_env_steps", type=int, default=None,
                        help="frames (agent steps x 4); Sample Factory's Atari default is 10M")
    parser.add_argument("--train_dir", default="/tmp/sf")
    parser.add_argument("--experiment", default="sf_pong")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop_return", type=float, default=math.inf,
                        help="stop once the mean return of the last --stop_games games "
                        "reaches this")
    parser.add_argument("--stop_games", type=int, default=10,
                        help="games in --stop_return's mean, 1 to 100 (Sample Factory keeps "
                        "the last 100)")
    parser.add_argument("--report_s", type=float, default=60.0,
                        help="seconds between learning-curve lines")
    args, extra = parser.parse_known_args()
    if not 1 <= args.stop_games <= 100:
        parser.error(f"--stop_games must be in 1..100, got {args.stop_games}")
    argv = ["--algo=APPO", "--env=atari_pong", f"--experiment={args.experiment}",
            f"--train_dir={args.train_dir}", f"--seed={args.seed}", "--device=cpu",
            "--restart_behavior=overwrite", "--num_workers=2", "--num_envs_per_worker=4",
            "--worker_num_splits=2", "--async_rl=True"]
    if args.seconds is not None:
        argv.append(f"--train_for_seconds={args.seconds}")
    if args.train_for_env_steps is not None:
        argv.append(f"--train_for_env_steps={args.train_for_env_steps}")
    register_atari_components()
    _, runner = make_runner(parse_atari_args(argv + extra))
    runner.register_observer(WallClock(args.seconds, args.stop_return, args.stop_games,
                                        args.report_s))
    status = runner.init()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    return status


if __name__ == "__main__":
    sys.exit(main())
