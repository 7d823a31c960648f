"""IMPALA settings: the one source of defaults (the paper's Atari settings).

Espeholt et al. 2018 (arXiv:1802.01561), Table G.1 and Sec. 5; experiments/configs/*.cfg
override these for CartPole and for a GPU host. The environment, budget and run settings are
`agents.run_config.RunConfig`'s.
"""

import dataclasses

from agents.run_config import RunConfig, check_fields
from networks import NORMS, TORSOS

REDUCTIONS = ("sum", "mean")


@dataclasses.dataclass(frozen=True)
class ImpalaConfig(RunConfig):
    """Every setting of an IMPALA run; each is also a command-line flag of the same name.

    Attributes:
      reward_clip: Atari: clip training rewards to [-1, 1] (the paper).
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
      rms_initial_scale: RMSProp's starting mean square of the gradients: 1.0 as in the
        TensorFlow RMSProp the paper used; 0 (optax's default) makes the first ~100 steps up to
        1/sqrt(optimizer_epsilon) times larger.
      optimizer_epsilon: RMSProp epsilon, added inside the square root as in TensorFlow's
        RMSProp that the paper used (or Adam's epsilon).
      max_grad_norm: global gradient norm clip.
      publish_period: learner updates between parameter publishes to the actors.
      torso: mlp (vectors), impala_shallow or impala_resnet (frames), nature.
      mlp_hidden_sizes: widths of the mlp torso.
      norm: conv torso normalization: none, group or layer.
      num_groups: GroupNorm groups when norm=group (must divide every conv width).
      num_processes: processes (hosts) that train one learner together with jax.distributed;
        each runs its own actors and feeds batch_size / num_processes unrolls per update.
      process_id: this process's index, 0 .. num_processes - 1; process 0 evaluates, logs and
        checkpoints.
      coordinator_address: host:port of process 0's coordinator (needed when num_processes > 1).
    """

    num_actors: int = 4
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
    rms_initial_scale: float = 1.0
    optimizer_epsilon: float = 0.01
    max_grad_norm: float = 40.0
    publish_period: int = 1
    torso: str = "impala_resnet"
    mlp_hidden_sizes: tuple[int, ...] = (64, 64)
    norm: str = "none"
    num_groups: int = 8
    total_env_steps: int = 200_000_000
    eval_period: int = 1_000
    run_dir: str = "runs/impala"
    num_processes: int = 1
    process_id: int = 0
    coordinator_address: str = ""

    RESUME_MAY_CHANGE = RunConfig.RESUME_MAY_CHANGE | {
        "unroll_length", "batch_size", "queue_size", "discount", "baseline_cost",
        "entropy_cost", "reduction", "rho_bar", "c_bar", "pg_rho_bar", "lambda_",
        "learning_rate", "rms_decay", "rms_initial_scale", "optimizer_epsilon", "max_grad_norm",
        "publish_period", "num_processes", "process_id", "coordinator_address"}

    def __post_init__(self):
        super().__post_init__()
        check_fields(
            self,
            positive=("unroll_length", "batch_size", "queue_size", "publish_period",
                      "num_processes"),
            non_negative=("baseline_cost", "entropy_cost", "rho_bar", "c_bar", "pg_rho_bar",
                          "learning_rate", "optimizer_epsilon", "max_grad_norm",
                          "rms_initial_scale"),
            unit_interval=("discount", "lambda_", "rms_decay"),
            choices=(("optimizer", ("rmsprop", "adam")), ("reduction", REDUCTIONS),
                     ("torso", TORSOS), ("norm", NORMS)))
        if not 0 <= self.process_id < max(self.num_processes, 1):
            raise ValueError(f"process_id must be in [0, num_processes={self.num_processes}), "
                             f"got {self.process_id}")
        if self.num_processes > 1:
            if not self.coordinator_address:
                raise ValueError("coordinator_address (host:port of process 0) is required "
                                 f"when num_processes={self.num_processes}")
            if self.zero_stage != 0:
                raise ValueError("zero_stage must be 0 when num_processes > 1 (partitioned "
                                 "optimizer state across processes is not supported)")
            if self.batch_size % self.num_processes:
                raise ValueError(f"batch_size={self.batch_size} must split evenly over "
                                 f"num_processes={self.num_processes}")
        if self.c_bar > self.rho_bar:
            raise ValueError(f"c_bar ({self.c_bar}) must be <= rho_bar ({self.rho_bar})")
        if any(h < 1 for h in self.mlp_hidden_sizes):
            raise ValueError(f"mlp_hidden_sizes must hold positive widths, "
                             f"got {self.mlp_hidden_sizes}")
        self.check_network()

    @property
    def actors_in_run(self) -> int:
        """Actors of all processes: each runs num_actors."""
        return self.num_actors * self.num_processes

    @property
    def total_updates(self) -> int:
        """Learner updates in the run (for the learning-rate schedule): T x B steps each."""
        return max(1, self.total_env_steps // (self.unroll_length * self.batch_size))
