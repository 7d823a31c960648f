"""The IMPALA network: a torso from `networks` and a policy-logits + baseline head."""

import flax.linen as nn
import jax

import networks


class PolicyValueNetwork(nn.Module):
    """(pi logits, V) for observations with any leading axes, e.g. the learner's `[T, B, ...]`.

    Attributes:
      num_actions: number of discrete actions A.
      torso: a `networks.TORSOS` name (the paper: impala_shallow or impala_resnet).
      torso_kwargs: keyword arguments of the torso (hidden sizes, norm, num_groups).
      stack_axis_first: observations arrive as envpool stacks them, `[..., 4, 84, 84]`; moved
        channels-last here, inside the jitted function.
    """

    num_actions: int
    torso: str = "impala_resnet"
    torso_kwargs: tuple[tuple[str, object], ...] = ()
    stack_axis_first: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Returns logits `[..., A]` and values `[...]` for observations `[..., *obs_shape]`."""
        features = networks.torso_features(obs, self.torso, self.torso_kwargs,
                                           self.stack_axis_first)
        return networks.PolicyValueHead(self.num_actions)(features)
