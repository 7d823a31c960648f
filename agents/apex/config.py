"""Ape-X DQN settings: the one source of defaults (the paper's Atari settings).

Horgan et al. 2018 (arXiv:1803.00933), Sec. 4 and Appendix C; experiments/configs/*.cfg override
these for CartPole and for a GPU host. The environment, budget and run settings are
`agents.run.config.RunConfig`'s; the network, optimizer and Ray groups are in
`agents.run.config_groups`.
"""

import dataclasses

from agents.run.config import RunConfig, check_fields
from agents.run.config_groups import NetworkConfig, OptimizerConfig, RayConfig

# The losses of agents.apex.losses, named here so that configs import without JAX.
LOSSES = ("squared", "huber")


# The epsilon of Ape-X's evaluation. The paper (Horgan et al. 2018) names no evaluation epsilon
# in the parts of its text that could be checked here; its agent is a prioritized dueling double
# DQN, and that line of work evaluated Double DQN based agents with 0.001 (van Hasselt et al.
# 2016, tuned Double DQN: "used epsilon = 0.001 during evaluation"; Schaul et al. 2016, Table 5,
# human starts). Mnih et al. 2015 used 0.05.
PAPER_EVAL_EPSILON = 0.001


@dataclasses.dataclass(frozen=True)
class ApexConfig(RunConfig, NetworkConfig, OptimizerConfig, RayConfig):
    """Every setting of an Ape-X run; each is also a command-line flag of the same name.

    Attributes:
      num_actors: actor threads, each with its own envpool (the paper: 360 single-env actors;
        the exploration schedule spans all num_actors * envs_per_actor envs).
      epsilon_base: exploration of env i of N is epsilon_base^(1 + epsilon_alpha * i / (N-1)).
      epsilon_alpha: see epsilon_base.
      n_step: steps in the bootstrapped return.
      discount: gamma.
      local_buffer_size: transitions an actor collects before one batched add to the replay.
      actor_update_period: agent steps per env between an actor's parameter pulls (the paper:
        400 frames = 100 steps).
      replay_capacity: transitions held by the prioritized replay (FIFO; split evenly over
        replay_shards).
      priority_exponent: alpha of prioritized replay.
      importance_exponent: beta of the importance weights.
      min_replay_size: transitions in the replay before learning starts.
      samples_per_insert: if > 0, actors and learner wait to keep sampled / inserted
        transitions near this ratio, so learning does not depend on machine speed (the paper
        runs both free: 0).
      batch_size: transitions per learner update, split over the learner devices.
      optimizer: rmsprop_centered (the paper) or adam.
      learning_rate: step size (the paper: 0.00025 / 4).
      target_update_period: learner updates between target network copies.
      loss: squared (the paper's 1/2 td^2) or huber.
      huber_delta: Huber loss threshold.
      publish_period: learner updates between parameter publishes to the actors.
      dueling: dueling Q head (the paper) instead of a linear one.
      head_hidden_sizes: hidden widths of each dueling stream (the paper: 512 after the convs).
      eval_epsilon: evaluation acts epsilon-greedily with this rate (`PAPER_EVAL_EPSILON`,
        0.001, by default; 0 is greedy; agents.run.evaluation).
      checkpoint_replay: include the replay's contents in checkpoints (a full Atari replay is
        gigabytes; without it a resumed run refills the replay before learning).
    """

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
    target_update_period: int = 2500
    loss: str = "squared"
    huber_delta: float = 1.0
    publish_period: int = 1
    dueling: bool = True
    head_hidden_sizes: tuple[int, ...] = (512,)
    eval_epsilon: float = PAPER_EVAL_EPSILON
    checkpoint_replay: bool = True
    run_dir: str = "runs/apex"

    OPTIMIZERS = ("rmsprop_centered", "adam")
    RESUME_MAY_CHANGE = (RunConfig.RESUME_MAY_CHANGE | OptimizerConfig.RESUME_MAY_CHANGE
                         | RayConfig.RESUME_MAY_CHANGE | {
                             "epsilon_base", "epsilon_alpha", "local_buffer_size",
                             "actor_update_period", "importance_exponent", "min_replay_size",
                             "samples_per_insert", "batch_size", "target_update_period", "loss",
                             "huber_delta", "publish_period", "checkpoint_replay",
                             "eval_epsilon"})

    def __post_init__(self):
        super().__post_init__()
        check_fields(
            self,
            positive=("n_step", "local_buffer_size", "actor_update_period", "replay_capacity",
                      "batch_size", "target_update_period", "publish_period"),
            non_negative=("min_replay_size", "samples_per_insert", "huber_delta"),
            unit_interval=("discount", "priority_exponent", "importance_exponent",
                           "epsilon_base", "eval_epsilon"),
            choices=(("loss", LOSSES),), finite=("epsilon_alpha", "samples_per_insert"))
        self.check_optimizer()
        self.check_ray(self.num_actors)
        if self.min_replay_size > self.replay_capacity:
            raise ValueError(f"min_replay_size ({self.min_replay_size}) exceeds replay_capacity "
                             f"({self.replay_capacity})")
        self._check_capacity()
        if any(h < 1 for h in self.head_hidden_sizes):
            raise ValueError(f"head_hidden_sizes must hold positive widths, "
                             f"got {self.head_hidden_sizes}")
        self.check_network()

    @property
    def eval_rule(self) -> tuple[str, float]:
        return "epsilon_greedy", self.eval_epsilon

    def _check_capacity(self) -> None:
        """Each shard must hold an actor's largest add (a local buffer that reached its size,
        plus one recv batch whose episode ends each emit up to n transitions); the replay must
        hold a batch."""
        per_shard = -(-self.replay_capacity // self.replay_shards)
        largest_add = self.local_buffer_size - 1 + self.actor_batch_size * self.n_step
        where = (f"replay_capacity={self.replay_capacity}" if self.replay_shards == 1 else
                 f"replay_capacity={self.replay_capacity} over replay_shards="
                 f"{self.replay_shards} ({per_shard} a shard)")
        if per_shard < largest_add:
            raise ValueError(
                f"{where} is below an actor's largest add, local_buffer_size - 1 + "
                f"actor_batch_size * n_step = {largest_add}; raise replay_capacity or lower "
                "local_buffer_size")
        if self.replay_capacity < self.batch_size:  # a batch is drawn over all shards
            raise ValueError(f"replay_capacity={self.replay_capacity} is below batch_size="
                             f"{self.batch_size}: every batch would repeat transitions; raise "
                             "replay_capacity")
