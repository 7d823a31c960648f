"""What a policy-value checkpoint has learned, on real frames: a first look when a run is flat.

    python experiments/inspect_checkpoint.py --flagfile=experiments/configs/impala_pong_cpu.cfg

Plays `--random_steps` random steps in 8 evaluation envs, then compares the latest checkpoint
of `run_dir` with freshly initialized parameters on those frames: the share of the torso's last
dense units that never fire (dead ReLUs from too-large early steps show here), how much the
policy's logits vary between states, the policy's entropy (uniform over A actions is log A), the
value's mean and spread, and the greedy actions. A policy still at uniform with a value that has
learned the return's scale points to a weak policy-gradient signal, not a broken network.
Any torso: the conv torsos' dense layer, or the last layer of the mlp torso (CartPole).

It reads IMPALA runs (policy and value); a run folder of Ape-X, with no checkpoint, or with
only damaged ones ends with one `error:` line and exit status 1.
"""

import dataclasses
import re

import jax
import numpy as np
from absl import app, flags

from agents import trained
from agents.registry import APEX, IMPALA
from agents.run import checkpoint
from agents.run.envs import actor_env_settings, random_policy_frames
from agents.run.flags import config_from_flags, define_flags

define_flags(IMPALA.config)
flags.DEFINE_integer("random_steps", 400, "random steps played to collect frames")


# Config fields only Ape-X's has: a checkpoint whose config records them is an Ape-X run's.
APEX_ONLY = sorted({f.name for f in dataclasses.fields(APEX.config)}
                   - {f.name for f in dataclasses.fields(IMPALA.config)})


def last_dense(torso: dict) -> np.ndarray:
    """The torso's last dense layer before its ReLU, `[N, hidden]`: `dense` in the conv
    torsos, the highest `dense_<i>` in the mlp torso."""
    layers = sorted((int(m.group(1) or -1), name) for name in torso
                    if (m := re.match(r"^dense(?:_(\d+))?$", name)))
    return np.asarray(torso[layers[-1][1]]["__call__"][0])


def summary(network, params, frames: np.ndarray) -> str:
    (logits, values), state = network.apply(params, frames, capture_intermediates=True)
    torso = next(v for k, v in state["intermediates"].items() if k.endswith("Torso_0"))
    dense = last_dense(torso)  # [N, hidden] before the ReLU
    logits, values = np.asarray(logits), np.asarray(values)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    entropy = -(probs * np.log(probs)).sum(-1)  # [N]
    greedy = np.bincount(logits.argmax(-1), minlength=logits.shape[-1])
    return (f"dense units never active {np.mean(dense.max(0) <= 0):.2f} | entropy "
            f"{entropy.mean():.3f} (uniform {np.log(logits.shape[-1]):.3f}) | logit std over "
            f"states {logits.std(0).mean():.4f} | value mean {values.mean():.3f} std "
            f"{values.std():.3f} | greedy actions {greedy.tolist()}")


def load(run_dir: str) -> tuple[str, trained.TrainedAgent]:
    """(path, agent) of the newest complete checkpoint of the IMPALA run in `run_dir`; exits
    with one `error:` line for anything else."""
    directory, damaged = f"{run_dir}/checkpoints", []
    path = checkpoint.find_resumable(directory, damaged.append, move_aside=False)
    for note in damaged if path is not None else []:
        print(note)
    if path is None:
        found = "; ".join(damaged) or "no checkpoint there"
        raise SystemExit(f"error: no complete checkpoint in {directory}: {found}")
    try:
        saved = checkpoint.read_run_meta(path)["config"]
        if apex_fields := [name for name in APEX_ONLY if name in saved]:
            raise SystemExit(
                f"error: {path} is an Ape-X checkpoint (its config has {apex_fields[0]}); "
                "inspect_checkpoint.py reads IMPALA runs (a policy and a value); load an Ape-X "
                f"one with agents.trained.load({APEX.name!r}, path)")
        return path, trained.load(IMPALA.name, path)
    except (checkpoint.CheckpointError, checkpoint.CheckpointMismatch, ValueError) as e:
        raise SystemExit(f"error: {e}") from None


def main(argv):
    config = config_from_flags(IMPALA.config)
    path, agent = load(config.run_dir)
    info, network = agent.info, agent.network
    fresh = network.init(jax.random.PRNGKey(0), np.zeros((1,) + info.obs_shape, info.obs_dtype))
    settings = actor_env_settings(agent.config, 0).for_evaluation(8)
    frames = random_policy_frames(settings, info.num_actions, flags.FLAGS.random_steps, 10)
    print(f"{len(frames)} frames; checkpoint {path} after {agent.updates:,} updates, "
          f"{agent.env_steps:,} agent steps")
    print(f"initial: {summary(network, fresh, frames)}")
    print(f"trained: {summary(network, agent.params, frames)}")


if __name__ == "__main__":
    app.run(main)
