"""Tests for networks/heads.py: shapes, [T, B] vs flat batches, parameter counts, and the
dueling identity of Wang et al. 2016 eq. 9 against a float64 NumPy reference."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import networks

T, B, F, A = 3, 2, 8, 5


def _features(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _count(module, features: int) -> int:
    variables = jax.eval_shape(module.init, jax.random.key(0),
                               jax.ShapeDtypeStruct((B, features), jnp.float32))
    return sum(x.size for x in jax.tree.leaves(variables))


HEADS = {
    "q": networks.QHead(A),
    "dueling_linear": networks.DuelingQHead(A),
    "dueling_hidden": networks.DuelingQHead(A, hidden_sizes=(16, 4)),
    "policy_value": networks.PolicyValueHead(A),
}


@pytest.mark.parametrize("name", list(HEADS))
def test_shapes_and_time_major_equals_flat(name):
    head = HEADS[name]
    x = _features((T, B, F))
    variables = head.init(jax.random.key(0), x[0])
    apply = jax.jit(head.apply)
    out_tb = apply(variables, x)
    out_flat = apply(variables, x.reshape(T * B, F))
    out_b = head.apply(variables, x[0])  # eager
    if name == "policy_value":
        (logits, value), (logits_flat, value_flat) = out_tb, out_flat
        assert logits.shape == (T, B, A) and value.shape == (T, B)
        assert out_b[0].shape == (B, A) and out_b[1].shape == (B,)
        np.testing.assert_allclose(logits.reshape(T * B, A), logits_flat, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(value.reshape(T * B), value_flat, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(out_b[1], value[0], rtol=1e-6, atol=1e-6)
    else:
        assert out_tb.shape == (T, B, A) and out_b.shape == (B, A)
        np.testing.assert_allclose(out_tb.reshape(T * B, A), out_flat, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(out_b, out_tb[0], rtol=1e-6, atol=1e-6)


def test_param_counts():
    assert _count(networks.QHead(A), F) == F * A + A
    assert _count(networks.PolicyValueHead(A), F) == (F * A + A) + (F + 1)
    # Linear streams: value F -> 1, advantage F -> A.
    assert _count(networks.DuelingQHead(A), F) == (F + 1) + (F * A + A)
    # The dueling paper's Atari head (Wang et al. 2016, Sec. 4.2): on the 3136 Nature conv
    # features, a 512-unit layer per stream, then 1 value / 18 advantages.
    paper = _count(networks.DuelingQHead(18, hidden_sizes=(512,)), 3136)
    value_stream = (3136 * 512 + 512) + (512 + 1)  # 1_606_657
    advantage_stream = (3136 * 512 + 512) + (512 * 18 + 18)  # 1_615_378
    print(f"DuelingQHead(18, hidden_sizes=(512,)) on 3136 features: {paper:,} params")
    assert paper == value_stream + advantage_stream == 3_222_035


@pytest.mark.parametrize("hidden_sizes", [(), (16,)])
def test_dueling_identity(hidden_sizes):
    head = networks.DuelingQHead(A, hidden_sizes=hidden_sizes)
    x = _features((T, B, F), seed=1)
    variables = head.init(jax.random.key(1), x)
    q = np.asarray(head.apply(variables, x), np.float64)  # [T, B, A]
    value, advantage = head.apply(variables, x, method=networks.DuelingQHead.streams)
    value = np.asarray(value, np.float64)  # [T, B]
    advantage = np.asarray(advantage, np.float64)  # [T, B, A]
    assert value.shape == (T, B) and advantage.shape == (T, B, A)
    # eq. 9 in float64: Q = V + A - mean_a A.
    reference = value[..., None] + advantage - advantage.mean(-1, keepdims=True)
    np.testing.assert_allclose(q, reference, rtol=1e-5, atol=1e-5)
    # Identifiability: mean_a Q == V, and Q's centred part is A's centred part.
    np.testing.assert_allclose(q.mean(-1), value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(q - q.mean(-1, keepdims=True),
                               advantage - advantage.mean(-1, keepdims=True),
                               rtol=1e-5, atol=1e-5)
    # The un-centred advantages are not already centred, so the test above can fail.
    assert np.abs(advantage.mean(-1)).max() > 1e-3
    np.testing.assert_array_equal(q.argmax(-1), advantage.argmax(-1))


def test_bad_sizes_raise():
    for cls in (networks.QHead, networks.DuelingQHead, networks.PolicyValueHead):
        with pytest.raises(ValueError, match="num_actions"):
            cls(0)
    with pytest.raises(ValueError, match=r"hidden_sizes\[1\]"):
        networks.DuelingQHead(A, hidden_sizes=(4, 0))
