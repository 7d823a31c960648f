"""Fixed-length IMPALA unrolls with behaviour logits, cut from envpool's per-env recv streams.

IMPALA actors (Espeholt et al. 2018, arXiv:1802.01561, Sec. 3) run the behaviour policy mu for
T = `unroll_length` steps per env and send the trajectory x_0, a_0, r_1, ..., x_T with mu's
logits to the learner, which corrects the policy lag with V-trace (`ops.vtrace`).

Rows. Every observation an env's recv returns is one row. An unroll holds T + 1 rows
`obs[0..T]`; step t goes from obs[t] to obs[t + 1] and carries the action and logits the actor
produced at obs[t], and the reward received with obs[t + 1]. The last row of an unroll is also
row 0 of that env's next unroll, bit for bit, so every unroll after the first costs T new rows
and V(obs[T]) bootstraps the one unroll while starting the next. Episodes do not align with
unrolls: an unroll may hold the end of one episode, several short ones and the start of another.

Episode ends (terminated and truncated differ). envpool returns an episode's final
observation with `terminated` or `truncated` set; the step into it gets `episode_ends = True`
and `discounts = gamma * (1 - terminated)`: a termination stops the return (the state after it
is worth 0), a time-limit truncation does not end the task, so the step still bootstraps from
V(final obs), which V-trace's `v_t` carries for every step. Both flags set counts as terminated.
`episode_ends` lets V-trace stop the trace at a truncation although its discount is gamma.

Pseudo steps. envpool ignores the action sent for a final observation, and the env's next
row is the first observation of a new episode with reward 0. The "step" from a final row to
that row is no transition: it gets `masks = 0`, `discounts = 0`, `episode_ends = True` and
`rewards = 0`, so it contributes nothing to V-trace (its own target is unused, and no trace
crosses it) and the learner drops it from every loss with `masks`. A final row that is the
last row of an unroll makes step 0 of the next unroll a pseudo step.
"""

from typing import NamedTuple, Sequence

import numpy as np

from agents.run.actor_loop import check_builder_args, check_recv, check_shape


class Unrolls(NamedTuple):
    """K completed unrolls of T steps, batch-major (the learner shards axis 0 over devices).

    The learner transposes to time-major `[T, K]` on the device; V-trace then takes
    `v_tm1 = V(obs[:T])`, `v_t = V(obs[1:])`, `r_t = rewards`, `discount_t = discounts`,
    `episode_end_t = episode_ends`, and losses are weighted by `masks`.

    Attributes:
      obs: `[K, T + 1, *obs_shape]` observations; `obs[:, T]` is row 0 of the env's next unroll.
      actions: int32 `[K, T]` the action taken at obs[t] (0 on a pseudo step whose action the
        actor sent out of range; envpool ignored it).
      rewards: float32 `[K, T]` the reward received with obs[t + 1] (0 on pseudo steps).
      discounts: float32 `[K, T]` gamma * (1 - terminated flag of obs[t + 1]); 0 on pseudo steps.
      episode_ends: bool `[K, T]` obs[t + 1] is a final observation (terminated or truncated),
        or step t is a pseudo step; V-trace carries no trace across these steps.
      masks: float32 `[K, T]` 1 for a real step, 0 for a pseudo step (obs[t] is final).
      behaviour_logits: float32 `[K, T, A]` the logits of mu at obs[t].
      param_versions: int64 `[K, T]` the version of the parameters that produced
        `behaviour_logits[:, t]`; per step because the actor may pull new parameters inside an
        unroll. The policy lag of a batch is `learner_version - param_versions` (log its mean
        and max; `param_versions.min()` is the stalest data).
      env_ids: int64 `[K]` the env each unroll came from.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    discounts: np.ndarray
    episode_ends: np.ndarray
    masks: np.ndarray
    behaviour_logits: np.ndarray
    param_versions: np.ndarray
    env_ids: np.ndarray


def stack_unrolls(unrolls: Sequence[Unrolls]) -> Unrolls:
    """Concatenates `Unrolls` along K (dynamic batching of the learner).

    Args:
      unrolls: one or more `Unrolls` of the same T, observation shape, dtypes and action count.

    Returns:
      `Unrolls` with K = the sum of the inputs' K, in the order given.
    """
    unrolls = list(unrolls)
    if not unrolls:
        raise ValueError("unrolls must hold at least one Unrolls, got an empty sequence")
    for i, u in enumerate(unrolls):
        if not isinstance(u, Unrolls):
            raise ValueError(f"unrolls[{i}] must be an Unrolls, got {type(u).__name__}")
    first = unrolls[0]
    for name in Unrolls._fields:
        want = getattr(first, name)
        for i, u in enumerate(unrolls[1:], 1):
            got = getattr(u, name)
            if got.shape[1:] != want.shape[1:] or got.dtype != want.dtype:
                raise ValueError(
                    f"unrolls[{i}].{name} has per-unroll shape {got.shape[1:]} and dtype "
                    f"{got.dtype}, but unrolls[0].{name} has {want.shape[1:]} and {want.dtype}")
    return Unrolls(*(np.concatenate(fields, axis=0) for fields in zip(*unrolls)))


def unroll_spec(unroll_length: int, obs_shape, obs_dtype,
                num_actions: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape (without the leading K) and dtype of every `Unrolls` field, for unrolls of
    `unroll_length` (T) steps of `obs_shape` observations and `num_actions` (A) logits."""
    t, a, f32 = int(unroll_length), int(num_actions), np.dtype(np.float32)
    return dict(obs=((t + 1,) + tuple(int(d) for d in obs_shape), np.dtype(obs_dtype)),
                actions=((t,), np.dtype(np.int32)), rewards=((t,), f32),
                discounts=((t,), f32), episode_ends=((t,), np.dtype(bool)),
                masks=((t,), f32), behaviour_logits=((t, a), f32),
                param_versions=((t,), np.dtype(np.int64)), env_ids=((), np.dtype(np.int64)))


