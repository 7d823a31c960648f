"""Stable-Baselines3's A2C on Pong: a reference curve for the IMPALA control run.

The same small-batch actor-critic settings as `experiments/configs/impala_pong_a2c_cpu.cfg`
(RL Baselines3 Zoo's tuned Atari A2C, hyperparams/a2c.yml: 16 envs, 5-step rollouts, RMSProp
as TensorFlow's with epsilon 1e-5, lr 7e-4, entropy 0.01, value 0.25, gradient clip 0.5; SB3's
AtariWrapper: up to 30 no-ops, frame skip 4, episodic life, clipped rewards, 84x84 gray, 4
frames stacked), its own Nature network. Runs in `.venv-peers` (`make bench-peers` installs it),
never in the project's environment.

Prints a line every `--log_every` agent steps: steps, frames, the mean return of the last 100
full games (unclipped, from SB3's Monitor) and the policy entropy; a CSV of the same goes to
`--csv`.

    .venv-peers/bin/python benchmarks/peers/sb3_a2c_pong.py --steps=2000000 --csv=a2c.csv
"""

import argparse
import csv
import time

import ale_py
import gymnasium as gym
import numpy as np
from stable_baselines3 import A2C
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.vec_env import VecFrameStack

gym.register_envs(ale_py)


class Progress(BaseCallback):
    """Logs the last 100 games' mean return every `every` agent steps."""

    def __init__(self, every: int, path: str):
        super().__init__()
        self.every, self.next, self.start = every, every, time.perf_counter()
        self.file = open(path, "w", newline="")
        self.writer = csv.writer(self.file)
        self.writer.writerow(["env_steps", "frames", "episode_return", "entropy", "wall_s"])

    def _on_step(self) -> bool:
        if self.num_timesteps < self.next:
            return True
        self.next += self.every
        games = [e["r"] for e in self.model.ep_info_buffer]
        mean = float(np.mean(games)) if games else float("nan")
        entropy = -self.logger.name_to_value.get("train/entropy_loss", float("nan"))
        wall = time.perf_counter() - self.start
        self.writer.writerow([self.num_timesteps, 4 * self.num_timesteps, mean, entropy, wall])
        self.file.flush()
        print(f"[a2c {wall:6.0f}s] steps {self.num_timesteps:,} frames "
              f"{4 * self.num_timesteps:,} return {mean:.2f} entropy {entropy:.3f}", flush=True)
        return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2_000_000, help="agent steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log_every", type=int, default=40_000)
    parser.add_argument("--csv", default="sb3_a2c_pong.csv")
    args = parser.parse_args()
    env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=16, seed=args.seed),
                        n_stack=4)
    model = A2C("CnnPolicy", env, learning_rate=7e-4, n_steps=5, gamma=0.99, ent_coef=0.01,
                vf_coef=0.25, max_grad_norm=0.5, seed=args.seed, device="cpu",
                policy_kwargs=dict(optimizer_class=RMSpropTFLike,
                                   optimizer_kwargs=dict(eps=1e-5)))
    model.learn(total_timesteps=args.steps, callback=Progress(args.log_every, args.csv))


if __name__ == "__main__":
    main()
