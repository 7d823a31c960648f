"""IMPALA settings: the one source of defaults (the paper's Atari settings).

Espeholt et al. 2018 (arXiv:1802.01561), Table G.1 and Sec. 5; experiments/configs/*.cfg
override these for CartPole and for a GPU host.
"""

import dataclasses
import math

from networks import NORMS, TORSOS

REDUCTIONS = ("sum", "mean")


@dataclasses.dataclass(frozen=True)
class ImpalaConfig:
    """Every setting of an IMPALA run; each is also a command-line flag of the same name.

    Attributes:
      env: envpool task id, e.g. Pong-v5 (Atari) or CartPole-v1.
      num_actors: actor threads, each with its own envpool.
      envs_per_actor: environments in each actor's envpool.
      actor_batch_size: environments an actor acts for per step (envpool async batch_size);
        must be below envs_per_actor.
      episodic_life: Atari: a lost life ends the training episode.
      reward_clip: Atari: clip training rewards to [-1, 1] (the paper).
      noop_max: Atari: up to this many no-op actions at the start of an episode.
      repeat_action_probability: Atari: sticky actions (0 in the paper).
      max_episode_frames: Atari: episode cap in emulator frames.
      max_episode_steps: classic control: episode cap in steps; 0 keeps the env's own.
      unroll_length: T, steps per unroll.
      batch_size: unrolls per learner update, split over the learner devices.
      queue_size: unrolls the actor-to-learner queue holds before actors wait.
      discount: gamma.
      baseline_cost: weight of the value loss.
      entropy_cost: weight of the entropy bonus.
      reduction: sum (the paper's implementation) or mean over time and batch.
      rho_bar: V-trace clip of the importance weights in the targets.
      c_bar: V-trace clip of the trace coefficients (<= rho_bar).
      pg_rho_bar: clip of the importance weights in the policy gradient.
      lambda_: V-trace lambda.
      optimizer: rmsprop (the paper) or adam.
      learning_rate: initial step size, annealed linearly to 0 over total_env_steps.
      rms_decay: RMSProp decay.
      optimizer_epsilon: RMSProp epsilon, added inside the square root as in TensorFlow's
        RMSProp that the paper used (or Adam's epsilon).
      max_grad_norm: global gradient norm clip.
      publish_period: learner updates between parameter publishes to the actors.
      torso: mlp (vectors), impala_shallow or impala_resnet (frames), nature.
      mlp_hidden_sizes: widths of the mlp torso.
      norm: conv torso normalization: none, group or layer.
      num_groups: GroupNorm groups when norm=group (must divide every conv width).
      seed: seed of everything random.
      total_env_steps: stop after this many agent steps over all envs.
      eval_period: learner updates between greedy evaluations.
      eval_episodes: episodes per evaluation (one per env of a separate envpool).
      solved_return: stop once an evaluation's mean return reaches this (inf: never).
      log_period_s: seconds between progress lines and metric rows.
      checkpoint_period_s: seconds between checkpoints (learner, optimizer, counters).
      run_dir: folder for metrics, checkpoints, the saved config and the learning curve.
      resume: continue from the latest checkpoint in run_dir.
    """

    env: str = "Pong-v5"
    num_actors: int = 4
    envs_per_actor: int = 32
    actor_batch_size: int = 16
    episodic_life: bool = True
    reward_clip: bool = True
    noop_max: int = 30
    repeat_action_probability: float = 0.0
    max_episode_frames: int = 108_000
    max_episode_steps: int = 0
    unroll_length: int = 20
    batch_size: int = 32
    queue_size: int = 64
    discount: float = 0.99
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    reduction: str = "sum"
    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0
    lambda_: float = 1.0
    optimizer: str = "rmsprop"
    learning_rate: float = 0.0006
    rms_decay: float = 0.99
    optimizer_epsilon: float = 0.01
    max_grad_norm: float = 40.0
    publish_period: int = 1
    torso: str = "impala_resnet"
    mlp_hidden_sizes: tuple[int, ...] = (64, 64)
    norm: str = "none"
    num_groups: int = 8
    seed: int = 0
    total_env_steps: int = 200_000_000
    eval_period: int = 1_000
    eval_episodes: int = 10
    solved_return: float = math.inf
    log_period_s: float = 10.0
    checkpoint_period_s: float = 600.0
    run_dir: str = "runs/impala"
    resume: bool = False

    def __post_init__(self):
        positive = ("num_actors", "envs_per_actor", "actor_batch_size", "unroll_length",
                    "batch_size", "queue_size", "publish_period", "total_env_steps",
                    "eval_period", "eval_episodes", "max_episode_frames")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        non_negative = ("noop_max", "max_episode_steps", "baseline_cost", "entropy_cost",
                        "rho_bar", "c_bar", "pg_rho_bar", "learning_rate", "optimizer_epsilon",
                        "max_grad_norm", "log_period_s", "checkpoint_period_s")
        for name in non_negative:
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("discount", "lambda_", "rms_decay", "repeat_action_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.c_bar > self.rho_bar:
            raise ValueError(f"c_bar ({self.c_bar}) must be <= rho_bar ({self.rho_bar})")
        if self.actor_batch_size >= self.envs_per_actor:
            raise ValueError(
                f"actor_batch_size ({self.actor_batch_size}) must be < envs_per_actor "
                f"({self.envs_per_actor}) so envpool steps other envs while an actor acts")
        for name, value, allowed in (("optimizer", self.optimizer, ("rmsprop", "adam")),
                                     ("reduction", self.reduction, REDUCTIONS),
                                     ("torso", self.torso, TORSOS), ("norm", self.norm, NORMS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if any(h < 1 for h in self.mlp_hidden_sizes):
            raise ValueError(f"mlp_hidden_sizes must hold positive widths, "
                             f"got {self.mlp_hidden_sizes}")

    @property
    def total_updates(self) -> int:
        """Learner updates in the run (for the learning-rate schedule): T x B steps each."""
        return max(1, self.total_env_steps // (self.unroll_length * self.batch_size))