class UnrollBuilder:
    """Cuts the streams of `num_envs` envs into IMPALA unrolls of `unroll_length` steps.

    Each env fills preallocated arrays `[num_envs, T + 1, ...]` row by row, with a per-env fill
    count; `step` writes the rows of a whole recv batch with array operations. An env's unroll
    completes when it holds T + 1 rows; its last row (with its action, logits, version and
    whether it is final) then becomes row 0 of the next one.

    Args:
      num_envs: env streams (envpool env ids are 0 .. num_envs - 1).
      unroll_length: T, steps per unroll (IMPALA Atari: 20); 1 is allowed.
      gamma: discount per step, in [0, 1].
      obs_shape: shape of one observation, e.g. (4, 84, 84).
      obs_dtype: dtype of the observations stored (uint8 for Atari).
      num_actions: A, the number of discrete actions (width of the logits).
      check_inputs: validate every `step`'s arguments (shapes, dtypes, env ids, finite values).
        Actors turn it off: envpool and their jitted policy produce well-formed arrays by
        construction, and the checks would cost a third of the builder's time in the hot loop.
    """

    def __init__(self, num_envs: int, unroll_length: int, gamma: float, obs_shape, obs_dtype,
                 num_actions: int, check_inputs: bool = True):
        check_builder_args(gamma, num_envs=num_envs, unroll_length=unroll_length,
                           num_actions=num_actions)
        self.check_inputs = check_inputs
        self.num_envs, self.unroll_length = int(num_envs), int(unroll_length)
        self.gamma, self.num_actions = float(gamma), int(num_actions)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        n, t = self.num_envs, self.unroll_length
        # Per-row arrays have T + 1 rows: row T's action, logits and version belong to step 0 of
        # the next unroll and move to row 0 with the observation when the unroll completes.
        self._obs = np.zeros((n, t + 1) + self.obs_shape, self.obs_dtype)
        self._actions = np.zeros((n, t + 1), np.int32)
        self._logits = np.zeros((n, t + 1, self.num_actions), np.float32)
        self._versions = np.zeros((n, t + 1), np.int64)
        self._rewards = np.zeros((n, t), np.float32)
        self._discounts = np.zeros((n, t), np.float32)
        self._episode_ends = np.zeros((n, t), bool)
        self._masks = np.zeros((n, t), np.float32)
        self._fill = np.zeros(n, np.int64)  # rows held, 0 .. T
        self._last_final = np.zeros(n, bool)  # the env's newest row is a final observation

    @property
    def spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape (without the leading K) and dtype of every `Unrolls` field it makes."""
        return unroll_spec(self.unroll_length, self.obs_shape, self.obs_dtype, self.num_actions)

    def pending(self) -> int:
        """Number of observation rows held, over all envs (at most num_envs * T)."""
        return int(self._fill.sum())

    def reset(self) -> None:
        """Drops every partial unroll (e.g. after the env pool was reset)."""
        self._fill[:] = 0
        self._last_final[:] = False

    def step(self, env_ids, obs, rewards, terminated, truncated, actions, logits,
             param_version: int) -> Unrolls | None:
        """Adds one recv batch of B observations; returns the unrolls completed by it.

        Args:
          env_ids: int `[B]` envpool `info["env_id"]`, unique within the batch.
          obs: `[B, *obs_shape]` the observations just received.
          rewards: `[B]` the rewards that led to `obs` (0 on an episode's first observation).
          terminated: bool `[B]` obs is the final observation of an episode that terminated.
          truncated: bool `[B]` obs is the final observation of an episode cut by a time limit.
          actions: int `[B]` the actions the actor sends for `obs` (ignored by envpool, and not
            range-checked, for final observations).
          logits: float `[B, A]` the behaviour logits `actions` were sampled from; finite.
          param_version: integer >= 0, the version of the parameters that produced `logits`.

        Returns:
          `Unrolls` of the K >= 1 unrolls completed (at most one per env, in batch order);
          None when none completed.
        """
        if self.check_inputs:
            env_ids, obs, rewards, terminated, truncated, actions, logits = self._check_step(
                env_ids, obs, rewards, terminated, truncated, actions, logits, param_version)
        batch = len(env_ids)
        final = terminated | truncated
        in_range = (actions >= 0) & (actions < self.num_actions)
        if batch == 0:
            return None

        e, t_len = env_ids, self.unroll_length
        row = self._fill[e]  # [B] the row this observation fills, 0 .. T
        self._obs[e, row] = obs
        # The learner gathers log pi(a|x) for every step: keep ignored actions in range.
        self._actions[e, row] = np.where(in_range, actions, 0)
        self._logits[e, row] = logits
        self._versions[e, row] = param_version

        # This observation ends step row - 1 of its env.
        ends_step = row > 0
        es, s = e[ends_step], row[ends_step] - 1
        pseudo = self._last_final[es]  # [B'] the step starts at a final observation
        term_s, final_s = terminated[ends_step], final[ends_step]
        self._rewards[es, s] = np.where(pseudo, 0.0, rewards[ends_step])
        self._discounts[es, s] = np.where(pseudo | term_s, 0.0, np.float32(self.gamma))
        self._episode_ends[es, s] = pseudo | final_s
        self._masks[es, s] = np.where(pseudo, 0.0, 1.0)
        self._last_final[e] = final
        self._fill[e] = row + 1

        done = row == t_len
        if not done.any():
            return None
        ed = e[done]
        # Fancy indexing copies: the returned arrays do not alias the builder's buffers.
        out = Unrolls(obs=self._obs[ed], actions=self._actions[ed, :t_len],
                      rewards=self._rewards[ed], discounts=self._discounts[ed],
                      episode_ends=self._episode_ends[ed], masks=self._masks[ed],
                      behaviour_logits=self._logits[ed, :t_len],
                      param_versions=self._versions[ed, :t_len], env_ids=ed.astype(np.int64))
        # Row T carries over as row 0 of the next unroll; `_last_final` already describes it.
        for buffer in (self._obs, self._actions, self._logits, self._versions):
            buffer[ed, 0] = buffer[ed, t_len]
        self._fill[ed] = 1
        return out

    def _check_step(self, env_ids, obs, rewards, terminated, truncated, actions, logits,
                    param_version):
        """ValueErrors for a malformed recv batch; returns the arguments as arrays."""
        env_ids, obs = check_recv(env_ids, obs, self.num_envs, self.obs_shape, self.obs_dtype)
        batch = len(env_ids)
        with np.errstate(over="ignore"):  # an overflow to inf is reported just below
            rewards = check_shape("rewards", rewards, (batch,)).astype(np.float32)
        if not np.isfinite(rewards).all():
            raise ValueError(f"rewards must be finite (in float32), got {rewards}")
        terminated = check_shape("terminated", terminated, (batch,)).astype(bool)
        truncated = check_shape("truncated", truncated, (batch,)).astype(bool)
        logits = check_shape("logits", logits, (batch, self.num_actions))
        if not np.issubdtype(logits.dtype, np.number) or np.iscomplexobj(logits):
            raise ValueError(f"logits must be real numbers, got dtype {logits.dtype}")
        with np.errstate(over="ignore"):  # an overflow to inf is reported just below
            logits = logits.astype(np.float32)
        if not np.isfinite(logits).all():
            bad = np.nonzero(~np.isfinite(logits).all(axis=1))[0]
            raise ValueError(f"logits must be finite (in float32); rows {bad[:3]} of the batch "
                             f"(env ids {env_ids[bad[:3]]}) hold NaN or inf")
        actions = check_shape("actions", actions, (batch,))
        final = terminated | truncated
        in_range = (actions >= 0) & (actions < self.num_actions) if np.issubdtype(
            actions.dtype, np.integer) else np.zeros(batch, bool)
        if not np.issubdtype(actions.dtype, np.integer) or not in_range[~final].all():
            raise ValueError(f"actions must be integers in [0, {self.num_actions}) for "
                             f"non-final observations, got {actions}")
        if (isinstance(param_version, bool) or not isinstance(param_version, (int, np.integer))
                or param_version < 0):
            raise ValueError(f"param_version must be an integer >= 0, got {param_version!r}")
        return env_ids, obs, rewards, terminated, truncated, actions, logits
