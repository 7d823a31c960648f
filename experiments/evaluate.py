"""One checkpoint evaluated with its paper's protocol: the score a run's checkpoint reaches.

The protocol is `agents.registry.paper_protocol` (whole games of up to 108K frames after up to 30
no-op starts, no FIRE pressed for the agent, the agent's own action rule: IMPALA samples from its
policy, Ape-X acts epsilon-greedily with its paper's epsilon), on envs seeded apart from
training, as the reproduction scripts' final evaluation. It prints the mean return with a 95%
bootstrap interval of the mean over the episodes and the games' lengths, and writes each
episode's return and agent steps to `--out`.

    python experiments/evaluate.py --agent=impala --episodes=30 \
        --checkpoint=runs/impala_pong_cpu_fast_seed0/checkpoints/step_000000028139 \
        --out=docs/results/impala_pong_cpu_fast_seed0/protocol_returns.csv
"""

import csv

import numpy as np
from absl import app, flags

from agents import registry, trained
from agents.run import checkpoint

flags.DEFINE_string("agent", "impala", f"the checkpoint's agent: one of {registry.names()}")
flags.DEFINE_string("checkpoint", None, "a checkpoint folder (runs/<run>/checkpoints/step_N)")
flags.DEFINE_integer("episodes", 30, "whole episodes played (the papers: 30)")
flags.DEFINE_bool("greedy", False, "IMPALA: the argmax action instead of a sample")
flags.DEFINE_float("epsilon", None, "Ape-X: the evaluation's epsilon (default: its paper's)")
flags.DEFINE_string("out", None, "a CSV of each episode's return and steps (optional)")
flags.DEFINE_integer("bootstrap_reps", 2000, "resamples of the mean's interval")
FLAGS = flags.FLAGS


def mean_interval(returns: np.ndarray, reps: int, seed: int = 0) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the mean of `returns` `[episodes]`."""
    rng = np.random.default_rng(seed)
    means = returns[rng.integers(0, len(returns), (reps, len(returns)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def load() -> tuple[trained.TrainedAgent, object]:
    """The checkpoint's agent and protocol; one `error:` line and exit status 1 for bad flags
    or a checkpoint that is missing, damaged or another agent's."""
    try:
        if not FLAGS.checkpoint:
            raise ValueError("--checkpoint must name a checkpoint folder (runs/<run>/"
                             "checkpoints/step_N)")
        if FLAGS.bootstrap_reps < 1:
            raise ValueError(f"--bootstrap_reps must be an integer >= 1, got "
                             f"{FLAGS.bootstrap_reps}")
        protocol = registry.paper_protocol(FLAGS.agent, FLAGS.episodes, FLAGS.greedy,
                                           FLAGS.epsilon)
        agent = trained.load(FLAGS.agent, FLAGS.checkpoint)
    except (checkpoint.CheckpointError, checkpoint.CheckpointMismatch, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    return agent, protocol


def main(argv):
    del argv
    agent, protocol = load()
    games = agent.play(protocol)
    returns = np.asarray(games.returns, np.float64)
    low, high = mean_interval(returns, FLAGS.bootstrap_reps)
    if FLAGS.out:
        with open(FLAGS.out, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["episode", "return", "steps"])
            writer.writerows((i, float(r), int(n)) for i, (r, n) in
                             enumerate(zip(returns, games.steps)))
    rule = protocol.action_rule + (f" {protocol.epsilon:g}" if protocol.action_rule ==
                                   "epsilon_greedy" else "")
    print(f"{FLAGS.checkpoint}: {agent.config.env}, {agent.env_steps:,} agent steps, "
          f"{agent.updates:,} updates; {len(returns)} episodes ({rule}): mean "
          f"{returns.mean():.2f} [95% CI {low:.2f}, {high:.2f}], std {returns.std():.2f}, "
          f"min {returns.min():g}, max {returns.max():g}; agent steps a game: mean "
          f"{games.steps.mean():,.0f}, max {games.steps.max():,}")


if __name__ == "__main__":
    app.run(main)
