"""Environment settings and factory over envpool (gymnasium API) for Ape-X and IMPALA actors.

Atari defaults follow the DQN preprocessing of Mnih et al. 2015 (Nature) as used by Ape-X
(Horgan et al. 2018, arXiv:1803.00933) and IMPALA (Espeholt et al. 2018, arXiv:1802.01561):
frame skip 4 with a max over the last two frames, 84x84 grayscale, a stack of 4 frames, up to
30 no-op starts, rewards clipped to [-1, 1], a life loss ends a training episode, episodes capped
at 108K frames (30 minutes of play), no sticky actions and no FIRE pressed for the agent.
envpool's own defaults differ (`episodic_life=False, reward_clip=False,
use_fire_reset=True`), so every Atari setting is passed explicitly.

Layout. Observations stay in envpool's layout: Atari stacks are uint8 `[stack, H, W]`
(channels-first, `EnvInfo.channels_first`). The replay stores them so, frame by frame
(`replay.frames`, `stack_axis=0`), and networks move the stack axis last inside the jitted
function, where the transpose is cheap on the device, instead of on the host per step.

envpool facts the actors rely on (envpool 1.2.5, verified):
  * `max_episode_steps` counts agent steps (each `frame_skip` frames); the reset's no-ops are not
    counted. `max_episode_frames` is converted with `// frame_skip`.
  * After an episode's final observation (terminated or truncated) the next observation of that
    env is the first of a new episode (reward 0). With `episodic_life=True` a life loss ends the
    episode but the game goes on and `info["elapsed_step"]` is NOT reset to 0, so detect episode
    starts as "the previous observation of this env was final", not by `elapsed_step == 0`.
  * With `reward_clip=True`, Atari's `info["reward"]` still holds the unclipped reward.
  * `use_fire_reset=True` presses FIRE after the reset's no-ops and, with `episodic_life=True`,
    after every lost life; without `episodic_life` only at the game's start (Breakout on
    NOOP alone: a life lost every ~25 steps with both, one life in a whole game with fire reset
    alone, none without it).
  * Env i of a pool is seeded `seed + i`.
  * Async use (`async_reset`, `recv`, `send`) needs `batch_size < num_envs`: with
    `batch_size == num_envs` a second `recv` can return empty arrays (envpool issue 259);
    `batch_size == num_envs` is for the synchronous `reset`/`step` API (evaluation).
"""

import dataclasses
import difflib
from typing import Any, NamedTuple

import numpy as np

from agents.run.seeds import run_seeds

_INT32_LIMIT = 2**31


# envpool is imported where it is used: learner-only code (a GPU host without envpool, with
# `EnvInfo` written out) imports the agents without it.


def is_atari(env_id: str) -> bool:
    """True iff envpool implements `env_id` with its Atari (ALE) backend."""
    from envpool.registration import registry

    # The registry maps each id to (import path, spec class, defaults) without building a spec.
    entry = registry.specs.get(env_id)
    return entry is not None and entry[0] == "envpool.atari"


