"""The Ape-X Q-network: a torso from `networks` and a dueling (or plain) Q head."""

import flax.linen as nn
import jax

import networks


class QNetwork(nn.Module):
    """Q(s, .) for a batch of observations with any leading axes.

    Attributes:
      num_actions: number of discrete actions A.
      torso: a `networks.TORSOS` name ("mlp" for vectors, "nature" for Atari frames, ...).
      torso_kwargs: keyword arguments of the torso (hidden sizes, norm, num_groups).
      dueling: dueling head (Wang et al. 2016) as in Ape-X, else a linear Q head.
      head_hidden_sizes: hidden layers of each dueling stream.
      stack_axis_first: observations arrive as envpool stacks them, `[..., 4, 84, 84]`; moved
        channels-last here, inside the jitted function, so actors and replay keep the native
        layout and no host-side transpose is ever made.
    """

    num_actions: int
    torso: str = "mlp"
    torso_kwargs: tuple[tuple[str, object], ...] = ()
    dueling: bool = True
    head_hidden_sizes: tuple[int, ...] = ()
    stack_axis_first: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        """Returns Q-values `[..., A]` float32 for observations `[..., *obs_shape]`."""
        features = networks.torso_features(obs, self.torso, self.torso_kwargs,
                                           self.stack_axis_first)
        if self.dueling:
            return networks.DuelingQHead(self.num_actions, self.head_hidden_sizes)(features)
        return networks.QHead(self.num_actions)(features)
