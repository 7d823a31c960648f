"""Heads on torso features `[..., F]`: plain Q, dueling Q, and policy logits + baseline.

Heads are dense layers only, so any leading batch axes (`[B]`, `[T, B]`) pass through.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp


def _check_positive(owner: str, **values: int) -> None:
    for key, value in values.items():
        if value < 1:
            raise ValueError(f"{owner}: {key} must be >= 1, got {value}.")


class QHead(nn.Module):
    """Linear action values, as in DQN (Mnih et al. 2015, Nature): `Q = W x + b`.

    Attributes:
      num_actions: number of discrete actions A.
    """
    num_actions: int

    def __post_init__(self) -> None:
        _check_positive("QHead", num_actions=self.num_actions)
        super().__post_init__()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Action values.

        Args:
          x: features `[..., F]`.

        Returns:
          q values `[..., A]`.
        """
        return nn.Dense(self.num_actions, name="q")(x)


class DuelingQHead(nn.Module):
    """Dueling action values (Wang et al. 2016, arXiv:1511.06581, eq. 9).

    `Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')`. Subtracting the mean advantage makes V and
    A identifiable (mean_a Q = V) while leaving the greedy action unchanged.

    Each stream is an MLP with `hidden_sizes` (ReLU after each hidden layer) and a linear
    output. The default `()` makes both streams linear in the torso features, so the torso's
    dense layer is shared. The paper's Atari setting (Sec. 4.2) is instead one 512-unit layer
    per stream right after the conv layers: `hidden_sizes=(512,)` on
    `NatureTorso(hidden_size=None)`.

    Attributes:
      num_actions: number of discrete actions A.
      hidden_sizes: hidden layer widths of each stream (value and advantage alike).
    """
    num_actions: int
    hidden_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_positive("DuelingQHead", num_actions=self.num_actions,
                        **{f"hidden_sizes[{i}]": h for i, h in enumerate(self.hidden_sizes)})
        super().__post_init__()

    def setup(self) -> None:
        self.value_hidden = [nn.Dense(h) for h in self.hidden_sizes]
        self.value_out = nn.Dense(1)
        self.advantage_hidden = [nn.Dense(h) for h in self.hidden_sizes]
        self.advantage_out = nn.Dense(self.num_actions)

    def streams(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The two streams before they are combined.

        Args:
          x: features `[..., F]`.

        Returns:
          (value `[...]`, advantage `[..., A]`), the advantage not yet centred.
        """
        v, a = x, x
        for layer in self.value_hidden:
            v = nn.relu(layer(v))
        for layer in self.advantage_hidden:
            a = nn.relu(layer(a))
        value = self.value_out(v)[..., 0]  # [...]
        return value, self.advantage_out(a)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Dueling action values, eq. 9.

        Args:
          x: features `[..., F]`.

        Returns:
          q values `[..., A]`.
        """
        value, advantage = self.streams(x)  # [...], [..., A]
        centred = advantage - jnp.mean(advantage, axis=-1, keepdims=True)  # [..., A]
        return jnp.expand_dims(value, -1) + centred


class PolicyValueHead(nn.Module):
    """Policy logits and a state-value baseline (Espeholt et al. 2018, arXiv:1802.01561).

    As in IMPALA's Fig. 3: two linear outputs on the shared torso features.

    Attributes:
      num_actions: number of discrete actions A.
    """
    num_actions: int

    def __post_init__(self) -> None:
        _check_positive("PolicyValueHead", num_actions=self.num_actions)
        super().__post_init__()

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Policy logits and baseline.

        Args:
          x: features `[..., F]`.

        Returns:
          (policy logits `[..., A]`, baseline value `[...]`, one scalar per sample).
        """
        logits = nn.Dense(self.num_actions, name="policy")(x)  # [..., A]
        value = nn.Dense(1, name="baseline")(x)[..., 0]  # [...]
        return logits, value
