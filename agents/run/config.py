"""Settings every agent shares: its actors' environments, budget, evaluation and run folder.

`ApexConfig` and `ImpalaConfig` extend `RunConfig` with the groups of `config_groups` they
use and their algorithm's settings, and may redeclare a field to change its default.
"""

import dataclasses
import math
from typing import ClassVar

from agents.run.envs import actor_env_settings, env_info, is_atari

CHECKPOINT_FAILURES = ("retry", "stop")


def check_fields(config, *, positive=(), non_negative=(), unit_interval=(), choices=(),
                 finite=()) -> None:
    """Raises a ValueError naming the first field out of its allowed range. A field named in
    `finite` must also be a finite number (where inf or NaN makes no sense: a step size, a loss
    weight, a period), checked first."""
    for name in finite:
        value = getattr(config, name)
        if not math.isfinite(value):
            bound = (" >= 0" if name in non_negative else " > 0" if name in positive else "")
            raise ValueError(f"{name} must be a finite number{bound}, got {value}")
    for name in positive:
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)}")
    for name in non_negative:
        if not getattr(config, name) >= 0:  # `not >=` also rejects NaN
            raise ValueError(f"{name} must be >= 0, got {getattr(config, name)}")
    for name in unit_interval:
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(config, name)}")
    for name, allowed in choices:
        if getattr(config, name) not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {getattr(config, name)!r}")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Settings shared by every agent; each is also a command-line flag of the same name.

    Attributes:
      env: envpool task id, e.g. Pong-v5 (Atari) or CartPole-v1.
      num_actors: actor threads, each with its own envpool.
      envs_per_actor: environments in each actor's envpool.
      actor_batch_size: environments an actor acts for per step (envpool async batch_size);
        must be below envs_per_actor so envpool steps the others meanwhile.
      episodic_life: Atari: a lost life ends the training episode (not the game), as in
        Mnih et al. 2015 and IMPALA (Table G.1, "End of episode when life lost: Yes").
      fire_reset: Atari: press FIRE after every reset (and after every lost life with
        episodic_life) in games whose action set has it: OpenAI Baselines' FireResetEnv,
        envpool's default. False, as in the papers: DeepMind's agents do not press it.
      reward_clip: Atari: clip training rewards to [-1, 1].
      noop_max: Atari: up to this many no-op actions at the start of an episode.
      repeat_action_probability: Atari: sticky actions (0 in the papers).
      max_episode_frames: Atari: episode cap in emulator frames (108K = 30 minutes).
      max_episode_steps: classic control: episode cap in steps; 0 keeps the env's own.
      seed: seed of everything random.
      total_env_steps: stop after this many agent steps over all envs (on Atari each agent
        step is 4 emulator frames, the unit the papers count in).
      eval_period: learner updates between greedy evaluations.
      eval_episodes: episodes per evaluation (one per env of a separate envpool).
      solved_return: stop once an evaluation's mean return reaches this (inf: never).
      solved_confirm_episodes: with n > 0, an evaluation that reaches solved_return is
        confirmed before the run stops: n more whole games with the same parameters and action
        rule (30: the papers' protocol), logged as an evaluation of their own; the run stops
        only if their mean reaches solved_return too. 0: the evaluation alone stops it.
        The confirming games are the protocol's first evaluation of those parameters, which
        a solved run saves in `run_dir/solved/step_N` (`experiments/evaluate.py` replays them).
      eval_from_return: skip the in-run evaluations that fall due while the mean return of the
        last 100 training episodes (the progress line's, per life where a lost life ends a
        training episode) is below this; -inf: evaluate from the first period. Saves the
        evaluations' share of the cores while a run is far from its target.
      log_period_s: seconds between progress lines and metric rows.
      checkpoint_period_s: seconds between checkpoints.
      checkpoint_failure: what a failed periodic checkpoint (a full disk, say) does: retry
        (train on and save again after checkpoint_period_s) or stop (end the run); either way
        the previous checkpoint stays intact and the failure is printed.
      run_dir: folder for metrics, checkpoints, the saved config and the learning curve.
      resume: continue from the latest checkpoint in run_dir.
      learner_devices: indices into the local devices that split the learner's batch (empty:
        all local devices).
      actor_devices: indices into the local devices the actors' policies run on, assigned to
        actors in turn (empty: the first local device). Parameters are copied to them once per
        publish.
      zero_stage: 0 (plain data parallelism), 1 (optimizer state partitioned over the learner
        devices) or 2 (gradients partitioned too); Rajbhandari et al. 2019.
      connect_timeout_s: seconds to wait for a peer or a service at the start (a Ray cluster at
        ray_address, the other jax.distributed processes) before the run stops with an error.
    """

    env: str = "Pong-v5"
    num_actors: int = 8
    envs_per_actor: int = 32
    actor_batch_size: int = 16
    episodic_life: bool = True
    fire_reset: bool = False
    reward_clip: bool = True
    noop_max: int = 30
    repeat_action_probability: float = 0.0
    max_episode_frames: int = 108_000
    max_episode_steps: int = 0
    seed: int = 0
    total_env_steps: int = 50_000_000
    eval_period: int = 10_000
    eval_episodes: int = 10
    solved_return: float = math.inf
    solved_confirm_episodes: int = 0
    eval_from_return: float = -math.inf
    log_period_s: float = 10.0
    checkpoint_period_s: float = 600.0
    checkpoint_failure: str = "retry"
    run_dir: str = "runs/run"
    resume: bool = False
    learner_devices: tuple[int, ...] = ()
    actor_devices: tuple[int, ...] = ()
    zero_stage: int = 0
    connect_timeout_s: float = 60.0

    # Fields a resumed run may change (`agents.run.run_folder`): budgets, periods, logging,
    # placement and step sizes. Any other field shapes the parameters, the optimizer state or
    # the replay, or defines the task, and must keep the value the checkpoint was made with.
    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = frozenset({
        "num_actors", "envs_per_actor", "actor_batch_size", "noop_max",
        "repeat_action_probability", "max_episode_frames", "max_episode_steps", "seed",
        "total_env_steps", "eval_period", "eval_episodes", "solved_return",
        "solved_confirm_episodes", "eval_from_return", "log_period_s",
        "checkpoint_period_s", "checkpoint_failure", "run_dir", "resume", "learner_devices",
        "actor_devices", "zero_stage", "connect_timeout_s"})

    def __post_init__(self):
        check_fields(
            self,
            positive=("num_actors", "envs_per_actor", "actor_batch_size", "total_env_steps",
                      "eval_period", "eval_episodes", "max_episode_frames"),
            non_negative=("noop_max", "max_episode_steps", "checkpoint_period_s",
                          "solved_confirm_episodes"),
            unit_interval=("repeat_action_probability",),
            choices=(("zero_stage", (0, 1, 2)), ("checkpoint_failure", CHECKPOINT_FAILURES)),
            finite=("log_period_s",))
        if not self.log_period_s > 0:  # the main loop waits this long between looks
            raise ValueError(f"log_period_s must be > 0 (seconds between progress lines), got "
                             f"{self.log_period_s}")
        if math.isnan(self.eval_from_return):
            raise ValueError("eval_from_return must be a number or -inf, got nan")
        if not self.connect_timeout_s > 0:  # `not >` also rejects NaN
            raise ValueError(f"connect_timeout_s must be > 0, got {self.connect_timeout_s}")
        for name in ("learner_devices", "actor_devices"):
            indices = getattr(self, name)
            if any(i < 0 for i in indices) or len(set(indices)) != len(indices):
                raise ValueError(f"{name} must be distinct indices >= 0 into the local devices, "
                                 f"got {indices}")
        if self.actor_batch_size >= self.envs_per_actor:
            raise ValueError(
                f"actor_batch_size ({self.actor_batch_size}) must be < envs_per_actor "
                f"({self.envs_per_actor}) so envpool steps other envs while an actor acts")

    def check_host(self) -> None:
        """Raises a ValueError naming the flag for what depends on this host, not on the values
        alone: the env id must be one envpool has, the network's torso must read its
        observations, the device indices must exist."""
        settings = actor_env_settings(self, 0)
        if hasattr(self, "check_torso_fits"):  # an agent's config (`NetworkConfig`)
            self.check_torso_fits(env_info(settings))
        self.devices()

    def devices(self) -> tuple[list, list]:
        """(learner devices, actor devices) from the local devices; ValueError if out of range."""
        import jax  # here: configs stay importable and checkable without starting a backend

        local = jax.local_devices()
        for name in ("learner_devices", "actor_devices"):
            bad = [i for i in getattr(self, name) if i >= len(local)]
            if bad:
                raise ValueError(f"{name} {bad} out of range: this host has {len(local)} local "
                                 f"devices (indices 0..{len(local) - 1})")
        learner = [local[i] for i in self.learner_devices] or list(local)
        actor = [local[i] for i in self.actor_devices] or [local[0]]
        return learner, actor

    def former_values(self) -> dict:
        """The values that fields added later had in effect in runs saved before they existed,
        so that a resumed or reused run is compared with what it was trained with: envpool
        pressed FIRE in Atari games by default."""
        return {"fire_reset": True} if is_atari(self.env) else {}

    @property
    def actors_in_run(self) -> int:
        """Actors of the whole run (an agent spanning several processes counts them all)."""
        return self.num_actors

    @property
    def eval_rule(self) -> tuple[str, float]:
        """(action rule, epsilon) of this agent's evaluation (`agents.run.evaluation`)."""
        raise NotImplementedError

    @property
    def num_envs(self) -> int:
        """All environments of all actors."""
        return self.num_actors * self.envs_per_actor
