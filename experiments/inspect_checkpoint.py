"""What a policy-value checkpoint has learned, on real frames: a first look when a run is flat.

    python experiments/inspect_checkpoint.py --flagfile=experiments/configs/impala_pong_cpu.cfg

Plays `--random_steps` random steps in 8 evaluation envs, then compares the latest checkpoint
of `run_dir` with freshly initialized parameters on those frames: the share of the torso's last
dense units that never fire (dead ReLUs from too-large early steps show here), how much the
policy's logits vary between states, the policy's entropy (uniform over A actions is log A), the
value's mean and spread, and the greedy actions. A policy still at uniform with a value that has
learned the return's scale points to a weak policy-gradient signal, not a broken network.
"""

import jax
import numpy as np
from absl import app, flags

from agents import trained
from agents.impala.config import ImpalaConfig
from agents.run import checkpoint
from agents.run.envs import actor_env_settings, make_env
from agents.run.flags import config_from_flags, define_flags

define_flags(ImpalaConfig)
flags.DEFINE_integer("random_steps", 400, "random steps played to collect frames")


def summary(network, params, frames: np.ndarray) -> str:
    (logits, values), state = network.apply(params, frames, capture_intermediates=True)
    torso = next(v for k, v in state["intermediates"].items() if k.endswith("Torso_0"))
    dense = np.asarray(torso["dense"]["__call__"][0])  # [N, hidden] before the ReLU
    logits, values = np.asarray(logits), np.asarray(values)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    entropy = -(probs * np.log(probs)).sum(-1)  # [N]
    greedy = np.bincount(logits.argmax(-1), minlength=logits.shape[-1])
    return (f"dense units never active {np.mean(dense.max(0) <= 0):.2f} | entropy "
            f"{entropy.mean():.3f} (uniform {np.log(logits.shape[-1]):.3f}) | logit std over "
            f"states {logits.std(0).mean():.4f} | value mean {values.mean():.3f} std "
            f"{values.std():.3f} | greedy actions {greedy.tolist()}")


def main(argv):
    config = config_from_flags(ImpalaConfig)
    path = checkpoint.find_resumable(f"{config.run_dir}/checkpoints", print, move_aside=False)
    if path is None:
        raise SystemExit(f"error: no checkpoint in {config.run_dir}/checkpoints")
    agent = trained.load("impala", path)
    info, network = agent.info, agent.network
    fresh = network.init(jax.random.PRNGKey(0), np.zeros((1,) + info.obs_shape, info.obs_dtype))
    env = make_env(actor_env_settings(agent.config, 0).for_evaluation(8))
    obs, _ = env.reset()
    rng, frames = np.random.default_rng(0), []
    for step in range(flags.FLAGS.random_steps):
        obs, *_ = env.step(rng.integers(0, info.num_actions, 8).astype(np.int32))
        if step % 10 == 0:
            frames.append(obs.copy())
    env.close()
    frames = np.concatenate(frames)
    print(f"{len(frames)} frames; checkpoint {path} after {agent.updates:,} updates, "
          f"{agent.env_steps:,} agent steps")
    print(f"initial: {summary(network, fresh, frames)}")
    print(f"trained: {summary(network, agent.params, frames)}")


if __name__ == "__main__":
    app.run(main)
