"""The Ape-X DQN loss: n-step double Q-learning with importance weights.

Horgan et al. 2018 (arXiv:1803.00933), Sec. 3.1 and Appendix: the learner minimises
l_t = 1/2 (G_t - q(S_t, A_t; theta))^2 with the n-step double-Q target
G_t = R_t^(n) + gamma_t^(n) q(S_{t+n}, argmax_a q(S_{t+n}, a; theta); theta^-) (van Hasselt
et al. 2016), each term weighted by its prioritized-replay importance weight (Schaul et al. 2016),
and sends |G_t - q(S_t, A_t)| back as the transition's new priority.
"""

import jax
import jax.numpy as jnp

from agents.apex.config import LOSSES


def double_q_td_errors(q_tm1: jax.Array, a_tm1: jax.Array, r_t: jax.Array,
                       discount_t: jax.Array, q_t_online: jax.Array,
                       q_t_target: jax.Array) -> jax.Array:
    """n-step double-Q TD errors `G_t - q(S_t, A_t)`, the target held constant.

    Args:
      q_tm1: `[B, A]` online Q-values of the first state.
      a_tm1: `[B]` int actions taken there.
      r_t: `[B]` n-step discounted rewards R^(n).
      discount_t: `[B]` gamma^n, 0 if the episode terminated within the n steps, gamma^m if it
        was truncated after m steps (the time limit bootstraps).
      q_t_online: `[B, A]` online Q-values of the bootstrap state, to pick the action.
      q_t_target: `[B, A]` target-network Q-values of the bootstrap state, to value it.

    Returns:
      `[B]` TD errors.
    """
    best_t = jnp.argmax(q_t_online, axis=-1)  # [B]
    bootstrap = jnp.take_along_axis(q_t_target, best_t[:, None], axis=-1)[:, 0]  # [B]
    target = jax.lax.stop_gradient(r_t + discount_t * bootstrap)  # [B]
    q_taken = jnp.take_along_axis(q_tm1, a_tm1[:, None], axis=-1)[:, 0]  # [B]
    return target - q_taken


def apex_loss(td_errors: jax.Array, weights: jax.Array, loss: str = "squared",
              huber_delta: float = 1.0) -> jax.Array:
    """Importance-weighted mean of 1/2 td^2 (the paper's) or of the Huber loss.

    Args:
      td_errors: `[B]`.
      weights: `[B]` importance weights.
      loss: "squared" | "huber".
      huber_delta: where the Huber loss turns from quadratic to linear.

    Returns:
      `[]` the loss.
    """
    if loss == "squared":
        per_item = 0.5 * jnp.square(td_errors)
    elif loss == "huber":
        abs_td = jnp.abs(td_errors)
        quadratic = jnp.minimum(abs_td, huber_delta)
        per_item = 0.5 * jnp.square(quadratic) + huber_delta * (abs_td - quadratic)
    else:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    return jnp.mean(weights * per_item)  # []
