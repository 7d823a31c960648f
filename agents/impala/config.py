"""IMPALA settings: the one source of defaults (the paper's Atari settings).

Espeholt et al. 2018 (arXiv:1802.01561), Table G.1 and Sec. 5; experiments/configs/*.cfg
override these for CartPole and for a GPU host. The environment, budget and run settings are
`agents.run.config.RunConfig`'s; the network, optimizer and multi-process groups are in
`agents.run.config_groups`.
"""

import dataclasses

from agents.impala.losses import CORRECTIONS, EPSILON_CORRECTION, REDUCTIONS
from agents.impala.unroll_replay import replayed_per_batch
from agents.run.config import RunConfig, check_fields
from agents.run.config_groups import MultiProcessConfig, NetworkConfig, OptimizerConfig

EVAL_ACTIONS = ("sample", "greedy")  # action rules of eval_action (`select_actions`)


@dataclasses.dataclass(frozen=True)
class ImpalaConfig(RunConfig, NetworkConfig, OptimizerConfig, MultiProcessConfig):
    """Every setting of an IMPALA run; each is also a command-line flag of the same name.

    Attributes:
      reward_clip: Atari: clip training rewards to [-1, 1] (the paper).
      unroll_length: T, steps per unroll.
      batch_size: unrolls per learner update, split over the learner devices.
      queue_size: unrolls the actor-to-learner queue holds before actors wait.
      replay_proportion: share of each batch replayed from a memory of recent unrolls, in
        [0, 1) (0: no replay; the paper's experiments "with replay", Sec. 5.2.2, mix fresh and
        replayed unrolls; `agents.impala.unroll_replay`).
      replay_unrolls: unrolls the replay memory holds (used when replay_proportion > 0).
      discount: gamma.
      baseline_cost: weight of the value loss.
      entropy_cost: weight of the entropy bonus.
      reduction: sum (the paper's implementation) or mean over time and batch.
      rho_bar: V-trace clip of the importance weights in the targets.
      c_bar: V-trace clip of the trace coefficients (<= rho_bar).
      pg_rho_bar: clip of the importance weights in the policy gradient.
      lambda_: V-trace lambda.
      correction: how the loss treats the policy lag (Sec. 5.2.2 of the paper): vtrace, none,
        epsilon or is_1step (`agents.impala.losses`).
      epsilon_correction: correction=epsilon: the epsilon in log(pi(a|x) + epsilon) (the
        paper's 1e-6); a step whose action the learner gives probability <= epsilon loses half
        or more of its policy gradient.
      optimizer: rmsprop (the paper) or adam.
      learning_rate: initial step size, annealed linearly to 0 over total_env_steps (agent
        steps; on Atari each is 4 frames, so the paper's 200M frames are 50M steps).
      publish_period: learner updates between parameter publishes to the actors.
      actor_refresh_period: an actor keeps its parameters until the published ones are this
        many versions newer (1: the latest at every step). Evaluation always uses the latest,
        so this lags the behaviour policy alone (the policy-lag knob of the off-policy study,
        Sec. 5.2.2 of the paper).
      eval_action: how evaluation acts: greedy (the policy's most likely action) or sample
        (from the policy, as the paper's implementation evaluates; the reproduction harness's
        protocol, agents.run.evaluation).
      torso: mlp (vectors), impala_shallow or impala_resnet (frames), nature.
      reward_scale: the learner trains on the rewards times this (the returns reported stay
        the environment's): for tasks whose rewards are far from 1 in size, such as
        LunarLander's +-100 landings and crashes, where the baseline loss would otherwise
        swamp the policy and entropy terms. 1: the rewards as they are (Atari clips them).
    """

    num_actors: int = 4
    unroll_length: int = 20
    batch_size: int = 32
    queue_size: int = 64
    replay_proportion: float = 0.0
    replay_unrolls: int = 10_000
    discount: float = 0.99
    reward_scale: float = 1.0
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    reduction: str = "sum"
    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0
    lambda_: float = 1.0
    correction: str = "vtrace"
    epsilon_correction: float = EPSILON_CORRECTION
    publish_period: int = 1
    actor_refresh_period: int = 1  # parameter versions
    eval_action: str = "greedy"
    torso: str = "impala_resnet"
    mlp_hidden_sizes: tuple[int, ...] = (64, 64)
    total_env_steps: int = 50_000_000  # agent steps: the paper's 200M frames at frame skip 4
    eval_period: int = 1_000
    run_dir: str = "runs/impala"

    RESUME_MAY_CHANGE = (RunConfig.RESUME_MAY_CHANGE | OptimizerConfig.RESUME_MAY_CHANGE
                         | MultiProcessConfig.RESUME_MAY_CHANGE | {
                             "unroll_length", "batch_size", "queue_size", "replay_proportion",
                             "replay_unrolls", "discount", "reward_scale",
                             "baseline_cost", "entropy_cost", "reduction", "rho_bar", "c_bar",
                             "pg_rho_bar", "lambda_", "correction", "epsilon_correction",
                             "publish_period",
                             "actor_refresh_period", "eval_action"})

    def __post_init__(self):
        super().__post_init__()
        check_fields(
            self,
            positive=("unroll_length", "batch_size", "queue_size", "replay_unrolls",
                      "publish_period", "actor_refresh_period"),
            non_negative=("baseline_cost", "entropy_cost", "rho_bar", "c_bar", "pg_rho_bar"),
            unit_interval=("discount", "lambda_"), choices=(("reduction", REDUCTIONS),
                                                        ("correction", CORRECTIONS),
                                                        ("eval_action", EVAL_ACTIONS)),
            finite=("baseline_cost", "entropy_cost", "replay_proportion", "reward_scale"))
        if not self.reward_scale > 0:
            raise ValueError(f"reward_scale must be > 0, got {self.reward_scale}")
        if not 0.0 <= self.replay_proportion < 1.0:
            raise ValueError(f"replay_proportion must be in [0, 1), got {self.replay_proportion}")
        self.check_optimizer()
        self.check_processes(self.batch_size, self.zero_stage)
        if not self.epsilon_correction > 0:
            raise ValueError(f"epsilon_correction must be > 0, got {self.epsilon_correction}")
        if self.c_bar > self.rho_bar:
            raise ValueError(f"c_bar ({self.c_bar}) must be <= rho_bar ({self.rho_bar})")
        self.check_network()

    @property
    def eval_rule(self) -> tuple[str, float]:
        return self.eval_action, 0.0

    @property
    def actors_in_run(self) -> int:
        """Actors of all processes: each runs num_actors."""
        return self.num_actors * self.num_processes

    @property
    def fresh_unrolls_per_update(self) -> int:
        """Unrolls from the actors in each update's batch of B: all B, less those replayed
        (`replayed_per_batch` of each process's B / num_processes)."""
        local = self.batch_size // self.num_processes
        return self.num_processes * (local - replayed_per_batch(local, self.replay_proportion))

    @property
    def total_updates(self) -> int:
        """Learner updates in the run (for the learning-rate schedule): T x fresh unrolls of
        agent steps each, so that the rate reaches 0 at total_env_steps with replay as without
        (a batch half replayed brings half the agent steps)."""
        return max(1, self.total_env_steps
                   // (self.unroll_length * self.fresh_unrolls_per_update))
