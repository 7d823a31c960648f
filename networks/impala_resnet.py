"""IMPALA's deep ResNet torso (Espeholt et al. 2018, arXiv:1802.01561, Fig. 3 right)."""
import flax.linen as nn
import jax

from networks import _conv_utils


class _ResidualBlock(nn.Module):
    """`x + conv(relu(conv(relu(x))))`, 3x3 SAME convs, each followed by the norm if set."""
    channels: int
    norm: str
    num_groups: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Args: x `[N, h, w, channels]`. Returns: `[N, h, w, channels]`."""
        y = x
        for i in range(2):
            y = nn.Conv(self.channels, (3, 3), padding="SAME", name=f"conv_{i}")(nn.relu(y))
            norm = _conv_utils.norm_layer(self.norm, self.num_groups, f"norm_{i}")
            y = y if norm is None else norm(y)
        # The shortcut is never normalized (see ImpalaResNetTorso): identity + branch.
        return x + y


class ImpalaResNetTorso(nn.Module):
    """IMPALA's deep ResNet torso (Espeholt et al. 2018, arXiv:1802.01561, Fig. 3 right).

    For each stack: conv 3x3/1 SAME, max-pool 3x3/2 SAME, `num_blocks` residual blocks
    `x + conv(relu(conv(relu(x))))`; then ReLU, flatten, dense ReLU. With 84x84 frames the
    spatial size goes 84 -> 42 -> 21 -> 11, so 11 * 11 * 32 = 3872 features feed the dense.

    Normalization, when set, follows every conv, so one rule covers the whole network: the
    first conv of each stack (before the max-pool, so its statistics cover the full-resolution
    map that conv produced) and both convs of each block (on the residual branch, before the
    add; the pre-activation ReLU of the next conv then follows it). Shortcuts are never
    normalized, as in the GroupNorm paper's ResNets: each block stays identity + normalized
    branch, so the identity path carries the signal through the stack unchanged.

    Attributes:
      channels: conv width of each stack, (16, 32, 32) in the paper.
      num_blocks: residual blocks per stack (2 in the paper).
      hidden_size: width of the final dense layer (256 in the paper); None returns the flat
        conv features.
      norm: "none" | "group" | "layer".
      num_groups: groups for norm="group"; must divide every entry of `channels`, so with the
        paper's 16-channel first stack use e.g. 8 or 16 (GroupNorm's default 32 raises).
    """
    channels: tuple[int, ...] = (16, 32, 32)
    num_blocks: int = 2
    hidden_size: int | None = 256
    norm: str = "none"
    num_groups: int = 32

    def __post_init__(self) -> None:
        if not self.channels or any(c < 1 for c in self.channels) or self.num_blocks < 0:
            raise ValueError(f"ImpalaResNetTorso: need non-empty positive channels and "
                             f"num_blocks >= 0, got channels={self.channels}, "
                             f"num_blocks={self.num_blocks}.")
        _conv_utils.check_conv_torso("ImpalaResNetTorso", self.norm, self.num_groups,
                                     tuple(self.channels), self.hidden_size)
        super().__post_init__()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Encodes frames.

        Args:
          x: frames `[..., H, W, C]` (84x84x4 in the paper), uint8 or float in [0, 1].

        Returns:
          features `[..., hidden_size]` float32; `[..., h * w * c]` if hidden_size is None.
        """
        x, batch_shape = _conv_utils.frames_to_float(x, "ImpalaResNetTorso")  # [N, H, W, C]
        for s, channels in enumerate(self.channels):
            x = nn.Conv(channels, (3, 3), padding="SAME", name=f"stack_{s}_conv")(x)
            norm = _conv_utils.norm_layer(self.norm, self.num_groups, f"stack_{s}_norm")
            x = x if norm is None else norm(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")  # [N, ceil(H/2), ...]
            for b in range(self.num_blocks):
                x = _ResidualBlock(channels, self.norm, self.num_groups,
                                   name=f"stack_{s}_block_{b}")(x)
        return _conv_utils.dense_out(nn.relu(x), batch_shape, self.hidden_size)
