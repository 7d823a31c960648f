"""Observation torsos: an MLP for vectors, the Nature DQN and IMPALA shallow CNNs for frames.

Every torso maps observations with any leading batch axes to features `[..., F]`: actors'
`[B, 84, 84, 4]` and the IMPALA learner's `[T, B, 84, 84, 4]` go through the same module.
Conv torsos take channels-last (NHWC) frames, so envpool's `(N, 4, 84, 84)` must be transposed
by the caller; uint8 frames are scaled by 1/255 inside, float frames are taken as already in
[0, 1] (see `_conv_utils.frames_to_float`). Every conv torso takes `norm="none" | "group" |
"layer"`, applied to the output of every conv (see `_conv_utils`). The deep IMPALA ResNet
lives in `impala_resnet.py`.
"""
from collections.abc import Callable
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks import _conv_utils
from networks.impala_resnet import ImpalaResNetTorso

TORSOS = ("mlp", "nature", "impala_shallow", "impala_resnet")


class MLPTorso(nn.Module):
    """Fully connected torso for vector observations (e.g. CartPole).

    Attributes:
      hidden_sizes: width of each dense layer.
      activation: nonlinearity after every layer, the last included (these are features for a
        head, not outputs).
    """
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: Callable[[jax.Array], jax.Array] = nn.relu

    def __post_init__(self) -> None:
        if not self.hidden_sizes or any(h < 1 for h in self.hidden_sizes):
            raise ValueError(f"MLPTorso: hidden_sizes must be non-empty and positive, "
                             f"got {self.hidden_sizes}.")
        super().__post_init__()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Encodes vector observations.

        Args:
          x: observations `[..., D]`, any float or integer dtype.

        Returns:
          features `[..., hidden_sizes[-1]]` float32.
        """
        x = x.astype(jnp.float32)
        for i, size in enumerate(self.hidden_sizes):
            x = self.activation(nn.Dense(size, name=f"dense_{i}")(x))
        return x


class _PlainConvTorso(nn.Module):
    """Convs with VALID padding, each conv -> [norm] -> ReLU, then flatten and dense ReLU.

    Subclasses set CONVS, (features, kernel, stride) for each conv, and their paper defaults.
    """
    hidden_size: int | None = 512
    norm: str = "none"
    num_groups: int = 32

    CONVS: ClassVar[tuple[tuple[int, int, int], ...]] = ()

    def __post_init__(self) -> None:
        _conv_utils.check_conv_torso(type(self).__name__, self.norm, self.num_groups,
                                     tuple(c[0] for c in self.CONVS), self.hidden_size)
        super().__post_init__()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Encodes frames.

        Args:
          x: frames `[..., H, W, C]` (84x84x4 in the papers), uint8 or float in [0, 1].

        Returns:
          features `[..., hidden_size]` float32; `[..., h * w * c]` if hidden_size is None.
        """
        x, batch_shape = _conv_utils.frames_to_float(x, type(self).__name__)  # [N, H, W, C]
        for i, (features, kernel, stride) in enumerate(self.CONVS):
            x = _conv_utils.ValidConv(features, kernel, stride, name=f"conv_{i}")(x)
            norm = _conv_utils.norm_layer(self.norm, self.num_groups, f"norm_{i}")
            x = nn.relu(x if norm is None else norm(x))
        return _conv_utils.dense_out(x, batch_shape, self.hidden_size)


class NatureTorso(_PlainConvTorso):
    """The DQN conv torso of Mnih et al. 2015 ("Human-level control through deep RL", Methods).

    conv 32 8x8/4, conv 64 4x4/2, conv 64 3x3/1 (VALID padding, each ReLU), then dense 512
    ReLU: 84 -> 20 -> 9 -> 7, so 7 * 7 * 64 = 3136 features feed the dense layer.

    Attributes:
      hidden_size: width of the final dense layer (512 in the paper); None drops it and returns
        the 3136 flat conv features, e.g. for the dueling network of Wang et al. 2016, whose
        two streams each start with their own 512-unit layer.
      norm: "none" | "group" | "layer", after each conv, before its ReLU.
      num_groups: groups for norm="group"; must divide 32 and 64 (e.g. 8, 16, 32).
    """
    hidden_size: int | None = 512
    CONVS: ClassVar[tuple[tuple[int, int, int], ...]] = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


class ImpalaShallowTorso(_PlainConvTorso):
    """IMPALA's "shallow" torso (Espeholt et al. 2018, arXiv:1802.01561, Fig. 3 left).

    conv 16 8x8/4, conv 32 4x4/2 (each ReLU), dense 256 ReLU. The figure gives no padding;
    VALID follows the Nature network it shrinks: 84 -> 20 -> 9, 9 * 9 * 32 = 2592 features.
    The figure's LSTM, if wanted, belongs to the agent, not the torso.

    Attributes:
      hidden_size: width of the final dense layer (256 in the paper); None returns the flat
        conv features.
      norm: "none" | "group" | "layer", after each conv, before its ReLU.
      num_groups: groups for norm="group"; must divide 16 and 32 (e.g. 8 or 16).
    """
    hidden_size: int | None = 256
    CONVS: ClassVar[tuple[tuple[int, int, int], ...]] = ((16, 8, 4), (32, 4, 2))


_TORSO_CLASSES = {
    "mlp": MLPTorso,
    "nature": NatureTorso,
    "impala_shallow": ImpalaShallowTorso,
    "impala_resnet": ImpalaResNetTorso,
}


def make_torso(name: str, **kwargs) -> nn.Module:
    """Builds a torso by name, e.g. from a flag.

    Args:
      name: "mlp" | "nature" | "impala_shallow" | "impala_resnet".
      **kwargs: the torso's attributes (e.g. norm="group", num_groups=8).

    Returns:
      The unbound Flax module.
    """
    if name not in _TORSO_CLASSES:
        raise ValueError(f"make_torso: name must be one of {TORSOS}, got {name!r}.")
    return _TORSO_CLASSES[name](**kwargs)


def torso_features(obs: jax.Array, name: str, kwargs: tuple[tuple[str, object], ...] = (),
                   stack_axis_first: bool = False) -> jax.Array:
    """Features `[..., F]` of the torso `name` for observations as the environment gives them.

    Call it inside a parent module's `nn.compact` method: the torso becomes the parent's
    submodule, named as if the parent had built it itself.

    Args:
      obs: observations `[..., *obs_shape]`; envpool's Atari stacks are `[..., 4, 84, 84]`.
      name: a `TORSOS` name.
      kwargs: the torso's attributes as `(name, value)` pairs (hashable, for a module field).
      stack_axis_first: the frame stack is axis -3 (envpool's layout); it is moved last, as
        the conv torsos want, here inside the jitted function, so actors and replay keep the
        native layout and no host-side transpose is ever made.
    """
    if stack_axis_first:
        obs = jnp.moveaxis(obs, -3, -1)  # [..., 4, H, W] -> [..., H, W, 4]
    return make_torso(name, **dict(kwargs))(obs)
