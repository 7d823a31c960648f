"""Tests for ops.group_norm against a float64 NumPy reference written from the paper."""

import doctest
import functools
import importlib
import re

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from ops.group_norm import GroupNorm, group_norm

# By path: if ops/__init__.py re-exports the function, `ops.group_norm` the attribute is no module.
group_norm_lib = importlib.import_module("ops.group_norm")

TRANSFORMS = pytest.mark.parametrize("transform", [lambda f: f, jax.jit], ids=["eager", "jit"])


def _reference(x, num_groups, epsilon=1e-5, scale=None, bias=None, spatial_ndim=2):
    """Eq. 1-4 in float64, with S_i spelled out: loops over samples and over channel groups."""
    x = np.asarray(x, np.float64)
    channels = x.shape[-1]
    size = channels // num_groups
    y = np.empty_like(x)
    for sample in np.ndindex(*x.shape[: x.ndim - 1 - spatial_ndim]):
        for group in range(num_groups):
            in_group = slice(group * size, (group + 1) * size)
            s_i = x[sample][..., in_group]  # every spatial position, the channels of the group
            mu = s_i.sum() / s_i.size
            sigma2 = ((s_i - mu) ** 2).sum() / s_i.size
            y[sample][..., in_group] = (s_i - mu) / np.sqrt(sigma2 + epsilon)
    if scale is not None:
        y = y * np.asarray(scale, np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    return y


def _inputs(shape, seed=0, offset=0.0):
    """Random `x` whose channels differ in mean and spread, and a random scale and bias."""
    rng = np.random.default_rng(seed)
    channels = shape[-1]
    x = rng.normal(size=shape) * rng.uniform(0.5, 2.0, channels) + rng.normal(size=channels)
    scale = rng.uniform(0.5, 1.5, channels)
    bias = rng.normal(size=channels)
    return (jnp.asarray(x + offset, jnp.float32), jnp.asarray(scale, jnp.float32),
            jnp.asarray(bias, jnp.float32))


@TRANSFORMS
@pytest.mark.parametrize("shape, spatial_ndim, groups, affine", [
    ((2, 5, 6, 8), 2, {"num_groups": 4}, True),
    ((2, 5, 6, 8), 2, {"num_groups": 4}, False),
    ((2, 5, 6, 8), 2, {"num_groups": 1}, True),
    ((2, 5, 6, 8), 2, {"num_groups": None, "group_size": 1}, True),
    ((3, 2, 4, 5, 6), 2, {"num_groups": 3}, True),
    ((5, 12), 0, {"num_groups": 3}, True),
    ((5, 12), 0, {"num_groups": None, "group_size": 6}, False),
    ((2, 7, 6), 1, {"num_groups": 2}, True),
])
def test_matches_reference(transform, shape, spatial_ndim, groups, affine):
    x, scale, bias = _inputs(shape)
    if not affine:
        scale = bias = None
    fn = transform(functools.partial(group_norm, spatial_ndim=spatial_ndim, **groups))
    y = fn(x, scale=scale, bias=bias)
    num_groups = groups["num_groups"] or shape[-1] // groups["group_size"]
    expected = _reference(x, num_groups, scale=scale, bias=bias, spatial_ndim=spatial_ndim)
    assert y.shape == x.shape and y.dtype == jnp.float32
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@TRANSFORMS
def test_one_group_is_layer_norm(transform):
    x, scale, bias = _inputs((3, 4, 5, 8))
    variables = {"params": {"scale": scale, "bias": bias}}
    y = transform(GroupNorm(num_groups=1).apply)(variables, x)
    layer_norm = nn.LayerNorm(epsilon=1e-5, reduction_axes=(1, 2, 3), feature_axes=-1)
    np.testing.assert_allclose(y, layer_norm.apply(variables, x), rtol=1e-5, atol=1e-5)

    x64 = np.asarray(x, np.float64)
    mean = x64.mean(axis=(1, 2, 3), keepdims=True)
    var = x64.var(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(
        transform(functools.partial(group_norm, num_groups=1))(x), (x64 - mean) / np.sqrt(var + 1e-5),
        rtol=1e-5, atol=1e-5)


@TRANSFORMS
def test_one_channel_per_group_is_instance_norm(transform):
    x, _, _ = _inputs((3, 4, 5, 8))
    x64 = np.asarray(x, np.float64)
    mean = x64.mean(axis=(1, 2), keepdims=True)
    var = x64.var(axis=(1, 2), keepdims=True)
    expected = (x64 - mean) / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(
        transform(functools.partial(group_norm, num_groups=8))(x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        transform(functools.partial(group_norm, num_groups=None, group_size=1))(x), expected,
        rtol=1e-5, atol=1e-5)


def test_sample_does_not_depend_on_the_rest_of_the_batch():
    x, scale, bias = _inputs((4, 5, 5, 8))
    y = group_norm(x, 4, scale=scale, bias=bias)
    alone = group_norm(x[1:2], 4, scale=scale, bias=bias)
    np.testing.assert_allclose(y[1:2], alone, rtol=1e-6, atol=1e-6)
    other_batch = x.at[0].multiply(100.0).at[2:].add(50.0)
    np.testing.assert_allclose(
        group_norm(other_batch, 4, scale=scale, bias=bias)[1], y[1], rtol=1e-6, atol=1e-6)


def test_time_major_equals_flattened_batch():
    x, scale, bias = _inputs((3, 2, 4, 4, 8))
    y = group_norm(x, 2, scale=scale, bias=bias)
    flat = group_norm(x.reshape(6, 4, 4, 8), 2, scale=scale, bias=bias)
    np.testing.assert_allclose(y, flat.reshape(x.shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("spatial_ndim, shape", [(2, (2, 3, 3, 4)), (0, (3, 6))])
def test_gradients_float64(spatial_ndim, shape):
    with jax.enable_x64(True):
        x, scale, bias = (jnp.asarray(a, jnp.float64) for a in _inputs(shape))

        def fn(x, scale, bias):
            return group_norm(x, 2, scale=scale, bias=bias, spatial_ndim=spatial_ndim)

        assert fn(x, scale, bias).dtype == jnp.float64
        check_grads(fn, (x, scale, bias), order=2, modes=["rev"], atol=1e-6, rtol=1e-6)
        check_grads(jax.jit(fn), (x, scale, bias), order=1, modes=["fwd", "rev"],
                    atol=1e-6, rtol=1e-6)


def test_gradient_matches_finite_differences_of_reference():
    x, scale, bias = _inputs((2, 3, 3, 4), seed=1)
    weights = np.random.default_rng(2).normal(size=x.shape)
    grad = jax.grad(lambda x: jnp.sum(group_norm(x, 2, scale=scale, bias=bias) * weights))(x)

    def loss(x64):
        return np.sum(_reference(x64, 2, scale=scale, bias=bias) * weights)

    x64, step = np.asarray(x, np.float64), 1e-6
    numeric = np.empty_like(x64)
    for index in np.ndindex(*x64.shape):
        bump = np.zeros_like(x64)
        bump[index] = step
        numeric[index] = (loss(x64 + bump) - loss(x64 - bump)) / (2 * step)
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-4)


@TRANSFORMS
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_half_precision_keeps_dtype_and_float32_statistics(transform, dtype):
    x, scale, bias = _inputs((2, 6, 6, 8))
    x_half = x.astype(dtype)
    fn = transform(functools.partial(group_norm, num_groups=4))
    y = fn(x_half, scale=scale, bias=bias)
    assert y.dtype == dtype
    # The float32 result on the same (rounded) input differs only by rounding the output.
    expected = fn(x_half.astype(jnp.float32), scale=scale, bias=bias)
    np.testing.assert_allclose(y.astype(jnp.float32), expected, rtol=2**-8, atol=1e-3)


@TRANSFORMS
def test_bfloat16_with_large_offset_normalizes(transform):
    x, _, _ = _inputs((2, 8, 8, 8), offset=0.0)
    # bf16 spaces values 4 apart near 1000, so the noise must be wider than that to survive.
    x_bf16 = (1000.0 + 20.0 * x).astype(jnp.bfloat16)
    y = transform(functools.partial(group_norm, num_groups=4))(x_bf16)
    assert y.dtype == jnp.bfloat16
    expected = _reference(x_bf16.astype(jnp.float32), 4)
    np.testing.assert_allclose(y.astype(jnp.float32), expected, rtol=2**-8, atol=2**-8)
    groups = np.asarray(y, np.float64).reshape(2, 64, 4, 2)
    np.testing.assert_allclose(groups.mean(axis=(1, 3)), 0.0, atol=2e-2)
    np.testing.assert_allclose(groups.std(axis=(1, 3)), 1.0, atol=2e-2)


@TRANSFORMS
def test_float32_mean_far_above_spread(transform):
    # At |mean| / std = 1e4, E[x^2] - E[x]^2 in float32 is off by more than the variance itself.
    x, scale, bias = _inputs((2, 8, 8, 8), offset=1e4)
    y = transform(functools.partial(group_norm, num_groups=4))(x, scale=scale, bias=bias)
    expected = _reference(x, 4, scale=scale, bias=bias)
    # float32 holds x near 1e4 only to ~1e-3, so the output is good to about that.
    np.testing.assert_allclose(y, expected, atol=1e-2)


def test_constant_group_gives_bias():
    x = jnp.full((2, 3, 3, 4), 0.5, jnp.float32)
    bias = jnp.arange(4, dtype=jnp.float32)
    y = group_norm(x, 2, scale=jnp.ones(4), bias=bias)
    np.testing.assert_allclose(y, np.broadcast_to(bias, x.shape), atol=1e-4)


@TRANSFORMS
def test_module_params_and_output(transform):
    x, scale, bias = _inputs((2, 5, 5, 8))
    module = GroupNorm(num_groups=4)
    variables = module.init(jax.random.key(0), x)
    assert jax.tree_util.tree_map(jnp.shape, variables) == {
        "params": {"scale": (8,), "bias": (8,)}}
    np.testing.assert_array_equal(variables["params"]["scale"], np.ones(8))
    np.testing.assert_array_equal(variables["params"]["bias"], np.zeros(8))
    variables = {"params": {"scale": scale, "bias": bias}}
    np.testing.assert_allclose(
        transform(module.apply)(variables, x), group_norm(x, 4, scale=scale, bias=bias),
        rtol=1e-6, atol=1e-6)
    assert GroupNorm(num_groups=4, use_scale=False, use_bias=False).init(
        jax.random.key(0), x) == {}
    assert set(GroupNorm(num_groups=4, use_bias=False).init(
        jax.random.key(0), x)["params"]) == {"scale"}


@TRANSFORMS
def test_module_matches_flax_group_norm(transform):
    x, scale, bias = _inputs((3, 6, 6, 16))
    variables = {"params": {"scale": scale, "bias": bias}}
    ours = transform(GroupNorm(num_groups=4).apply)(variables, x)
    theirs = nn.GroupNorm(num_groups=4, epsilon=1e-5).apply(variables, x)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_module_time_major_and_spatial_ndim():
    x, _, _ = _inputs((3, 2, 4, 4, 8))
    module = GroupNorm(num_groups=2)
    variables = module.init(jax.random.key(0), x)
    np.testing.assert_allclose(
        module.apply(variables, x), group_norm(x, 2), rtol=1e-6, atol=1e-6)
    vectors, _, _ = _inputs((5, 12))
    vector_norm = GroupNorm(num_groups=3, spatial_ndim=0)
    np.testing.assert_allclose(
        vector_norm.apply(vector_norm.init(jax.random.key(0), vectors), vectors),
        _reference(vectors, 3, spatial_ndim=0), rtol=1e-5, atol=1e-5)


_C16 = (2, 3, 3, 16)


@pytest.mark.parametrize("shape, kwargs, message", [
    (_C16, {"num_groups": 32},
     "num_groups=32 does not divide 16 channels; use one of 1, 2, 4, 8, 16"),
    (_C16, {"num_groups": 0}, "num_groups must be a positive int, got 0"),
    (_C16, {"num_groups": -4}, "num_groups must be a positive int, got -4"),
    (_C16, {"num_groups": 2.0}, "num_groups must be a positive int, got 2.0"),
    (_C16, {"num_groups": None}, "one of num_groups or group_size must be given"),
    (_C16, {"num_groups": None, "group_size": 3},
     "group_size=3 does not divide 16 channels; use one of 1, 2, 4, 8, 16"),
    (_C16, {"num_groups": None, "group_size": 0}, "group_size must be a positive int, got 0"),
    (_C16, {"group_size": 4}, "pass num_groups or group_size, not both; got num_groups=32"),
    (_C16, {"num_groups": 4, "group_size": 4}, "not both; got num_groups=4 and group_size=4"),
    ((3, 3, 16), {"num_groups": 4}, "x must have rank >= spatial_ndim + 2 = 4"),
    ((16,), {"num_groups": 4, "spatial_ndim": 0}, "x must have rank >= spatial_ndim + 2 = 2"),
    (_C16, {"num_groups": 4, "spatial_ndim": -1}, "spatial_ndim must be an int >= 0, got -1"),
    (_C16, {"num_groups": 4, "epsilon": -1e-3}, "epsilon must be >= 0, got -0.001"),
    (_C16, {"num_groups": 4, "epsilon": float("nan")}, "epsilon must be >= 0, got nan"),
    (_C16, {"num_groups": 4, "scale": jnp.ones(8)}, "scale must have shape [C] = (16,), got (8,)"),
    (_C16, {"num_groups": 4, "bias": jnp.ones((16, 1))},
     "bias must have shape [C] = (16,), got (16, 1)"),
])
def test_invalid_arguments_raise(shape, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        group_norm(jnp.ones(shape), **kwargs)


def test_integer_input_raises():
    with pytest.raises(ValueError, match="x must be a floating-point array, got dtype int32"):
        group_norm(jnp.ones((2, 3, 3, 4), jnp.int32), 2)


def test_module_default_groups_on_16_channels_raises():
    with pytest.raises(ValueError, match="num_groups=32 does not divide 16 channels"):
        GroupNorm().init(jax.random.key(0), jnp.ones(_C16))


def test_no_retracing_for_same_shapes():
    @jax.jit
    @chex.assert_max_traces(n=1)
    def normalize(x, scale, bias):
        return group_norm(x, 4, scale=scale, bias=bias)

    module = GroupNorm(num_groups=4)
    apply = jax.jit(chex.assert_max_traces(lambda v, x: module.apply(v, x), n=1))
    for seed in range(3):
        x, scale, bias = _inputs((2, 4, 4, 8), seed=seed)
        normalize(x, scale, bias)
        apply({"params": {"scale": scale, "bias": bias}}, x)


def test_docstring_examples_run():
    results = doctest.testmod(group_norm_lib, optionflags=doctest.ELLIPSIS)
    assert results.attempted > 0 and results.failed == 0