def _check_int(name: str, value, minimum: int) -> None:
    if (not isinstance(value, (int, np.integer)) or isinstance(value, bool)
            or value < minimum):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class EnvSettings:
    """Everything that defines the envs of one envpool pool.

    The Atari settings are ignored for other envs (envpool rejects them there).

    Attributes:
      env_id: an envpool id, e.g. "Pong-v5" or "CartPole-v1" (`envpool.list_all_envs()`).
      num_envs: envs in the pool.
      batch_size: envs returned per `recv`, 1 <= batch_size <= num_envs. Async actors need
        batch_size < num_envs (envpool issue 259); batch_size == num_envs is for the synchronous
        `reset`/`step` API.
      seed: env i is seeded `seed + i`; `seed + num_envs` must fit in int32.
      num_threads: envpool worker threads; None lets envpool choose (batch_size).
      max_episode_steps: classic control only, agent steps per episode; None keeps the env's
        default (500 for CartPole-v1). Atari episodes are capped by `max_episode_frames`.
      episodic_life: Atari: a life loss ends the episode (for training; Mnih et al. 2015).
      reward_clip: Atari: rewards become their sign, in {-1, 0, 1}.
      noop_max: Atari: envpool takes 1..noop_max no-op actions at reset (random starts).
      repeat_action_probability: Atari: sticky actions; 0 as in the Ape-X paper.
      frame_skip: Atari: frames per agent step (action repeat), max-pooled over the last two.
      stack_num: Atari: frames stacked into one observation.
      max_episode_frames: Atari: emulator frames per episode (108K = 30 min at 60 Hz).
      img_size: Atari: observations are img_size x img_size grayscale.
      fire_reset: Atari: press FIRE after reset (and after a lost life with episodic_life)
        in games whose action set has it (envpool's `use_fire_reset`, OpenAI Baselines'
        FireResetEnv). Off, as in the papers.
      full_action_space: Atari: all 18 actions instead of the game's minimal set (papers: minimal).
    """

    env_id: str
    num_envs: int
    batch_size: int
    seed: int
    num_threads: int | None = None
    max_episode_steps: int | None = None
    episodic_life: bool = True
    reward_clip: bool = True
    noop_max: int = 30  # no-ops
    repeat_action_probability: float = 0.0
    frame_skip: int = 4  # frames per agent step
    stack_num: int = 4  # frames per observation
    max_episode_frames: int = 108_000  # frames
    img_size: int = 84  # pixels
    fire_reset: bool = False
    full_action_space: bool = False

    def __post_init__(self):
        import envpool

        all_ids = envpool.list_all_envs()
        if self.env_id not in all_ids:
            close = difflib.get_close_matches(str(self.env_id), all_ids, n=5, cutoff=0.5)
            hint = f"; close matches: {close}" if close else ""
            raise ValueError(f"env_id {self.env_id!r} is not an envpool env "
                             f"(see envpool.list_all_envs()){hint}")
        _check_int("num_envs", self.num_envs, 1)
        _check_int("batch_size", self.batch_size, 1)
        if self.batch_size > self.num_envs:
            raise ValueError(f"batch_size must be in [1, num_envs={self.num_envs}] (async actors "
                             f"need < num_envs), got {self.batch_size}")
        if (not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool)
                or not 0 <= self.seed <= _INT32_LIMIT - self.num_envs):
            raise ValueError(f"seed must be an integer in [0, 2**31 - num_envs] (env i gets "
                             f"seed + i, an int32), got {self.seed!r}")
        if self.num_threads is not None:
            _check_int("num_threads", self.num_threads, 1)
        if self.is_atari:
            if self.max_episode_steps is not None:
                raise ValueError(f"max_episode_steps is for classic control; {self.env_id} is "
                                 "Atari: set max_episode_frames instead")
            # envpool draws its no-op count from [1, noop_max]; noop_max=0 crashes it (segfault).
            _check_int("noop_max", self.noop_max, 1)
            if (not isinstance(self.repeat_action_probability, (int, float, np.floating))
                    or not 0.0 <= self.repeat_action_probability <= 1.0):
                raise ValueError(f"repeat_action_probability must be in [0, 1], got "
                                 f"{self.repeat_action_probability}")
            _check_int("frame_skip", self.frame_skip, 1)
            _check_int("stack_num", self.stack_num, 1)
            _check_int("img_size", self.img_size, 1)
            _check_int("max_episode_frames", self.max_episode_frames, self.frame_skip)
        elif self.max_episode_steps is not None:
            _check_int("max_episode_steps", self.max_episode_steps, 1)

    @property
    def is_atari(self) -> bool:
        return is_atari(self.env_id)

    def envpool_kwargs(self) -> dict:
        """The keyword arguments given to `envpool.make` and `envpool.make_spec`."""
        kwargs = dict(num_envs=self.num_envs, batch_size=self.batch_size, seed=self.seed)
        if self.num_threads is not None:
            kwargs["num_threads"] = self.num_threads
        if self.is_atari:
            kwargs.update(
                episodic_life=self.episodic_life,
                reward_clip=self.reward_clip,
                noop_max=self.noop_max,
                repeat_action_probability=float(self.repeat_action_probability),
                frame_skip=self.frame_skip,
                stack_num=self.stack_num,
                # envpool counts agent steps; the cap in the papers is in frames.
                max_episode_steps=self.max_episode_frames // self.frame_skip,
                img_height=self.img_size,
                img_width=self.img_size,
                gray_scale=True,
                use_fire_reset=self.fire_reset,
                full_action_space=self.full_action_space,
            )
        elif self.max_episode_steps is not None:
            kwargs["max_episode_steps"] = self.max_episode_steps
        return kwargs

    def for_evaluation(self, num_envs: int, batch_size: int | None = None,
                       seed: int | None = None) -> "EnvSettings":
        """Settings for evaluation: real game scores (no life-loss episodes, no reward clip).

        Args:
          num_envs: envs in the evaluation pool.
          batch_size: envs per `recv`; None means num_envs (synchronous `reset`/`step`).
          seed: None means `self.seed + self.num_envs`, the first seed after the training envs'.
        """
        return dataclasses.replace(
            self, num_envs=num_envs,
            batch_size=num_envs if batch_size is None else batch_size,
            seed=self.seed + self.num_envs if seed is None else seed,
            episodic_life=False, reward_clip=False)


class EnvInfo(NamedTuple):
    """What agents and replays need to know about an env, read from its envpool spec.

    Attributes:
      obs_shape: shape of one observation, e.g. (4, 84, 84) for Atari, (4,) for CartPole.
      obs_dtype: uint8 for Atari, float32 for CartPole.
      num_actions: size of the discrete action space.
      is_atari: whether the env is an Atari game.
      channels_first: the frame stack is axis 0 of an observation (Atari); networks move it last.
      max_episode_steps: agent steps after which an episode is truncated.
    """

    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int
    is_atari: bool
    channels_first: bool
    max_episode_steps: int


