"""Evaluation episodes on a separate envpool instance, and the papers' evaluation protocol.

The protocol of Ape-X (Horgan et al. 2018, arXiv:1803.00933, Sec. 4.1 "no-op starts") and
IMPALA (Espeholt et al. 2018, arXiv:1802.01561, Sec. 5.3 and Appendix), both after Mnih et al.
2015 (Nature, Methods "Evaluation procedure"):

  * up to 30 no-op actions at the start of each episode: envpool draws their number uniformly
    from 1..noop_max, as IMPALA states it ("uniformly chosen from [1, 30]", Sec. 5.3.2);
  * no FIRE pressed for the agent at the start or after a lost life (`fire_reset`, off):
    OpenAI Baselines' FireResetEnv, envpool's default, is not in the papers, and DeepMind's
    agents do not use it (as DeepMind told the authors of two replications: Kaixhin/Rainbow
    issue 19, astooke/rlpyt pull request 158). A game that waits for FIRE waits until the
    agent presses it or the 108K-frame cap ends the game;
  * each episode capped at 108K emulator frames, 30 minutes of play (27K agent steps at frame
    skip 4);
  * whole games, scored as the game scores them: a lost life does not end the episode and
    rewards are not clipped (`EnvSettings.for_evaluation`);
  * a fixed number of episodes per evaluated checkpoint (30 by default), on envs whose seeds
    no training env uses (`agents.run.seeds.RunSeeds.protocol_envs_seed`);
  * each paper's action rule. Ape-X acts epsilon-greedily on its Q-values with
    `eval_epsilon`, 0.001 by default (`agents.apex.config.PAPER_EVAL_EPSILON`: the value of
    the Double DQN line Ape-X's agent comes from; the Ape-X paper's own could not be checked,
    so it is a flag; Mnih et al. 2015 used 0.05).
    IMPALA samples its actions from the policy, as the paper's implementation evaluates
    (scalable_agent's actors sample at test time as in training); greedy is a flag.
"""

import dataclasses
import math
import queue
import threading
from typing import Any, Callable, NamedTuple

import numpy as np

ACTION_RULES = ("greedy", "epsilon_greedy", "sample")
FRAME_SKIP = 4  # emulator frames per agent step in both papers (Mnih et al. 2015)


