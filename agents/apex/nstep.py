"""n-step transitions with initial priorities, built per env stream from envpool's recv stream.

Ape-X (Horgan et al. 2018, arXiv:1803.00933, Sec. 3 and Appendix) learns from n-step
transitions (n = 3) with the return of Sutton & Barto (2018, Sec. 7.1)

    R_t^(n) = sum_{k=0}^{n-1} gamma^k r_{t+k+1},   target = R_t^(n) + gamma^n max_a Q(s_{t+n}, a),

and its actors compute each transition's initial priority from their own Q-values, so the
learner never has to score new data:

    p = |R + discount * max_a Q(next_obs, a) - Q(obs, action)|.

The actor holds only online parameters, so this is the double-Q target of the learner with the
target network equal to the online one.

Episode ends (terminated and truncated differ). When an env's final observation
arrives, every pending transition of that env is emitted with the rewards seen so far, m <= n:
terminated -> discount 0 (no bootstrap); truncated (time limit) -> discount gamma^m, bootstrapping
from the final observation, which is their next_obs. Both flags set counts as terminated. The
final observation starts no transition (envpool ignores the action sent for it).

Emitted transitions of one env come out oldest first, within a call and across calls: the
frame-deduplicating replay storage (`replay.frames`) relies on per-stream order.
"""

from typing import NamedTuple

import numpy as np

from agents.run.actor_loop import check_builder_args, check_recv, check_shape


class NStepOutput(NamedTuple):
    """Transitions emitted by one `NStepBuilder.step`, K of them; `replay.add(*output)` adds them.

    Attributes:
      transitions: the replay's fields, `obs [K, *obs_shape]`, `action int32 [K]`,
        `reward float32 [K]` (R^(m)), `discount float32 [K]` (0, gamma^m or gamma^n),
        `next_obs [K, *obs_shape]`.
      priorities: float32 `[K]` initial priorities |n-step TD error| from the actor's Q-values.
      streams: int64 `[K]` the env id of each transition (its stream, for frame storage).
    """

    transitions: dict[str, np.ndarray]
    priorities: np.ndarray
    streams: np.ndarray


