"""Tests for networks/torsos.py and networks/impala_resnet.py: shapes, parameter counts against
the papers' layer sizes, norm placement, frame scaling, and validation."""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict

import networks
from ops.group_norm import GroupNorm

FRAME = (84, 84, 4)
T, B = 3, 2


def _frames(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def _param_shapes(module: nn.Module, x_shape: tuple[int, ...], dtype=jnp.uint8) -> dict:
    """Flat {"path/name": shape} of the params, by abstract evaluation (no compile, no FLOPs)."""
    variables = jax.eval_shape(module.init, jax.random.key(0), jax.ShapeDtypeStruct(x_shape, dtype))
    return {k: v.shape for k, v in flatten_dict(variables["params"], sep="/").items()}


def _count(shapes: dict) -> int:
    return sum(math.prod(s) for s in shapes.values())


def _conv(k: int, c_in: int, c_out: int) -> int:
    return k * k * c_in * c_out + c_out  # kernel + bias


def _dense(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


# Hand-derived from the papers' layer sizes on 84x84x4 frames.
# Nature (Mnih et al. 2015): VALID convs 84 -> 20 -> 9 -> 7; dense on 7*7*64 = 3136.
NATURE_CONVS = _conv(8, 4, 32) + _conv(4, 32, 64) + _conv(3, 64, 64)  # 8224 + 32832 + 36928
NATURE = NATURE_CONVS + _dense(3136, 512)  # 77984 + 1606144
# IMPALA shallow (Espeholt et al. 2018, Fig. 3): VALID 84 -> 20 -> 9; dense on 9*9*32 = 2592.
SHALLOW = _conv(8, 4, 16) + _conv(4, 16, 32) + _dense(2592, 256)  # 4112 + 8224 + 663808
# IMPALA ResNet: per stack one conv c_in -> c and 2 blocks x 2 convs c -> c; SAME pooling
# 84 -> 42 -> 21 -> 11, dense on 11*11*32 = 3872.
RESNET = (_conv(3, 4, 16) + 4 * _conv(3, 16, 16)  # 592 + 9280
          + _conv(3, 16, 32) + 4 * _conv(3, 32, 32)  # 4640 + 36992
          + _conv(3, 32, 32) + 4 * _conv(3, 32, 32)  # 9248 + 36992
          + _dense(3872, 256))  # 991488
# Norm params: scale and bias [C] after every conv.
NATURE_NORM = 2 * (32 + 64 + 64)
SHALLOW_NORM = 2 * (16 + 32)
RESNET_NORM = 2 * 5 * (16 + 32 + 32)  # 5 convs a stack


def test_param_counts_match_papers():
    assert (NATURE, SHALLOW, RESNET) == (1_684_128, 676_144, 1_089_232)
    cases = [
        (networks.NatureTorso(), NATURE),
        (networks.NatureTorso(hidden_size=None), NATURE_CONVS),
        (networks.NatureTorso(norm="group", num_groups=32), NATURE + NATURE_NORM),
        (networks.NatureTorso(norm="layer"), NATURE + NATURE_NORM),
        (networks.ImpalaShallowTorso(), SHALLOW),
        (networks.ImpalaShallowTorso(norm="group", num_groups=16), SHALLOW + SHALLOW_NORM),
        (networks.ImpalaResNetTorso(), RESNET),
        (networks.ImpalaResNetTorso(norm="group", num_groups=8), RESNET + RESNET_NORM),
        (networks.ImpalaResNetTorso(norm="layer"), RESNET + RESNET_NORM),
    ]
    for module, expected in cases:
        count = _count(_param_shapes(module, (B,) + FRAME))
        print(f"{type(module).__name__}(norm={module.norm}, hidden={module.hidden_size}): "
              f"{count:,} params")
        assert count == expected, module
    # MLP on CartPole's 4 features: 4*256+256 + 256*256+256.
    mlp = _count(_param_shapes(networks.MLPTorso(), (B, 4), jnp.float32))
    assert mlp == _dense(4, 256) + _dense(256, 256) == 67_072


def test_norm_params_at_expected_places():
    resnet = _param_shapes(networks.ImpalaResNetTorso(norm="group", num_groups=8), (B,) + FRAME)
    norms = {k.rsplit("/", 1)[0] for k in resnet if "norm" in k}
    expected = {f"stack_{s}_norm" for s in range(3)} | {
        f"stack_{s}_block_{b}/norm_{i}" for s in range(3) for b in range(2) for i in range(2)}
    assert norms == expected  # 15 = 3 stacks x (1 + 2 blocks x 2 convs)
    assert resnet["stack_0_block_1/norm_1/scale"] == (16,)
    assert resnet["stack_2_norm/bias"] == (32,)
    nature = _param_shapes(networks.NatureTorso(norm="layer"), (B,) + FRAME)
    assert sorted(k for k in nature if "norm" in k) == [
        f"norm_{i}/{p}" for i in range(3) for p in ("bias", "scale")]
    assert not any("norm" in k for k in _param_shapes(networks.NatureTorso(), (B,) + FRAME))
    assert not any("norm" in k for k in _param_shapes(networks.ImpalaResNetTorso(), (B,) + FRAME))


# One config per torso kind; each is initialized and compiled once for the module.
CONFIGS = {
    "mlp": (networks.MLPTorso(hidden_sizes=(32, 16)), (4,), 16),
    "nature": (networks.NatureTorso(), FRAME, 512),
    "impala_shallow": (networks.ImpalaShallowTorso(norm="layer"), FRAME, 256),
    "impala_resnet": (networks.ImpalaResNetTorso(norm="group", num_groups=8), FRAME, 256),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def torso(request):
    module, obs_shape, features = CONFIGS[request.param]
    dtype = np.float32 if request.param == "mlp" else np.uint8
    make = (lambda s, seed=0: np.random.default_rng(seed).normal(size=s).astype(np.float32)
            ) if dtype == np.float32 else _frames
    variables = module.init(jax.random.key(0), make((B,) + obs_shape))
    return module, variables, obs_shape, features, make, jax.jit(module.apply)


def test_output_shapes_and_time_major_equals_flat(torso):
    module, variables, obs_shape, features, make, apply = torso
    x = make((T, B) + obs_shape)
    out_tb = apply(variables, x)
    out_flat = apply(variables, x.reshape((T * B,) + obs_shape))
    assert out_tb.shape == (T, B, features) and out_tb.dtype == jnp.float32
    assert out_flat.shape == (T * B, features)
    np.testing.assert_allclose(out_tb.reshape(T * B, features), out_flat, rtol=1e-5, atol=1e-5)
    # Eager (no jit) agrees with jit on the same batch.
    np.testing.assert_allclose(module.apply(variables, x[0]), out_tb[0], rtol=1e-5, atol=1e-5)


def test_make_torso_builds_each_kind():
    for name in networks.TORSOS:
        assert isinstance(networks.make_torso(name), type(CONFIGS[name][0]))
    assert networks.make_torso("impala_resnet", norm="group", num_groups=8).num_groups == 8
    with pytest.raises(ValueError, match="impala_shallow"):
        networks.make_torso("resnet50")


@pytest.fixture(scope="module")
def nature_variables():
    return networks.NatureTorso().init(jax.random.key(0), _frames((B,) + FRAME))


def test_uint8_is_scaled_and_float_taken_as_scaled(nature_variables):
    apply = jax.jit(networks.NatureTorso().apply)
    x = _frames((B,) + FRAME)
    np.testing.assert_allclose(apply(nature_variables, x),
                               apply(nature_variables, x.astype(np.float32) / 255.0),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="uint8"):
        networks.NatureTorso().apply(nature_variables, x.astype(np.int32))
    with pytest.raises(ValueError, match="batch axis"):
        networks.NatureTorso().apply(nature_variables, x[0])


def _record_group_norms(module: nn.Module, variables, x) -> tuple[jax.Array, list]:
    """Runs module, returning its output and (num_groups, input, output) of every GroupNorm."""
    calls = []

    def interceptor(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if isinstance(context.module, GroupNorm) and context.method_name == "__call__":
            calls.append((context.module.num_groups, np.asarray(args[0]), np.asarray(out)))
        return out

    with nn.intercept_methods(interceptor):
        return module.apply(variables, x), calls


def _reference_group_norm(x: np.ndarray, groups: int, eps: float = 1e-5) -> np.ndarray:
    """Float64 GroupNorm at init (scale 1, bias 0): per sample, over (H, W, C / groups)."""
    n, h, w, c = x.shape
    xg = x.astype(np.float64).reshape(n, h, w, groups, c // groups)
    mean = xg.mean(axis=(1, 2, 4), keepdims=True)
    var = xg.var(axis=(1, 2, 4), keepdims=True)
    return ((xg - mean) / np.sqrt(var + eps)).reshape(x.shape)


@pytest.mark.parametrize("norm,num_groups,expected_groups", [
    ("group", 16, 16), ("layer", 16, 1)])
def test_norm_applied_after_every_conv(nature_variables, norm, num_groups, expected_groups):
    module = networks.NatureTorso(norm=norm, num_groups=num_groups)
    x = _frames((B,) + FRAME, seed=1)
    variables = module.init(jax.random.key(0), x)
    # Same key and layer names: the conv and dense params equal the norm="none" torso's.
    for name in ("conv_0", "conv_2", "dense"):
        np.testing.assert_array_equal(variables["params"][name]["kernel"],
                                      nature_variables["params"][name]["kernel"])
    out, calls = _record_group_norms(module, variables, x)
    plain, none_calls = _record_group_norms(networks.NatureTorso(), nature_variables, x)
    assert none_calls == []
    assert [(g, a.shape[-1]) for g, a, _ in calls] == [(expected_groups, c) for c in (32, 64, 64)]
    for _, inp, outp in calls:  # "layer" is LayerNorm over (H, W, C): one group.
        np.testing.assert_allclose(outp, _reference_group_norm(inp, expected_groups), atol=1e-4)
    assert not np.allclose(out, plain, atol=1e-3)


def test_bad_norm_and_num_groups_raise():
    for cls in (networks.NatureTorso, networks.ImpalaShallowTorso, networks.ImpalaResNetTorso):
        with pytest.raises(ValueError, match=r"norm.*\('none', 'group', 'layer'\)"):
            cls(norm="batch")
    # The paper's 16-channel first stack: GroupNorm's default 32 groups cannot divide it.
    with pytest.raises(ValueError, match=r"num_groups=32 does not divide \[16\]"):
        networks.ImpalaResNetTorso(norm="group")
    with pytest.raises(ValueError, match="num_groups=5"):
        networks.NatureTorso(norm="group", num_groups=5)
    with pytest.raises(ValueError, match="num_groups"):
        networks.ImpalaShallowTorso(norm="group", num_groups=0)
    # num_groups is ignored, not checked, when no group norm is used.
    networks.ImpalaResNetTorso(norm="layer", num_groups=32)
    with pytest.raises(ValueError, match="hidden_sizes"):
        networks.MLPTorso(hidden_sizes=())
    with pytest.raises(ValueError, match="hidden_size"):
        networks.NatureTorso(hidden_size=0)


def test_resnet_blocks_are_identity_plus_branch():
    # Zeroing each block's last conv zeroes its branch (norm="none"), so every block must
    # reduce to the identity: the torso then equals one without blocks on the same weights.
    x = _frames((B, 16, 16, 4), seed=2)
    deep = networks.ImpalaResNetTorso(num_blocks=2)
    params = deep.init(jax.random.key(0), x)["params"]
    zeroed = {name: {conv: jax.tree.map(jnp.zeros_like, p) if conv == "conv_1" else p
                     for conv, p in layer.items()} if "block" in name else layer
              for name, layer in params.items()}
    without_blocks = {name: layer for name, layer in params.items() if "block" not in name}
    out_no_blocks = networks.ImpalaResNetTorso(num_blocks=0).apply({"params": without_blocks}, x)
    np.testing.assert_allclose(deep.apply({"params": zeroed}, x), out_no_blocks,
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(deep.apply({"params": params}, x), out_no_blocks, atol=1e-4)
