"""The IMPALA actor-critic loss with V-trace targets.

Espeholt et al. 2018 (arXiv:1802.01561), Sec. 4.2: the value function regresses the V-trace
targets v_s of eq. (1), the policy follows
rho_s grad log pi(a_s|x_s) (r_s + gamma v_{s+1} - V(x_s)), and an entropy bonus keeps it from
collapsing early. The three terms are weighted and summed as in
the paper's reference implementation (scalable_agent):

    loss = pg_loss + baseline_cost * baseline_loss + entropy_cost * entropy_loss,
    pg_loss       = -sum_s m_s log pi(a_s|x_s) A_s,       A_s the clipped pg advantage (constant),
    baseline_loss = 1/2 sum_s m_s (v_s - V(x_s))^2,       v_s the V-trace target (constant),
    entropy_loss  = -sum_s m_s H(pi(.|x_s)),              so more entropy lowers the loss.

`correction` selects how the policy lag is treated, the four variants the paper compares in
Sec. 5.2.2 and Table 2 (their "no-correction", "epsilon-correction", "1-step importance
sampling" and "V-trace"):

    vtrace    targets and advantages of eq. (1) and Sec. 4.2 (clipped ratios pi/mu).
    none      every ratio taken as 1: the targets are on-policy n-step (lambda) returns of the
              behaviour data, A_s = r_s + gamma v_{s+1} - V(x_s).
    epsilon   as none, with log(pi(a_s|x_s) + 1e-6) in the policy gradient, which keeps the
              log-probability of an action the learner has made unlikely from diverging
              (Babaeizadeh et al. 2017, as the paper describes it).
    is_1step  targets as none; the policy gradient's advantage multiplied by the unclipped ratio
              pi(a_s|x_s) / mu(a_s|x_s) of its own step.
"""

import math

import jax
import jax.numpy as jnp

from ops.vtrace import action_log_probs, vtrace

REDUCTIONS = ("sum", "mean")
CORRECTIONS = ("vtrace", "none", "epsilon", "is_1step")
EPSILON_CORRECTION = 1e-6  # the paper's epsilon (Sec. 5.2.2)


def _check_shapes(target_logits, values, actions, behaviour_logits, rewards, discounts,
                  episode_ends, masks) -> None:
    if jnp.ndim(target_logits) < 2:
        raise ValueError(
            f"target_logits must be [T, ..., num_actions] (rank >= 2), got shape "
            f"{jnp.shape(target_logits)}")
    step_shape = jnp.shape(target_logits)[:-1]  # [T, B...]
    T = step_shape[0]
    if T < 1:
        raise ValueError("target_logits must hold at least one step (T >= 1)")
    if jnp.shape(behaviour_logits) != jnp.shape(target_logits):
        raise ValueError(
            f"behaviour_logits has shape {jnp.shape(behaviour_logits)} but target_logits has "
            f"shape {jnp.shape(target_logits)}; both must be [T, B..., num_actions]")
    expected_values = (T + 1,) + step_shape[1:]
    if jnp.shape(values) != expected_values:
        raise ValueError(
            f"values has shape {jnp.shape(values)}; expected [T+1, B...] = {expected_values} "
            f"(V at obs[0..T], the last the bootstrap) for target_logits of shape "
            f"{jnp.shape(target_logits)}")
    for name, x in (("actions", actions), ("rewards", rewards), ("discounts", discounts),
                    ("episode_ends", episode_ends), ("masks", masks)):
        if jnp.shape(x) != step_shape:
            raise ValueError(
                f"{name} has shape {jnp.shape(x)}; expected [T, B...] = {step_shape}, the "
                f"shape of target_logits without its action axis")
    if not jnp.issubdtype(jnp.asarray(actions).dtype, jnp.integer):
        raise ValueError(f"actions must be integers, got dtype {jnp.asarray(actions).dtype}")
    ends_dtype = jnp.asarray(episode_ends).dtype
    if not (ends_dtype == jnp.bool_ or jnp.issubdtype(ends_dtype, jnp.integer)):
        raise ValueError(f"episode_ends must be bool, got dtype {ends_dtype}")


