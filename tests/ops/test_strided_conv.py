"""Tests for ops.strided_conv against a float64 NumPy convolution written from its definition."""

import doctest
import importlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from networks._conv_utils import ValidConv
from ops.strided_conv import conv2d_valid

strided_conv_lib = importlib.import_module("ops.strided_conv")


def _reference(x, kernel, stride):
    """y[n, p, q, f] = sum over i, j, c of x[n, p*s + i, q*s + j, c] * w[i, j, c, f], float64."""
    x, kernel = np.asarray(x, np.float64), np.asarray(kernel, np.float64)
    k = kernel.shape[0]
    out_h, out_w = (x.shape[1] - k) // stride + 1, (x.shape[2] - k) // stride + 1
    y = np.zeros((x.shape[0], out_h, out_w, kernel.shape[3]))
    for p in range(out_h):
        for q in range(out_w):
            window = x[:, p * stride:p * stride + k, q * stride:q * stride + k, :]
            y[:, p, q] = np.einsum("nijc,ijcf->nf", window, kernel)
    return y


# The torsos' convolutions (8/4 and 4/2 from 84 and 20, 3/1 from 9), a kernel that is no
# multiple of its stride, inputs whose size leaves rows and columns unread, non-square inputs.
SHAPES = pytest.mark.parametrize("x_shape, k, features, stride", [
    ((2, 84, 84, 4), 8, 16, 4), ((2, 20, 20, 16), 4, 32, 2), ((2, 9, 9, 64), 3, 64, 1),
    ((3, 11, 13, 2), 3, 5, 2), ((2, 10, 7, 3), 5, 4, 3), ((1, 6, 6, 1), 6, 2, 4),
    ((2, 5, 9, 2), 1, 3, 2),
])


@SHAPES
def test_matches_the_float64_definition_and_xla(x_shape, k, features, stride):
    rng = np.random.default_rng(0)
    x = rng.normal(size=x_shape).astype(np.float32)
    kernel = rng.normal(size=(k, k, x_shape[-1], features)).astype(np.float32)
    y = jax.jit(conv2d_valid, static_argnums=2)(x, kernel, stride)
    expected = _reference(x, kernel, stride)
    assert y.shape == expected.shape and y.dtype == jnp.float32
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    xla = jax.lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(y, xla, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("x_shape, k, stride", [((2, 12, 12, 3), 4, 2), ((1, 7, 8, 2), 3, 2)])
def test_gradients_match_numerical_and_xla(x_shape, k, stride):
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=x_shape))
    kernel = jnp.asarray(rng.normal(size=(k, k, x_shape[-1], 3)))
    with jax.enable_x64():
        x64, kernel64 = x.astype(jnp.float64), kernel.astype(jnp.float64)
        check_grads(lambda a, w: conv2d_valid(a, w, stride), (x64, kernel64), order=2,
                    modes=("rev",))

        def loss(conv, a, w):
            return jnp.sum(jnp.tanh(conv(a, w)))

        xla = lambda a, w: jax.lax.conv_general_dilated(  # noqa: E731
            a, w, (stride, stride), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        ours = jax.grad(loss, (1, 2))(lambda a, w: conv2d_valid(a, w, stride), x64, kernel64)
        theirs = jax.grad(loss, (1, 2))(xla, x64, kernel64)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kwargs, match", [
    (dict(x=np.zeros((1, 8, 8, 2)), kernel=np.zeros((3, 2, 2, 1)), stride=1), "square"),
    (dict(x=np.zeros((1, 8, 8, 3)), kernel=np.zeros((3, 3, 2, 1)), stride=1), r"\[N, H, W, 2\]"),
    (dict(x=np.zeros((8, 8, 2)), kernel=np.zeros((3, 3, 2, 1)), stride=1), r"\[N, H, W, 2\]"),
    (dict(x=np.zeros((1, 8, 8, 2)), kernel=np.zeros((3, 3, 2, 1)), stride=0), "stride"),
    (dict(x=np.zeros((1, 2, 8, 2)), kernel=np.zeros((3, 3, 2, 1)), stride=1), "kernel's 3"),
])
def test_bad_shapes_raise_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        conv2d_valid(**kwargs)


@pytest.mark.parametrize("features, k, stride", [(16, 8, 4), (32, 4, 2), (8, 3, 1)])
def test_valid_conv_is_nn_conv(features, k, stride):
    """The torsos' module keeps nn.Conv's parameters (checkpoints and initial values unchanged)
    and computes its function."""
    x = jax.random.uniform(jax.random.key(0), (3, 20, 20, 4))
    ours, theirs = ValidConv(features, k, stride), nn.Conv(features, (k, k), (stride, stride),
                                                           padding="VALID")
    params = ours.init(jax.random.key(1), x)
    jax.tree.map(np.testing.assert_array_equal, params, theirs.init(jax.random.key(1), x))
    np.testing.assert_allclose(ours.apply(params, x), theirs.apply(params, x), rtol=1e-5,
                               atol=1e-5)


def test_doctests():
    assert doctest.testmod(strided_conv_lib).failed == 0
