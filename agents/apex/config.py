"""Ape-X DQN settings: the one source of defaults (the paper's Atari settings).

Horgan et al. 2018 (arXiv:1803.00933), Sec. 4 and Appendix C; experiments/configs/*.cfg override
these for CartPole and for a GPU host.
"""

import dataclasses
import math

from agents.apex.losses import LOSSES
from networks import NORMS, TORSOS

OPTIMIZERS = ("rmsprop_centered", "adam")


@dataclasses.dataclass(frozen=True)
class ApexConfig:
    """Every setting of an Ape-X run; each is also a command-line flag of the same name.

    Attributes:
      env: envpool task id, e.g. Pong-v5 (Atari) or CartPole-v1.
      num_actors: actor threads, each with its own envpool (the paper: 360 single-env actors).
      envs_per_actor: environments in each actor's envpool.
      actor_batch_size: environments an actor acts for per step (envpool async batch_size);
        must be below envs_per_actor so envpool steps the others meanwhile.
      episodic_life: Atari: a lost life ends the training episode (not the game).
      reward_clip: Atari: clip training rewards to [-1, 1].
      noop_max: Atari: up to this many no-op actions at the start of an episode.
      repeat_action_probability: Atari: sticky actions (0 in the paper).
      max_episode_frames: Atari: episode cap in emulator frames (108K = 30 minutes).
      max_episode_steps: classic control: episode cap in steps; 0 keeps the env's own.
      epsilon_base: exploration of env i of N is epsilon_base^(1 + epsilon_alpha * i / (N-1)).
      epsilon_alpha: see epsilon_base.
      n_step: steps in the bootstrapped return.
      discount: gamma.
      local_buffer_size: transitions an actor collects before one batched add to the replay.
      actor_update_period: agent steps per env between an actor's parameter pulls (the paper:
        400 frames = 100 steps).
      replay_capacity: transitions held by the prioritized replay (FIFO).
      priority_exponent: alpha of prioritized replay.
      importance_exponent: beta of the importance weights.
      min_replay_size: transitions in the replay before learning starts.
      samples_per_insert: if > 0, actors and learner wait to keep sampled / inserted
        transitions near this ratio, so learning does not depend on machine speed (the paper
        runs both free: 0).
      batch_size: transitions per learner update, split over the learner devices.
      optimizer: rmsprop_centered (the paper) or adam.
      learning_rate: step size (the paper: 0.00025 / 4).
      rms_decay: RMSProp decay.
      optimizer_epsilon: RMSProp or Adam epsilon.
      max_grad_norm: global gradient norm clip.
      target_update_period: learner updates between target network copies.
      loss: squared (the paper's 1/2 td^2) or huber.
      huber_delta: Huber loss threshold.
      publish_period: learner updates between parameter publishes to the actors.
      torso: network torso: mlp (vectors) or nature, impala_shallow, impala_resnet (frames).
      mlp_hidden_sizes: widths of the mlp torso.
      norm: conv torso normalization: none, group or layer.
      num_groups: GroupNorm groups when norm=group.
      dueling: dueling Q head (the paper) instead of a linear one.
      head_hidden_sizes: hidden widths of each dueling stream (the paper: 512 after the convs).
      seed: seed of everything random.
      total_env_steps: stop after this many agent steps over all envs.
      eval_period: learner updates between greedy evaluations.
      eval_episodes: episodes per evaluation (one per env of a separate envpool).
      solved_return: stop once an evaluation's mean return reaches this (inf: never).
      log_period_s: seconds between progress lines and metric rows.
      checkpoint_period_s: seconds between checkpoints (learner, optimizer, counters, replay).
      checkpoint_replay: include the replay's contents in checkpoints (a full Atari replay is
        gigabytes; without it a resumed run refills the replay before learning).
      run_dir: folder for metrics, checkpoints, the saved config and the learning curve.
      resume: continue from the latest checkpoint in run_dir.
    """

    env: str = "Pong-v5"
    num_actors: int = 8
    envs_per_actor: int = 32
    actor_batch_size: int = 16
    episodic_life: bool = True
    reward_clip: bool = True
    noop_max: int = 30
    repeat_action_probability: float = 0.0
    max_episode_frames: int = 108_000
    max_episode_steps: int = 0
    epsilon_base: float = 0.4
    epsilon_alpha: float = 7.0
    n_step: int = 3
    discount: float = 0.99
    local_buffer_size: int = 50
    actor_update_period: int = 100
    replay_capacity: int = 2_000_000
    priority_exponent: float = 0.6
    importance_exponent: float = 0.4
    min_replay_size: int = 50_000
    samples_per_insert: float = 0.0
    batch_size: int = 512
    optimizer: str = "rmsprop_centered"
    learning_rate: float = 0.00025 / 4
    rms_decay: float = 0.95
    optimizer_epsilon: float = 1.5e-7
    max_grad_norm: float = 40.0
    target_update_period: int = 2500
    loss: str = "squared"
    huber_delta: float = 1.0
    publish_period: int = 1
    torso: str = "nature"
    mlp_hidden_sizes: tuple[int, ...] = (256, 256)
    norm: str = "none"
    num_groups: int = 8
    dueling: bool = True
    head_hidden_sizes: tuple[int, ...] = (512,)
    seed: int = 0
    total_env_steps: int = 50_000_000
    eval_period: int = 10_000
    eval_episodes: int = 10
    solved_return: float = math.inf
    log_period_s: float = 10.0
    checkpoint_period_s: float = 600.0
    checkpoint_replay: bool = True
    run_dir: str = "runs/apex"
    resume: bool = False

    def __post_init__(self):
        positive = ("num_actors", "envs_per_actor", "actor_batch_size", "n_step",
                    "local_buffer_size", "actor_update_period", "replay_capacity", "batch_size",
                    "target_update_period", "publish_period", "total_env_steps", "eval_period",
                    "eval_episodes", "max_episode_frames")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        non_negative = ("noop_max", "max_episode_steps", "min_replay_size", "learning_rate",
                        "optimizer_epsilon", "max_grad_norm", "samples_per_insert",
                        "huber_delta", "log_period_s", "checkpoint_period_s")
        for name in non_negative:
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        unit_interval = ("discount", "priority_exponent", "importance_exponent", "rms_decay",
                         "repeat_action_probability", "epsilon_base")
        for name in unit_interval:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.actor_batch_size >= self.envs_per_actor:
            raise ValueError(
                f"actor_batch_size ({self.actor_batch_size}) must be < envs_per_actor "
                f"({self.envs_per_actor}) so envpool steps other envs while an actor acts")
        if self.min_replay_size > self.replay_capacity:
            raise ValueError(f"min_replay_size ({self.min_replay_size}) exceeds replay_capacity "
                             f"({self.replay_capacity})")
        for name, value, allowed in (("optimizer", self.optimizer, OPTIMIZERS),
                                     ("loss", self.loss, LOSSES), ("torso", self.torso, TORSOS),
                                     ("norm", self.norm, NORMS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        for name in ("mlp_hidden_sizes", "head_hidden_sizes"):
            if any(h < 1 for h in getattr(self, name)):
                raise ValueError(f"{name} must hold positive widths, got {getattr(self, name)}")

    @property
    def num_envs(self) -> int:
        """All environments of all actors (N of the exploration schedule)."""
        return self.num_actors * self.envs_per_actor