def select_actions(scores: np.ndarray, rule: str, epsilon: float = 0.0,
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """Actions `[B]` int32 from scores `[B, A]` (Q-values, or policy logits for "sample").

    Args:
      scores: `[B, A]` Q-values (greedy, epsilon_greedy) or logits (sample).
      rule: "greedy" (argmax), "epsilon_greedy" (a uniform action with probability epsilon,
        else the argmax) or "sample" (from softmax(scores)).
      epsilon: the exploration rate of "epsilon_greedy", in [0, 1].
      rng: the random stream of "epsilon_greedy" and "sample".
    """
    if rule not in ACTION_RULES:
        raise ValueError(f"rule must be one of {ACTION_RULES}, got {rule!r}")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    scores = np.asarray(scores, np.float64)
    if scores.ndim != 2:
        raise ValueError(f"scores must be [B, A], got shape {scores.shape}")
    greedy = np.argmax(scores, axis=-1)  # [B]
    if rule == "greedy" or (rule == "epsilon_greedy" and epsilon == 0.0):
        return greedy.astype(np.int32)
    if rng is None:
        raise ValueError(f"rule {rule!r} needs rng, a numpy Generator")
    batch, num_actions = scores.shape
    if rule == "epsilon_greedy":
        explore = rng.random(batch) < epsilon  # [B]
        return np.where(explore, rng.integers(num_actions, size=batch), greedy).astype(np.int32)
    # Gumbel-max: argmax(logits + Gumbel noise) is a sample from softmax(logits).
    return np.argmax(scores + rng.gumbel(size=scores.shape), axis=-1).astype(np.int32)


class Episodes(NamedTuple):
    """One finished episode per env: `returns` `[N]` (summed rewards) and `steps` `[N]`
    (agent steps, each `frame_skip` emulator frames on Atari)."""

    returns: np.ndarray
    steps: np.ndarray


def play_episodes(env: Any, policy: Callable, params: Any, rule: str = "greedy",
                  epsilon: float = 0.0, rng: np.random.Generator | None = None,
                  stop: threading.Event | None = None) -> Episodes | None:
    """Plays one episode in each env of a synchronous envpool with `select_actions(rule)`.

    Each env's episode stops counting at its first end, terminated or truncated (envpool resets
    it on the next step, which is then ignored).

    Args:
      env: a synchronous envpool (batch_size == num_envs), freshly made or reset here.
      policy: `(params, obs [N, ...]) -> scores [N, A]`.
      params: the policy's parameters.
      rule, epsilon, rng: as `select_actions`.
      stop: checked before every step; once set the episodes are abandoned and None returned.
        An Atari evaluation can last 27K steps, far longer than a run may take to stop.
    """
    obs, _ = env.reset()
    returns = np.zeros(env.num_envs)
    steps = np.zeros(env.num_envs, np.int64)
    done = np.zeros(env.num_envs, bool)
    while not done.all():
        if stop is not None and stop.is_set():
            return None
        actions = select_actions(np.asarray(policy(params, obs)), rule, epsilon, rng)
        obs, reward, terminated, truncated, _ = env.step(actions)
        returns += np.where(done, 0.0, reward)
        steps += ~done
        done |= terminated | truncated
    return Episodes(returns, steps)


@dataclasses.dataclass(frozen=True)
class EvalProtocol:
    """How a checkpoint is evaluated (module docstring: the papers' choices).

    Attributes:
      episodes: episodes per evaluation, one per env of a synchronous pool.
      action_rule: greedy, epsilon_greedy or sample (`select_actions`).
      epsilon: exploration rate of epsilon_greedy.
      noop_max: Atari: up to this many no-ops at each episode's start (>= 1 for envpool).
      max_episode_frames: Atari: the episode cap in emulator frames.
      fire_reset: Atari: press FIRE for the agent at each game's start (envpool's
        `use_fire_reset`; not in the papers' protocol).
    """

    episodes: int = 30
    action_rule: str = "greedy"
    epsilon: float = 0.0
    noop_max: int = 30  # no-ops
    max_episode_frames: int = 108_000  # frames = 27,000 agent steps
    fire_reset: bool = False

    def __post_init__(self):
        if not isinstance(self.episodes, int) or self.episodes < 1:
            raise ValueError(f"episodes must be an integer >= 1, got {self.episodes!r}")
        if self.action_rule not in ACTION_RULES:
            raise ValueError(f"action_rule must be one of {ACTION_RULES}, got "
                             f"{self.action_rule!r}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")
        if self.noop_max < 1:
            raise ValueError(f"noop_max must be >= 1 (envpool draws 1..noop_max), got "
                             f"{self.noop_max}")
        if self.max_episode_frames < FRAME_SKIP:
            raise ValueError(f"max_episode_frames must be >= {FRAME_SKIP}, got "
                             f"{self.max_episode_frames}")

    def env_settings(self, train_settings: Any, seed: int) -> Any:
        """The evaluation pool's `EnvSettings`: the training envs' game and preprocessing,
        with full unclipped episodes, this protocol's no-ops, cap, FIRE rule and episode
        count."""
        return dataclasses.replace(
            train_settings.for_evaluation(self.episodes, seed=seed), noop_max=self.noop_max,
            max_episode_frames=self.max_episode_frames, fire_reset=self.fire_reset)

    def play(self, env: Any, policy: Callable, params: Any,
             rng: np.random.Generator | None = None,
             stop: threading.Event | None = None) -> Episodes | None:
        """`play_episodes` with this protocol's action rule (None: stopped by `stop`)."""
        return play_episodes(env, policy, params, self.action_rule, self.epsilon, rng, stop)


def paper_protocol(rule: Callable[[bool, float | None], tuple[str, float]],
                   episodes: int = 30, greedy: bool = False,
                   epsilon: float | None = None) -> EvalProtocol:
    """The evaluation protocol of an agent's paper (module docstring), with its action rule.

    Args:
      rule: the agent's `(greedy, epsilon) -> (action_rule, epsilon)` (its spec's
        `paper_rule`; `agents.registry.paper_protocol` looks it up by the agent's name).
      episodes: episodes per evaluation.
      greedy: an agent that samples its actions takes the argmax instead.
      epsilon: an agent that acts epsilon-greedily uses this rate (None: its paper's).
    """
    action_rule, rate = rule(greedy, epsilon)
    return EvalProtocol(episodes, action_rule, rate)


def config_protocol(config: Any) -> EvalProtocol:
    """The protocol of a training run's Evaluator: its config's episodes, no-ops, cap and
    FIRE rule, and its agent's action rule (`eval_epsilon` for Ape-X, `eval_action` for
    IMPALA)."""
    rule, epsilon = config.eval_rule
    return EvalProtocol(config.eval_episodes, rule, epsilon, max(1, config.noop_max),
                        config.max_episode_frames, config.fire_reset)


def confirm_protocol(config: Any) -> EvalProtocol | None:
    """The games that confirm a run's solved line: `config_protocol` with
    `solved_confirm_episodes` episodes; None where it is 0."""
    if config.solved_confirm_episodes == 0:
        return None
    return dataclasses.replace(config_protocol(config), episodes=config.solved_confirm_episodes)


class SolvedAt(NamedTuple):
    """The evaluation that solved a run: the learner's `updates` and the run's `env_steps` when
    it began, and the `params` it played."""

    updates: int
    env_steps: int
    params: Any


class Evaluator:
    """Evaluation thread: episodes with the latest parameters every `period` updates.

    Args:
      make_env: builds the synchronous evaluation envpool (one episode per env).
      policy: jitted `(params, obs) -> scores [B, A]` (Q-values or logits).
      param_server: source of the latest parameters.
      updates: returns the learner's update count.
      env_steps: returns the run's env step count (logged with each result).
      period: learner updates between evaluations.
      solved_return: a mean return at or above this sets `solved` and stops the run.
      protocol: the action rule (its env settings are `make_env`'s); None: greedy.
      seed: seeds the action rule's random stream (`RunSeeds.eval_actions`).
      train_return: returns the mean return of recent training episodes (NaN before the
        first); with `from_return`, an evaluation falling due while it is below `from_return`
        is skipped (the next one is due a period later).
      from_return: see `train_return`; -inf evaluates every period.
      confirm: an evaluation reaching `solved_return` is confirmed before the run stops:
        `confirm(params, stop=stop)` plays more games with the same parameters and returns
        their `Episodes` (None: stopped), logged as a result of its own; the run is solved
        only if their mean return reaches `solved_return` too. None: no confirmation.

    Each result: updates, env_steps, mean_return, min_return, max_return, std_return (the
    games' sample standard deviation, for an interval on the mean; NaN for one game), episodes
    (games played), mean_steps and max_steps (the games' agent steps: a game that waits for
    an action the agent never takes lasts until the cap).
    Once solved, `solved_at` holds the evaluation's updates, env_steps and parameters (the run
    saves them: the learner trains on while the games are played).
    """

    def __init__(self, make_env: Callable, policy: Callable, param_server: Any,
                 updates: Callable[[], int], env_steps: Callable[[], int], period: int,
                 solved_return: float, protocol: EvalProtocol | None = None,
                 seed: Any = None, train_return: Callable[[], float] = lambda: math.nan,
                 from_return: float = -math.inf, confirm: Callable | None = None):
        self._make_env, self._policy, self._param_server = make_env, policy, param_server
        self._updates, self._env_steps = updates, env_steps
        self._period, self._solved_return = period, solved_return
        self._protocol = protocol or EvalProtocol(episodes=1)
        self._rng = np.random.default_rng(seed)
        self._train_return, self._from_return = train_return, from_return
        self._confirm = confirm
        self.results: queue.Queue = queue.Queue()
        self.solved = threading.Event()
        self.solved_at: SolvedAt | None = None

    def _next_due(self) -> int:
        return (self._updates() // self._period + 1) * self._period

    def _worth_playing(self) -> bool:
        # `not <` would let NaN (no training episode yet) through; -inf lets everything through
        return self._from_return == -math.inf or self._train_return() >= self._from_return

    def run(self, stop: threading.Event) -> None:
        env = self._make_env()
        due = self._next_due()
        try:
            while not stop.is_set():
                if self._updates() < due:
                    stop.wait(0.05)
                    continue
                if not self._worth_playing():
                    due = self._next_due()
                    continue
                updates, env_steps = self._updates(), self._env_steps()
                _, params = self._param_server.latest()
                episodes = self._protocol.play(env, self._policy, params, self._rng, stop)
                if episodes is None:  # the run is stopping: its final save waits on this thread
                    break
                self.results.put(_result(updates, env_steps, episodes))
                if (np.mean(episodes.returns) >= self._solved_return
                        and self._confirmed(updates, env_steps, params, stop)):
                    self.solved_at = SolvedAt(updates, env_steps, params)
                    self.solved.set()
                    stop.set()
                due = self._next_due()
        finally:
            env.close()

    def _confirmed(self, updates: int, env_steps: int, params: Any,
                   stop: threading.Event) -> bool:
        """True if no confirmation is asked for, or if the confirmation's games with the same
        `params` (logged as a result) also reach the solved line."""
        if self._confirm is None:
            return True
        episodes = self._confirm(params, stop=stop)
        if episodes is None:  # the run is stopping
            return False
        self.results.put(_result(updates, env_steps, episodes))
        return bool(np.mean(episodes.returns) >= self._solved_return)


def _result(updates: int, env_steps: int, episodes: Episodes) -> dict:
    """One evaluation's row of eval.csv, from its games (`[N]` returns and steps)."""
    returns = episodes.returns
    return dict(updates=updates, env_steps=env_steps, mean_return=float(np.mean(returns)),
                min_return=float(np.min(returns)), max_return=float(np.max(returns)),
                std_return=float(np.std(returns, ddof=1)) if len(returns) > 1 else math.nan,
                episodes=len(returns), mean_steps=float(np.mean(episodes.steps)),
                max_steps=float(np.max(episodes.steps)))
