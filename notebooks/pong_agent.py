# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A trained IMPALA agent on Pong, from its checkpoint
#
# The repository ships the final checkpoint of an IMPALA run (Espeholt et al. 2018,
# arXiv:1802.01561) that learned Pong on two CPU cores: the paper's V-trace loss and RMSProp
# settings, the shallow torso with GroupNorm (Wu & He 2018) after every conv, batches of 8
# unrolls of 20 steps, 20M frames in 2 h 21 min. The papers' evaluation protocol scored it
# +19.0 over 30 games (`docs/results/impala_pong_cpu_group_norm_batch8/summary.md`).
#
# `agents.trained.load` rebuilds the run's config, network and parameters from a checkpoint
# folder without starting a run: no run folder is written, no thread or optimizer is made.
# This notebook loads it, plays it with the protocol, looks inside one game, and sets its
# learning curve beside the other Pong runs of the paper's loss. Every claim is an `assert`.

# %%
import os

import jax
import matplotlib.pyplot as plt
import numpy as np

from agents import trained
from agents.registry import paper_protocol
from agents.run.envs import actor_env_settings, make_env
from agents.run.evaluation import select_actions

RESULTS = "docs/results"
if not os.path.isdir(RESULTS):  # run from notebooks/
    RESULTS = os.path.join("..", RESULTS)
CHECKPOINT = os.path.join(RESULTS, "impala_pong_cpu_group_norm_batch8", "step_000000031248")

pong = trained.load("impala", CHECKPOINT)
config = pong.config
print(f"{config.env}: torso {config.torso}, norm {config.norm} ({config.num_groups} groups), "
      f"{config.batch_size} unrolls of {config.unroll_length} steps an update")
print(f"{pong.updates:,} updates, {pong.env_steps:,} agent steps = {4 * pong.env_steps:,} "
      f"frames; observations {pong.info.obs_shape} {np.dtype(pong.info.obs_dtype).name}, "
      f"{pong.info.num_actions} actions")
assert pong.updates == 31_248 and 4 * pong.env_steps == 20_000_000

# %% [markdown]
# ## Four games with the papers' protocol
#
# Whole games scored as the game scores them (first to 21), up to 30 no-op actions at the start,
# actions sampled from the policy as IMPALA's actors sample them, on envs seeded apart from
# every training env. The 30 games of the recorded evaluation scored +15 to +20 each.

# %%
returns = pong.evaluate(paper_protocol("impala", episodes=4))
print("scores:", returns)
assert (returns > 0).all()

# %% [markdown]
# ## Inside one game: a policy that is nearly uniform, and decisive when it counts
#
# The policy's entropy stayed at about 1.64 nats through training, close to uniform over the
# 6 actions (log 6 = 1.79), yet sampled play scores about as well as greedy play. One game,
# step by step, shows why: on most steps the action hardly matters (Pong has 3 pairs of
# equivalent actions, and a paddle far from the ball can do anything), and on a few steps the
# policy all but picks one action. The value (of clipped rewards, discount 0.99) rises ahead of
# the agent's points and falls ahead of the opponent's.

# %%
settings = actor_env_settings(config, 0).for_evaluation(1, seed=12_345)
env = make_env(settings)
policy_value = jax.jit(pong.network.apply)
rng = np.random.default_rng(0)
obs, _ = env.reset()
logits, values, rewards, done = [], [], [], False
while not done:
    step_logits, step_value = (np.asarray(x) for x in policy_value(pong.params, obs))
    obs, reward, terminated, truncated, _ = env.step(select_actions(step_logits, "sample",
                                                                    rng=rng))
    logits.append(step_logits[0])
    values.append(step_value[0])
    rewards.append(reward[0])
    done = bool(terminated[0] or truncated[0])
env.close()
logits, values, rewards = np.array(logits), np.array(values), np.array(rewards)
probs = np.exp(logits - logits.max(axis=1, keepdims=True))
probs /= probs.sum(axis=1, keepdims=True)
entropy = -(probs * np.log(probs)).sum(axis=1)  # [T] nats
won, lost = np.flatnonzero(rewards > 0), np.flatnonzero(rewards < 0)
print(f"{len(rewards)} steps, {len(won)}-{len(lost)}; entropy median {np.median(entropy):.2f}, "
      f"below 1 nat on {np.mean(entropy < 1):.1%} of steps, least {entropy.min():.3f}")


def value_ahead(points: np.ndarray, steps: int = 10) -> float:
    """Mean value over the `steps` steps before each point."""
    return float(np.mean([values[max(0, t - steps):t].mean() for t in points]))


print(f"value over the 10 steps before a point won {value_ahead(won):.2f}"
      + (f", before a point lost {value_ahead(lost):.2f}" if len(lost) else ""))
assert rewards.sum() > 0 and np.median(entropy) > 1.6 and 0.01 < np.mean(entropy < 1) < 0.25
assert not len(lost) or value_ahead(won) > value_ahead(lost) + 0.5

fig, (ax_value, ax_entropy) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
ax_value.plot(values, lw=0.8)
ax_value.vlines(won, *ax_value.get_ylim(), color="tab:green", lw=0.5, label="point won")
ax_value.vlines(lost, *ax_value.get_ylim(), color="tab:red", lw=0.5, label="point lost")
ax_value.set_ylabel("value")
ax_value.legend(loc="lower right")
ax_entropy.plot(entropy, lw=0.5)
ax_entropy.axhline(np.log(pong.info.num_actions), color="gray", ls="--", label="uniform")
ax_entropy.set_ylabel("policy entropy (nats)")
ax_entropy.set_xlabel("agent step")
ax_entropy.legend(loc="lower right")
plt.show()

# %% [markdown]
# ## Its learning curve beside the other Pong runs of the paper's loss
#
# The in-run evaluations (8 greedy games every 160K agent steps or so) of each run's
# `eval.csv`, against emulator frames. The batch of 32 unrolls is the paper's; GroupNorm made
# it learn within 20M frames, and 8 unrolls an update (4x the updates for the same frames)
# took it past +18.

# %%
RUNS = {"impala_pong_cpu": "32 unrolls", "impala_pong_cpu_group_norm": "32, GroupNorm",
        "impala_pong_cpu_group_norm_low_entropy": "32, GroupNorm, entropy cost 0.0006",
        "impala_pong_cpu_group_norm_batch8": "8, GroupNorm (this checkpoint)"}
curves = {}
for run, label in RUNS.items():
    table = np.genfromtxt(os.path.join(RESULTS, run, "eval.csv"), delimiter=",", names=True)
    curves[run] = table
    plt.plot(4 * table["env_steps"] / 1e6, table["mean_return"], label=label)
plt.axhline(20.4, color="gray", ls="--", label="IMPALA shallow, the paper (200M frames)")
plt.xlabel("frames (millions)")
plt.ylabel("mean return, 8 greedy games")
plt.legend(fontsize=8)
plt.show()
last = {run: float(table["mean_return"][-1]) for run, table in curves.items()}
print({RUNS[run]: value for run, value in last.items()})
assert last["impala_pong_cpu_group_norm_batch8"] == max(last.values()) >= 18