class NStepBuilder:
    """Builds Ape-X n-step transitions for `num_envs` env streams at once.

    Each env keeps a window of at most n pending transitions in preallocated ring arrays
    `[num_envs, n, ...]`; `step` updates the windows of a whole recv batch with array operations.

    Args:
      num_envs: env streams (envpool env ids are 0 .. num_envs - 1).
      n: steps per transition (Ape-X: 3); 1 gives one-step transitions.
      gamma: discount per step, in [0, 1].
      obs_shape: shape of one observation, e.g. (4, 84, 84).
      obs_dtype: dtype of the observations stored (uint8 for Atari).
      check_inputs: validate every `step`'s arguments (shapes, dtypes, env ids, action range).
        Actors turn it off: envpool and their jitted policy produce well-formed arrays by
        construction, and the checks would run on every step of the hot loop.
    """

    def __init__(self, num_envs: int, n: int, gamma: float, obs_shape, obs_dtype,
                 check_inputs: bool = True):
        check_builder_args(gamma, num_envs=num_envs, n=n)
        self.check_inputs = check_inputs
        self.num_envs, self.n, self.gamma = int(num_envs), int(n), float(gamma)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        window = (self.num_envs, self.n)
        self._obs = np.zeros(window + self.obs_shape, self.obs_dtype)
        self._action = np.zeros(window, np.int32)
        self._q = np.zeros(window, np.float64)  # Q(obs, action) from the actor
        # Returns accumulate in float64: a float32 sum of many clipped rewards drifts.
        self._return = np.zeros(window, np.float64)
        self._discount = np.ones(window, np.float64)  # gamma^count
        self._count = np.zeros(window, np.int64)  # rewards seen
        self._valid = np.zeros(window, bool)
        self._head = np.zeros(self.num_envs, np.int64)  # slot of the env's next entry

    @property
    def spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The replay transition spec of `NStepOutput.transitions`."""
        return dict(obs=(self.obs_shape, self.obs_dtype), action=((), np.dtype(np.int32)),
                    reward=((), np.dtype(np.float32)), discount=((), np.dtype(np.float32)),
                    next_obs=(self.obs_shape, self.obs_dtype))

    def pending(self) -> int:
        """Number of transitions started but not yet emitted, over all envs."""
        return int(np.count_nonzero(self._valid))

    def reset(self) -> None:
        """Drops every pending transition (e.g. after the env pool was reset)."""
        self._valid[:] = False
        self._head[:] = 0

    def step(self, env_ids, obs, rewards, terminated, truncated, first, q_values,
             actions) -> NStepOutput | None:
        """Adds one recv batch of B observations; returns the transitions completed by it.

        Args:
          env_ids: int `[B]` envpool `info["env_id"]`, unique within the batch.
          obs: `[B, *obs_shape]` the observations just received.
          rewards: `[B]` the rewards that led to `obs` (0 on an episode's first observation).
          terminated: bool `[B]` obs is the final observation of an episode that terminated.
          truncated: bool `[B]` obs is the final observation of an episode cut by a time limit.
          first: bool `[B]` obs is the first observation of an episode; any pending window of
            that env is dropped (defensive: envpool sends the final observation first).
          q_values: `[B, A]` the actor's Q(obs, .), also for final observations.
          actions: int `[B]` the actions the actor sends for `obs` (ignored for final ones).

        Returns:
          `NStepOutput` of the K >= 1 transitions completed, grouped by env and oldest first
          within an env; None when none completed.
        """
        if self.check_inputs:
            env_ids, obs, rewards, terminated, truncated, first, q_values, actions = \
                self._check_step(env_ids, obs, rewards, terminated, truncated, first, q_values,
                                 actions)
        batch = len(env_ids)
        final = terminated | truncated
        starts = ~final
        if batch == 0:
            return None

        n, e = self.n, env_ids
        valid = self._valid[e] & ~first[:, None]  # [B, n]
        # Every pending entry of the env sees this reward: r_{t+1} scaled by gamma^count.
        ret = self._return[e] + np.where(valid, self._discount[e] * rewards[:, None], 0.0)
        discount = np.where(valid, self._discount[e] * self.gamma, self._discount[e])
        count = self._count[e] + valid
        emit = valid & ((count >= n) | final[:, None])  # [B, n]

        output = None
        if emit.any():
            # Ring slots from the oldest possible entry (the head) to the newest, so that
            # nonzero's row-major order is per env and oldest first.
            order = (self._head[e][:, None] + np.arange(n)) % n  # [B, n]
            rows, k = np.nonzero(np.take_along_axis(emit, order, axis=1))
            slots = order[rows, k]
            envs = e[rows]
            reward = ret[rows, slots]  # [K]
            disc = np.where(terminated[rows], 0.0, discount[rows, slots])  # [K]
            bootstrap = q_values[rows].max(axis=1).astype(np.float64)  # [K]
            priorities = np.abs(reward + disc * bootstrap - self._q[envs, slots])
            transitions = dict(obs=self._obs[envs, slots], action=self._action[envs, slots],
                               reward=reward.astype(np.float32),
                               discount=disc.astype(np.float32),
                               next_obs=obs[rows].astype(self.obs_dtype, copy=False))
            output = NStepOutput(transitions, priorities.astype(np.float32),
                                 envs.astype(np.int64))

        self._valid[e] = valid & ~emit
        self._return[e] = ret
        self._discount[e] = discount
        self._count[e] = count

        # A non-final observation starts an entry in the head slot, which is free: the entry
        # written there n steps ago has seen n rewards and was emitted above.
        es = e[starts]
        head = self._head[es]
        if self._valid[es, head].any():
            raise RuntimeError("n-step window overflow: the head slot still holds an entry")
        self._obs[es, head] = obs[starts]
        self._action[es, head] = actions[starts]
        self._q[es, head] = q_values[starts, actions[starts]]
        self._return[es, head] = 0.0
        self._discount[es, head] = 1.0
        self._count[es, head] = 0
        self._valid[es, head] = True
        self._head[es] = (head + 1) % n
        return output

    def _check_step(self, env_ids, obs, rewards, terminated, truncated, first, q_values,
                    actions):
        """ValueErrors for a malformed recv batch; returns the arguments as arrays."""
        env_ids, obs = check_recv(env_ids, obs, self.num_envs, self.obs_shape, self.obs_dtype)
        batch = len(env_ids)
        rewards = check_shape("rewards", rewards, (batch,)).astype(np.float64)
        terminated = check_shape("terminated", terminated, (batch,)).astype(bool)
        truncated = check_shape("truncated", truncated, (batch,)).astype(bool)
        first = check_shape("first", first, (batch,)).astype(bool)
        q_values = np.asarray(q_values)
        if q_values.ndim != 2 or q_values.shape[0] != batch or q_values.shape[1] < 1:
            raise ValueError(f"q_values must have shape [B={batch}, num_actions], got "
                             f"{q_values.shape}")
        actions = check_shape("actions", actions, (batch,))
        final = terminated | truncated
        starts = ~final
        if not np.issubdtype(actions.dtype, np.integer) or np.any(
                (actions[starts] < 0) | (actions[starts] >= q_values.shape[1])):
            raise ValueError(f"actions must be integers in [0, {q_values.shape[1]}) for "
                             f"non-final observations, got {actions}")
        return env_ids, obs, rewards, terminated, truncated, first, q_values, actions
