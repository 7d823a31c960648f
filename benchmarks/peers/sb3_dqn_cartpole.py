"""Stable-Baselines3's DQN on CartPole-v1 with its tuned settings, run to the solved line.

The peer of `benchmarks/bench_main_job.py`; it runs in its own environment (`make bench-peers`
builds `.venv-peers` from `requirements-peer-sb3.txt`), never in the project's. Settings:
RL Baselines3 Zoo's tuned CartPole-v1 DQN hyperparameters (hyperparams/dqn.yml: 5e4 steps,
lr 2.3e-3, batch 64, buffer 1e5, learning starts 1000, gamma 0.99, target update every 10
gradient steps, train every 256 steps with 128 gradient steps, epsilon to 0.04 over the first
16%, two hidden layers of 256). Solved as the project's main job judges it: a mean greedy
return >= 475 over 10 evaluation episodes, evaluated every `--eval_every` env steps.

Prints one line: `solved=<bool> env_steps=<n> train_s=<seconds from the start of training>`.
"""

import argparse
import time

import gymnasium as gym
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy

SOLVED = 475.0


class StopWhenSolved(BaseCallback):
    """Greedy 10-episode evaluation every `every` env steps; stops training once solved."""

    def __init__(self, env: gym.Env, every: int):
        super().__init__()
        self.env, self.every, self.solved_at = env, every, None

    def _on_step(self) -> bool:
        if self.num_timesteps % self.every:
            return True
        mean, _ = evaluate_policy(self.model, self.env, n_eval_episodes=10, deterministic=True)
        if mean >= SOLVED:
            self.solved_at = self.num_timesteps
            return False
        return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval_every", type=int, default=2048)
    args = parser.parse_args()
    model = DQN("MlpPolicy", gym.make("CartPole-v1"), learning_rate=2.3e-3, batch_size=64,
                buffer_size=100_000, learning_starts=1000, gamma=0.99,
                target_update_interval=10, train_freq=256, gradient_steps=128,
                exploration_fraction=0.16, exploration_final_eps=0.04,
                policy_kwargs=dict(net_arch=[256, 256]), seed=args.seed, device="cpu")
    callback = StopWhenSolved(gym.make("CartPole-v1"), args.eval_every)
    start = time.perf_counter()
    model.learn(total_timesteps=50_000, callback=callback)
    solved = callback.solved_at is not None
    print(f"solved={solved} env_steps={callback.solved_at or model.num_timesteps} "
          f"train_s={time.perf_counter() - start:.2f}", flush=True)


if __name__ == "__main__":
    main()