def env_info(settings: EnvSettings) -> EnvInfo:
    """Reads observation and action spaces from the envpool spec, without creating envs."""
    import envpool

    spec = envpool.make_spec(settings.env_id, **settings.envpool_kwargs())
    obs_space, action_space = spec.observation_space, spec.action_space
    if not hasattr(action_space, "n"):
        raise ValueError(f"env_id {settings.env_id!r} has action space {action_space}; Ape-X "
                         "and IMPALA here need a discrete one")
    return EnvInfo(obs_shape=tuple(int(d) for d in obs_space.shape),
                   obs_dtype=np.dtype(obs_space.dtype),
                   num_actions=int(action_space.n),
                   is_atari=settings.is_atari,
                   channels_first=settings.is_atari,
                   max_episode_steps=int(spec.config.max_episode_steps))


def make_env(settings: EnvSettings):
    """Creates the envpool pool (gymnasium API: `reset`/`step`, or `async_reset`/`recv`/`send`).

    Returns:
      An envpool `GymnasiumEnvPool`; `env.config` holds the settings envpool applied.
    """
    import envpool

    return envpool.make(settings.env_id, env_type="gymnasium", **settings.envpool_kwargs())


# The config fields that only envpool's Atari envs read (`envpool_kwargs`); another env would
# silently ignore them.
ATARI_ONLY = ("episodic_life", "fire_reset", "reward_clip", "noop_max",
              "repeat_action_probability", "max_episode_frames")


def check_atari_only(config: Any) -> None:
    """Raises a ValueError naming the flags if a config for an env that is not Atari sets any
    `ATARI_ONLY` field away from its default: the run would ignore it without a word."""
    if is_atari(config.env):
        return
    defaults = {f.name: f.default for f in dataclasses.fields(EnvSettings)}
    changed = [f"--{name}={getattr(config, name)}" for name in ATARI_ONLY
               if getattr(config, name) != defaults[name]]
    if changed:
        raise ValueError(
            f"{' '.join(changed)}: Atari-only, and env {config.env} is not an Atari game: the "
            f"run would ignore it. Leave it out (Atari-only: "
            f"{', '.join('--' + name for name in ATARI_ONLY)}; --max_episode_steps caps the "
            "episodes of other envs)")


def actor_env_settings(config: Any, actor_id: int, restart: int = 0) -> EnvSettings:
    """The envs of one actor of an agent config (Ape-X's or IMPALA's), seeded with the actor's
    own block of env seeds (`agents.run.seeds`).

    Args:
      config: has env, envs_per_actor, actor_batch_size, seed, max_episode_steps (0 = the env's
        own) and the Atari settings episodic_life, fire_reset, reward_clip, noop_max,
        repeat_action_probability and max_episode_frames.
      actor_id: the actor's index in the whole run.
      restart: how often this actor was restarted (a restarted actor gets fresh envs).

    Raises:
      ValueError: an env envpool does not have, an invalid setting, or an Atari-only setting
        changed for an env that is not Atari (`check_atari_only`).
    """
    settings = EnvSettings(
        env_id=config.env, num_envs=config.envs_per_actor, batch_size=config.actor_batch_size,
        seed=run_seeds(config).actor_envs_seed(actor_id, restart),
        max_episode_steps=config.max_episode_steps or None, episodic_life=config.episodic_life,
        fire_reset=config.fire_reset, reward_clip=config.reward_clip, noop_max=config.noop_max,
        repeat_action_probability=config.repeat_action_probability,
        max_episode_frames=config.max_episode_frames)
    check_atari_only(config)  # after EnvSettings: an unknown env id is reported as such
    return settings


def eval_env_settings(config: Any) -> EnvSettings:
    """The evaluation envs: one episode per env, real game scores, seeds apart from training."""
    return actor_env_settings(config, 0).for_evaluation(
        config.eval_episodes, seed=run_seeds(config).eval_envs_seed())


def random_policy_frames(settings: EnvSettings, num_actions: int, steps: int, every: int,
                         seed: int = 0) -> np.ndarray:
    """Observations of a uniform random policy: the pool's batch every `every` of `steps` steps.

    A fixed set of real frames to look at networks with (`experiments/inspect_checkpoint.py`,
    `experiments/feature_spread.py`); the pool is stepped synchronously and closed after.

    Returns:
      Observations `[ceil(steps / every) * num_envs, *obs_shape]`, in envpool's layout.
    """
    env = make_env(settings)
    env.reset()
    rng, frames = np.random.default_rng(seed), []
    for step in range(steps):
        obs, *_ = env.step(rng.integers(0, num_actions, settings.num_envs).astype(np.int32))
        if step % every == 0:
            frames.append(obs.copy())
    env.close()
    return np.concatenate(frames)
