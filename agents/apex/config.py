"""Ape-X DQN settings: the one source of defaults (the paper's Atari settings).

Horgan et al. 2018 (arXiv:1803.00933), Sec. 4 and Appendix C; experiments/configs/*.cfg override
these for CartPole and for a GPU host. The environment, budget and run settings are
`agents.run_config.RunConfig`'s.
"""

import dataclasses

from agents.apex.losses import LOSSES
from agents.run_config import RunConfig, check_fields
from networks import NORMS, TORSOS

OPTIMIZERS = ("rmsprop_centered", "adam")
BACKENDS = ("threads", "ray")


@dataclasses.dataclass(frozen=True)
class ApexConfig(RunConfig):
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
      rms_decay: RMSProp decay.
      rms_initial_scale: RMSProp's starting mean square of the gradients: 1.0 as in the
        TensorFlow RMSProp of the paper's DQN family; 0 (optax's default) makes the first
        steps up to 1/sqrt(optimizer_epsilon) times larger.
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
      checkpoint_replay: include the replay's contents in checkpoints (a full Atari replay is
        gigabytes; without it a resumed run refills the replay before learning).
      backend: threads (everything in this process) or ray (actor workers and replay shards
        are Ray actors, on any node of the cluster, the workers acting on their node's CPU;
        the learner and evaluator stay in this process, on learner_devices and actor_devices).
      ray_address: ray backend: local (start a loopback-only cluster on this host, stopped
        at the end) or the address of a running cluster (host:port, or auto).
      replay_shards: ray backend: replay shards; each actor adds to one of them and the
        learner samples all of them in proportion to their total priority.
      ray_cpus_per_actor: ray backend: CPUs Ray reserves for each actor worker (with the
        node's CPU count this sets how many actors a node runs).
      ray_object_store_mb: ray backend with ray_address=local: object store size in MiB (0:
        Ray's default, 30% of memory).
      ray_temp_dir: ray backend with ray_address=local: Ray's session folder (empty: Ray's
        default, /tmp/ray).
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
    rms_initial_scale: float = 1.0
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
    checkpoint_replay: bool = True
    run_dir: str = "runs/apex"
    backend: str = "threads"
    ray_address: str = "local"
    replay_shards: int = 1
    ray_cpus_per_actor: float = 1.0
    ray_object_store_mb: int = 0
    ray_temp_dir: str = ""

    RESUME_MAY_CHANGE = RunConfig.RESUME_MAY_CHANGE | {
        "epsilon_base", "epsilon_alpha", "local_buffer_size", "actor_update_period",
        "importance_exponent", "min_replay_size", "samples_per_insert", "batch_size",
        "learning_rate", "rms_decay", "rms_initial_scale", "optimizer_epsilon", "max_grad_norm",
        "target_update_period", "loss", "huber_delta", "publish_period", "checkpoint_replay",
        "backend", "ray_address", "ray_cpus_per_actor", "ray_object_store_mb", "ray_temp_dir"}

    def __post_init__(self):
        super().__post_init__()
        check_fields(
            self,
            positive=("n_step", "local_buffer_size", "actor_update_period", "replay_capacity",
                      "batch_size", "target_update_period", "publish_period", "replay_shards"),
            non_negative=("min_replay_size", "learning_rate", "optimizer_epsilon",
                          "max_grad_norm", "samples_per_insert", "huber_delta", "rms_initial_scale",
                          "ray_object_store_mb"),
            unit_interval=("discount", "priority_exponent", "importance_exponent",
                           "rms_decay", "epsilon_base"),
            choices=(("optimizer", OPTIMIZERS), ("loss", LOSSES), ("torso", TORSOS),
                     ("norm", NORMS), ("backend", BACKENDS)))
        if self.backend == "threads" and self.replay_shards != 1:
            raise ValueError(f"replay_shards={self.replay_shards} needs backend=ray; the "
                             "threads backend has one replay")
        if self.replay_shards > self.num_actors:
            raise ValueError(f"replay_shards ({self.replay_shards}) must be <= num_actors "
                             f"({self.num_actors}): every shard needs an actor feeding it")
        if not self.ray_cpus_per_actor > 0:
            raise ValueError(f"ray_cpus_per_actor must be > 0, got {self.ray_cpus_per_actor}")
        if self.min_replay_size > self.replay_capacity:
            raise ValueError(f"min_replay_size ({self.min_replay_size}) exceeds replay_capacity "
                             f"({self.replay_capacity})")
        self._check_capacity()
        for name in ("mlp_hidden_sizes", "head_hidden_sizes"):
            if any(h < 1 for h in getattr(self, name)):
                raise ValueError(f"{name} must hold positive widths, got {getattr(self, name)}")
        self.check_network()

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
