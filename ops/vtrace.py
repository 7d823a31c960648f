"""V-trace off-policy actor-critic targets (Espeholt et al. 2018, arXiv:1802.01561).

All functions are pure, time-major (`[T, ...]`) and work over any trailing batch shape: `[T]`,
`[T, B]` and `[T, B, K]` need no vmap. Names follow Sutton & Barto: `v_tm1[t]` is V(x_t), the value
of the state an action was taken in, and `v_t[t]` is V(x_{t+1}), the value of the state it led to,
so the bootstrap value is `v_t[-1]`. `discount_t[t]` is gamma * (1 - terminated_t).

Carrying `v_t` for every step (not only the bootstrap) lets a time-limit truncation inside an
unroll bootstrap from the value of the state the episode was cut at, while the next row already
holds the first state of a new episode; pass `episode_end_t` so the trace does not run across it.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

ArrayLike = jax.Array | float


class VTraceOutput(NamedTuple):
    """V-trace targets and advantages, each `[T, ...]`.

    Attributes:
      vs: the v-trace targets v_s of eq. (1).
      errors: `vs - v_tm1`, the value-function error to regress (gradient flows to `v_tm1`).
      pg_advantages: `rho_pg_s * (r_s + discount_s * v_{s+1} - V(x_s))`, Sec. 4.2 of the paper.
    """

    vs: jax.Array
    errors: jax.Array
    pg_advantages: jax.Array


class VTraceFromLogitsOutput(NamedTuple):
    """`VTraceOutput` plus the log-probabilities it was computed from, each `[T, ...]`."""

    vs: jax.Array
    errors: jax.Array
    pg_advantages: jax.Array
    log_rhos: jax.Array
    behaviour_log_probs: jax.Array
    target_log_probs: jax.Array


def _check_threshold(name: str, value: float) -> None:
    if isinstance(value, (int, float)) and not value >= 0:  # `not >=` also rejects NaN
        raise ValueError(f"{name} must be >= 0 (float('inf') disables clipping), got {value}")


def _check_inputs(values: dict[str, jax.Array], lambda_, rho_bar, c_bar, pg_rho_bar) -> None:
    shape = None
    for name, x in values.items():
        if x is None:
            continue
        if jnp.ndim(x) < 1:
            raise ValueError(f"{name} must be time-major with rank >= 1 ([T, ...]), got a scalar")
        if shape is None:
            first, shape = name, jnp.shape(x)
        elif jnp.shape(x) != shape:
            raise ValueError(
                f"{name} has shape {jnp.shape(x)} but {first} has shape {shape}; all per-step "
                "inputs must share one [T, ...] shape")
    lambda_shape = jnp.shape(lambda_)
    if lambda_shape not in ((), shape[:1], shape):
        raise ValueError(
            f"lambda_ must be a scalar, per-step [T]={shape[:1]} or per-element {shape}, "
            f"got shape {lambda_shape}")
    _check_threshold("clip_rho_threshold", rho_bar)
    _check_threshold("clip_c_threshold", c_bar)
    _check_threshold("clip_pg_rho_threshold", pg_rho_bar)
    if isinstance(rho_bar, (int, float)) and isinstance(c_bar, (int, float)) and c_bar > rho_bar:
        raise ValueError(
            f"clip_c_threshold (c_bar={c_bar}) must be <= clip_rho_threshold "
            f"(rho_bar={rho_bar}); the paper's analysis assumes rho_bar >= c_bar")


def _per_step(x: ArrayLike, like: jax.Array) -> jax.Array:
    """Broadcasts a scalar, `[T]` or `[T, ...]` value to the shape of `like`."""
    x = jnp.asarray(x, like.dtype)
    if x.ndim == 1 and like.ndim > 1:
        x = x.reshape(x.shape + (1,) * (like.ndim - 1))  # [T, 1, ...]
    return jnp.broadcast_to(x, like.shape)


def vtrace(
    v_tm1: jax.Array,
    v_t: jax.Array,
    r_t: jax.Array,
    discount_t: jax.Array,
    rho_tm1: jax.Array,
    *,
    lambda_: ArrayLike = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_c_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
    stop_target_gradients: bool = True,
    episode_end_t: jax.Array | None = None,
) -> VTraceOutput:
    """V-trace targets and policy-gradient advantages from importance ratios.

    Eq. (1) of Espeholt et al. 2018, with per-step discounts and Remark 2's lambda:

        v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} discount_i c_i) delta_t,
        delta_t = rho_t (r_t + discount_t V(x_{t+1}) - V(x_t)),
        rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),
        c_i = lambda_i * min(c_bar, pi(a_i|x_i) / mu(a_i|x_i)),

    computed by the equivalent backward recursion
    `v_s - V(x_s) = delta_s + discount_s c_s (v_{s+1} - V(x_{s+1}))`. The advantage of Sec. 4.2 is
    `min(pg_rho_bar, pi/mu)_s * (r_s + discount_s * v_{s+1} - V(x_s))`, where v_{s+1} is the target
    of the state after step s (the bootstrap value `v_t[-1]` after the last step).

    Args:
      v_tm1: `[T, ...]` V(x_t), values of the states actions were taken in.
      v_t: `[T, ...]` V(x_{t+1}), values of the states they led to.
      r_t: `[T, ...]` rewards.
      discount_t: `[T, ...]` gamma * (1 - terminated); 0 stops the trace and the bootstrap.
      rho_tm1: `[T, ...]` importance ratios pi(a_t|x_t) / mu(a_t|x_t) (not their logs).
      lambda_: trace mixing parameter, a scalar, `[T]` or `[T, ...]`; 0 gives one-step targets.
      clip_rho_threshold: rho_bar, the clip of the rho_t in delta_t (fixes the target's bias).
      clip_c_threshold: c_bar, the clip of the trace coefficients c_i (controls its variance);
        must not exceed rho_bar.
      clip_pg_rho_threshold: the clip of the ratio in the policy-gradient advantage.
      stop_target_gradients: treat `vs` and `pg_advantages` as constants.
      episode_end_t: optional bool `[T, ...]`, True where step t ends an episode by termination or
        truncation. The trace is not carried across such a step even when it bootstraps
        (truncation); when omitted, only `discount_t == 0` stops the trace.

    Returns:
      `VTraceOutput(vs, errors, pg_advantages)`, each `[T, ...]`.
    """
    _check_inputs(
        dict(v_tm1=v_tm1, v_t=v_t, r_t=r_t, discount_t=discount_t, rho_tm1=rho_tm1,
             episode_end_t=episode_end_t),
        lambda_, clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold)
    lambda_ = _per_step(lambda_, v_tm1)
    # The trace coefficient multiplies the next step's correction; stopping it at episode ends
    # keeps a truncated step from borrowing the next episode's correction.
    continue_t = (jnp.ones_like(v_tm1) if episode_end_t is None
                  else 1.0 - episode_end_t.astype(v_tm1.dtype))  # [T, ...]
    clipped_rho = jnp.minimum(clip_rho_threshold, rho_tm1)
    c_tm1 = lambda_ * jnp.minimum(clip_c_threshold, rho_tm1)
    delta = clipped_rho * (r_t + discount_t * v_t - v_tm1)  # [T, ...]
    trace_t = discount_t * c_tm1 * continue_t  # [T, ...]

    def backward(correction_tp1, step):
        delta_s, trace_s = step
        correction_s = delta_s + trace_s * correction_tp1
        return correction_s, correction_s

    _, corrections = jax.lax.scan(
        backward, jnp.zeros_like(v_tm1[0]), (delta, trace_t), reverse=True)  # [T, ...]
    vs = v_tm1 + corrections

    # Target of the state after each step: V(x_{s+1}) plus its correction when the trace goes on.
    next_corrections = jnp.concatenate(
        [corrections[1:], jnp.zeros_like(corrections[:1])])  # [T, ...]
    vs_next = v_t + continue_t * next_corrections
    clipped_pg_rho = jnp.minimum(clip_pg_rho_threshold, rho_tm1)
    pg_advantages = clipped_pg_rho * (r_t + discount_t * vs_next - v_tm1)

    if stop_target_gradients:
        vs = jax.lax.stop_gradient(vs)
        pg_advantages = jax.lax.stop_gradient(pg_advantages)
    return VTraceOutput(vs=vs, errors=vs - v_tm1, pg_advantages=pg_advantages)


def action_log_probs(logits: jax.Array, actions: jax.Array) -> jax.Array:
    """log softmax(logits)[action] for `[..., A]` logits and `[...]` integer actions."""
    log_probs = jax.nn.log_softmax(logits)  # [..., A]
    return jnp.take_along_axis(log_probs, actions[..., None], axis=-1)[..., 0]  # [...]


def vtrace_from_logits(
    behaviour_logits: jax.Array,
    target_logits: jax.Array,
    actions: jax.Array,
    v_tm1: jax.Array,
    v_t: jax.Array,
    r_t: jax.Array,
    discount_t: jax.Array,
    **kwargs,
) -> VTraceFromLogitsOutput:
    """V-trace for categorical policies given their logits.

    The ratio pi(a|x) / mu(a|x) is formed in log space for stability. It is treated as a constant
    (no gradient flows through the importance weights), as in the paper's estimator; the policy
    gradient term uses `target_log_probs` instead.

    Args:
      behaviour_logits: `[T, ..., A]` logits of mu, the policy that acted.
      target_logits: `[T, ..., A]` logits of pi, the policy being learned.
      actions: `[T, ...]` integer actions taken.
      v_tm1, v_t, r_t, discount_t: as in `vtrace`, `[T, ...]`.
      **kwargs: keyword arguments of `vtrace` (lambda_, clip thresholds, ...).

    Returns:
      `VTraceFromLogitsOutput`: `vtrace`'s outputs plus `log_rhos`, `behaviour_log_probs` and
      `target_log_probs`, each `[T, ...]`.
    """
    if jnp.shape(behaviour_logits) != jnp.shape(target_logits):
        raise ValueError(
            f"behaviour_logits has shape {jnp.shape(behaviour_logits)} but target_logits has "
            f"shape {jnp.shape(target_logits)}; both must be [T, ..., num_actions]")
    if jnp.shape(behaviour_logits)[:-1] != jnp.shape(actions):
        raise ValueError(
            f"actions has shape {jnp.shape(actions)}; expected the logits' shape without the "
            f"action axis, {jnp.shape(behaviour_logits)[:-1]}")
    if not jnp.issubdtype(jnp.asarray(actions).dtype, jnp.integer):
        raise ValueError(f"actions must be integers, got dtype {jnp.asarray(actions).dtype}")
    behaviour_log_probs = action_log_probs(behaviour_logits, actions)
    target_log_probs = action_log_probs(target_logits, actions)
    log_rhos = jax.lax.stop_gradient(target_log_probs - behaviour_log_probs)
    out = vtrace(v_tm1, v_t, r_t, discount_t, jnp.exp(log_rhos), **kwargs)
    return VTraceFromLogitsOutput(*out, log_rhos=log_rhos,
                                  behaviour_log_probs=behaviour_log_probs,
                                  target_log_probs=target_log_probs)