def impala_loss(
    target_logits: jax.Array,
    values: jax.Array,
    actions: jax.Array,
    behaviour_logits: jax.Array,
    rewards: jax.Array,
    discounts: jax.Array,
    episode_ends: jax.Array,
    masks: jax.Array,
    *,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.01,
    lambda_: float = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_c_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
    reduction: str = "sum",
    correction: str = "vtrace",
    epsilon: float = EPSILON_CORRECTION,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The V-trace actor-critic loss of IMPALA (Espeholt et al. 2018, eq. 1 and Sec. 4.2).

    Targets and advantages come from `ops.vtrace.vtrace` (on the ratios of the logits' action
    log-probabilities) and are constants; the
    gradient reaches the policy through log pi(a_s|x_s) and H(pi(.|x_s)), and the value function
    through V(x_s) for s < T (the bootstrap `values[T]` gets no gradient).

    Reduction: "sum" (the default, as the paper's reference implementation, whose learning rate
    0.0006 pairs with sums over T*B = 20*32 steps) or "mean", which divides each term by the
    number of real steps, sum(masks) (0 real steps give a zero loss, not NaN).

    Pseudo steps (`masks == 0`, e.g. envpool's reset step after an episode end, whose action is
    ignored) are excluded from every term, and the trace is not carried into them: a real step
    followed by a pseudo step bootstraps from V at the pseudo step's observation (with envpool
    that is the final observation of the episode, so a truncation bootstraps from the state it
    was cut at). Nothing else of a pseudo step (its reward, logits, action, discount) reaches
    the loss.

    Args:
      target_logits: `[T, B..., A]` pi's logits from the learner's network at obs[0..T-1].
      values: `[T+1, B...]` the learner's V at obs[0..T]; `values[T]` is the bootstrap.
      actions: `[T, B...]` int actions taken by the actor.
      behaviour_logits: `[T, B..., A]` mu's logits, recorded by the actor.
      rewards: `[T, B...]` rewards r_t.
      discounts: `[T, B...]` gamma * (1 - terminated_t); 0 on pseudo steps.
      episode_ends: `[T, B...]` bool, step t ends an episode (terminated or truncated); the
        trace does not run across it, while a truncation (discount > 0) still bootstraps.
      masks: `[T, B...]` float, 1 for a real step and 0 for a pseudo step.
      baseline_cost: weight of the baseline (value) loss.
      entropy_cost: weight of the entropy bonus; larger values favour higher entropy.
      lambda_: V-trace's trace mixing (Remark 2); 1 is the paper's Atari setting.
      clip_rho_threshold: rho_bar, the clip of the ratios in the targets.
      clip_c_threshold: c_bar, the clip of the trace coefficients (<= rho_bar).
      clip_pg_rho_threshold: the clip of the ratio in the policy-gradient advantage.
      reduction: "sum" | "mean" over the real steps.
      correction: "vtrace" | "none" | "epsilon" | "is_1step" (module docstring); the clip
        thresholds apply to "vtrace" only.
      epsilon: the epsilon of correction="epsilon", > 0. Its gradient with respect to the
        logits is pi/(pi + epsilon) times the uncorrected one, so a step whose action the
        learner gives probability pi(a_s|x_s) <= epsilon loses half or more of its policy
        gradient.

    Returns:
      `(loss, metrics)`: the scalar loss and a dict of scalars: `loss`, `pg_loss`,
      `baseline_loss` (before `baseline_cost`), `entropy_loss` (before `entropy_cost`), each with
      `reduction` applied; and per real step means: `entropy`, `pg_advantage_abs`, `rho`
      (the unclipped ratio pi/mu), `rho_clipped_fraction` (the fraction with rho > rho_bar),
      `behaviour_kl` (KL(mu || pi) per step, the size of the policy lag), `unlikely_fraction`
      (the fraction with pi(a_s|x_s) < epsilon, for every correction); and per unroll,
      `trace_product`: the mean over the batch of prod_t c_t over the unroll's real steps,
      c_t = lambda min(c_bar, rho_t), i.e. how much of an unroll V-trace's traces carry (a
      diagnostic of the data, reported for every correction with the configured c_bar).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    _check_shapes(target_logits, values, actions, behaviour_logits, rewards, discounts,
                  episode_ends, masks)
    masks = jnp.asarray(masks, values.dtype)
    # Cut the trace before a pseudo step too, so that a caller that marks a padding step with
    # masks alone (no episode end before it) does not leak its reward or ratio into real targets.
    next_is_pseudo = jnp.concatenate(
        [masks[1:] == 0, jnp.zeros_like(masks[:1], dtype=bool)])  # [T, B...]
    trace_cut = jnp.asarray(episode_ends, bool) | next_is_pseudo  # [T, B...]

    target_log_probs = action_log_probs(target_logits, actions)  # [T, B...]
    log_rhos = jax.lax.stop_gradient(
        target_log_probs - action_log_probs(behaviour_logits, actions))  # [T, B...]
    rhos = jnp.exp(log_rhos)  # [T, B...] no gradient through the ratios
    if correction == "vtrace":
        ratios, thresholds = rhos, (clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold)
    else:  # every ratio 1, unclipped: the targets of on-policy data
        ratios, thresholds = jnp.ones_like(rhos), (math.inf, math.inf, math.inf)
    out = vtrace(values[:-1], values[1:], rewards, discounts, ratios, episode_end_t=trace_cut,
                 lambda_=lambda_, clip_rho_threshold=thresholds[0],
                 clip_c_threshold=thresholds[1], clip_pg_rho_threshold=thresholds[2])
    pg_advantages = out.pg_advantages * rhos if correction == "is_1step" else out.pg_advantages
    if correction == "epsilon":
        pg_log_probs = jnp.log(jnp.exp(target_log_probs) + epsilon)  # [T, B...]
    else:
        pg_log_probs = target_log_probs

    log_probs = jax.nn.log_softmax(target_logits)  # [T, B..., A]
    entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)  # [T, B...]

    num_steps = jnp.sum(masks)  # []
    safe_num_steps = jnp.where(num_steps > 0, num_steps, 1.0)  # []
    scale = 1.0 if reduction == "sum" else 1.0 / safe_num_steps

    pg_loss = -jnp.sum(masks * pg_log_probs * pg_advantages) * scale  # []
    baseline_loss = 0.5 * jnp.sum(masks * jnp.square(out.errors)) * scale  # []
    entropy_loss = -jnp.sum(masks * entropy) * scale  # []
    loss = pg_loss + baseline_cost * baseline_loss + entropy_cost * entropy_loss  # []

    def step_mean(x):
        return jnp.sum(masks * jax.lax.stop_gradient(x)) / safe_num_steps  # []

    behaviour_log_probs = jax.nn.log_softmax(behaviour_logits)  # [T, B..., A]
    behaviour_kl = jnp.sum(jnp.exp(behaviour_log_probs) * (behaviour_log_probs - log_probs),
                           axis=-1)  # [T, B...]
    # Pseudo steps carry the trace unchanged (c = 1): they hold no action of the behaviour.
    traces = jnp.where(masks > 0, lambda_ * jnp.minimum(clip_c_threshold, rhos), 1.0)
    trace_product = jnp.mean(jnp.prod(traces, axis=0))  # []

    metrics = dict(
        loss=loss,
        pg_loss=pg_loss,
        baseline_loss=baseline_loss,
        entropy_loss=entropy_loss,
        entropy=step_mean(entropy),
        pg_advantage_abs=step_mean(jnp.abs(pg_advantages)),
        rho=step_mean(rhos),
        rho_clipped_fraction=step_mean((rhos > clip_rho_threshold).astype(values.dtype)),
        behaviour_kl=step_mean(behaviour_kl),
        unlikely_fraction=step_mean((target_log_probs < math.log(epsilon)).astype(values.dtype)),
        trace_product=jax.lax.stop_gradient(trace_product),
    )
    return loss, metrics
