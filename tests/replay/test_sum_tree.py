"""Tests for replay.sum_tree against a plain float64 NumPy array of leaf priorities."""

import io

import numpy as np
import pytest
from scipy import stats

from replay import sum_tree
from replay.sum_tree import SumTree

CAPACITIES = [1, 2, 3, 5, 7, 1000, 1025]


@pytest.fixture(params=["sparse", "dense"])
def update_path(request, monkeypatch):
    """Runs a test with ancestors updated by gather/scatter on every level, or whole levels.

    With the default threshold, trees under ~8K leaves never take the gather/scatter path.
    """
    if request.param == "sparse":
        monkeypatch.setattr(sum_tree, "_DENSE_LEVEL_NODES", 0)
        monkeypatch.setattr(sum_tree, "_DENSE_NODES_PER_UPDATE", 0)
    else:
        monkeypatch.setattr(sum_tree, "_DENSE_LEVEL_NODES", 1 << 40)
    return request.param


def reference_find(leaves, values):
    """The leaf i with cumsum[i - 1] <= v < cumsum[i], by a linear cumsum and a binary search."""
    return np.searchsorted(np.cumsum(leaves), values, side="right")


def random_priorities(rng, size):
    """Priorities over 24 orders of magnitude, a fifth of them exactly zero."""
    priorities = np.exp(rng.uniform(-27.0, 27.0, size))
    priorities[rng.random(size) < 0.2] = 0.0
    return priorities


def assert_matches(tree, leaves):
    """Checks every node of `tree` against the leaves: sums, mins, padding and accessors."""
    P, capacity = tree._num_leaves, tree.capacity
    sums, mins = tree._sum, tree._min
    np.testing.assert_array_equal(sums[P:P + capacity], leaves)
    np.testing.assert_array_equal(sums[P + capacity:], 0.0)
    np.testing.assert_array_equal(mins[P:], np.where(sums[P:] > 0.0, sums[P:], np.inf))
    # Each internal node, bit for bit, as its children combine: no drift from deltas.
    np.testing.assert_array_equal(sums[1:P], sums[2::2] + sums[3::2])
    np.testing.assert_array_equal(mins[1:P], np.minimum(mins[2::2], mins[3::2]))
    np.testing.assert_allclose(tree.total, leaves.sum(), rtol=1e-12, atol=0.0)
    np.testing.assert_array_equal(tree.get(np.arange(capacity)), leaves)
    if (leaves > 0).any():
        assert tree.min == leaves[leaves > 0].min()
    else:
        with pytest.raises(ValueError, match="no non-zero priority"):
            tree.min


def filled_tree(leaves):
    tree = SumTree(len(leaves))
    tree.set(np.arange(len(leaves)), leaves)
    return tree


@pytest.mark.parametrize("capacity", CAPACITIES + [20_000])
def test_random_set_sequences_match_reference(capacity, update_path):
    rng = np.random.default_rng(capacity)
    tree, leaves = SumTree(capacity), np.zeros(capacity)
    for _ in range(30):
        # Draws with replacement, so batches repeat indices: the last occurrence must win.
        size = int(rng.integers(1, min(2 * capacity, 600) + 1))
        indices = rng.integers(0, capacity, size)
        priorities = random_priorities(rng, size)
        tree.set(indices, priorities)
        for i, p in zip(indices, priorities):  # The obviously correct, one at a time, version.
            leaves[i] = p
        assert_matches(tree, leaves)


def test_duplicate_indices_last_value_wins(update_path):
    tree = SumTree(5)
    tree.set([3, 1, 3, 3, 1], [1.0, 2.0, 5.0, 7.0, 0.5])
    assert_matches(tree, np.array([0.0, 0.5, 0.0, 7.0, 0.0]))
    tree.set(np.array([[4, 4], [0, 4]]), np.array([[9.0, 0.0], [1.0, 3.0]]))
    assert_matches(tree, np.array([1.0, 0.5, 0.0, 7.0, 3.0]))


def test_set_to_zero_and_back_keeps_totals_exact(update_path):
    rng = np.random.default_rng(0)
    tree = SumTree(1025)
    tree.set(np.arange(1025), rng.random(1025) * 1e6)
    tree.set(np.arange(1025), np.zeros(1025))
    assert tree.total == 0.0  # Exactly: deltas would have left rounding residue here.
    assert_matches(tree, np.zeros(1025))


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_find_prefix_sum_matches_reference_exactly(capacity):
    # Integer priorities make every partial sum exact, so the tree and np.cumsum agree exactly,
    # also at the boundaries between leaves.
    rng = np.random.default_rng(capacity)
    leaves = rng.integers(0, 4, capacity).astype(np.float64)
    leaves[rng.integers(capacity)] = 1.0
    tree = filled_tree(leaves)
    boundaries = np.concatenate([[0.0], np.cumsum(leaves)[:-1]])
    boundaries = boundaries[boundaries < tree.total]
    values = np.concatenate([
        rng.uniform(0.0, tree.total, 1000), boundaries, np.nextafter(boundaries, np.inf),
        [np.nextafter(tree.total, 0.0)]])
    np.testing.assert_array_equal(tree.find_prefix_sum(values), reference_find(leaves, values))
    P = tree._num_leaves
    np.testing.assert_array_equal(tree._guarded_descend(values) - P, reference_find(leaves, values))


@pytest.mark.parametrize("capacity", [7, 1000, 1025])
def test_find_prefix_sum_float_priorities_within_rounding(capacity):
    rng = np.random.default_rng(capacity)
    leaves = random_priorities(rng, capacity)
    tree = filled_tree(leaves)
    values = rng.uniform(0.0, tree.total, 2000)
    found = tree.find_prefix_sum(values)
    cumsum = np.cumsum(leaves)
    lower = np.concatenate([[0.0], cumsum])[found]
    slack = 1e-12 * tree.total
    assert np.all(leaves[found] > 0.0)
    assert np.all((lower - slack <= values) & (values < cumsum[found] + slack))


def test_find_prefix_sum_keeps_shape_and_accepts_total():
    tree = filled_tree(np.array([1.0, 0.0, 2.0, 0.0]))
    np.testing.assert_array_equal(tree.find_prefix_sum([[0.0, 1.0], [2.9, 3.0]]), [[0, 2], [2, 2]])


ADVERSARIAL_LAYOUTS = {
    "zeros_at_both_ends": np.array([0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0]),
    "zeros_between": np.array([1.0, 0.0, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0, 4.0]),
    "single_first": np.eye(1, 13, 0)[0],
    "single_middle": np.eye(1, 13, 6)[0],
    "single_last": np.eye(1, 13, 12)[0] * 1e-300,
    "tiny_next_to_huge": np.tile([1e-12, 1e12, 0.0, 3e-12], 9)[:-1],
    "dynamic_range": np.array([1e-300, 0.0, 1e300, 1e-300, 0.0, 1e-300]),
    "capacity_one": np.array([0.5]),
}


@pytest.mark.parametrize("name", list(ADVERSARIAL_LAYOUTS))
def test_zero_priority_leaves_are_never_returned(name):
    leaves = ADVERSARIAL_LAYOUTS[name]
    tree = filled_tree(leaves)
    total = tree.total
    cumsum = np.cumsum(leaves)
    edges = np.concatenate([[0.0], cumsum[cumsum < total], [total]])
    values = np.concatenate([
        edges, np.nextafter(edges, 0.0), np.nextafter(edges, np.inf).clip(max=total),
        np.linspace(0.0, total, 1001), np.random.default_rng(0).uniform(0.0, total, 1000)])
    assert np.all(leaves[tree.find_prefix_sum(values)] > 0.0)
    rng = np.random.default_rng(1)
    for batch_size in (1, 7, 4096):
        drawn = np.concatenate([tree.sample(batch_size, rng) for _ in range(20)])
        assert np.all(leaves[drawn] > 0.0)


def test_rounding_in_the_walk_does_not_lead_into_padding():
    # In float64, v = nextafter(fl(a + c), 0) < a + c, yet fl(v - a) == c: a plain walk that goes
    # right at the root arrives at node (c, padding) with v' == c and goes right again, onto
    # padding. The guarded walk must catch it.
    a, c = 0.4918883951887556, 2.4752412154107573
    tree = filled_tree(np.array([a, 0.0, c]))
    v = np.nextafter(tree.total, 0.0)
    assert v - a >= c  # The trap is armed: this fails if the constants ever stop rounding so.
    assert tree.find_prefix_sum([v])[0] == 2
    assert tree.find_prefix_sum([tree.total])[0] == 2


def test_sampling_frequencies_match_priorities():
    rng = np.random.default_rng(0)
    leaves = rng.uniform(0.1, 5.0, 20)
    leaves[[0, 3, 4, 11, 19]] = 0.0
    tree = filled_tree(leaves)
    drawn = np.concatenate([tree.sample(1000, rng) for _ in range(100)])  # [100_000]
    counts = np.bincount(drawn, minlength=20)
    nonzero = leaves > 0.0
    assert counts[~nonzero].sum() == 0
    expected = drawn.size * leaves[nonzero] / leaves.sum()
    assert stats.chisquare(counts[nonzero], expected).pvalue > 1e-3
    # The same for the unstratified lookup, whose counts are multinomial.
    found = tree.find_prefix_sum(rng.uniform(0.0, tree.total, 100_000))
    counts = np.bincount(found, minlength=20)
    assert stats.chisquare(counts[nonzero], expected).pvalue > 1e-3


@pytest.mark.parametrize("batch_size", [1, 3, 64, 512])
def test_sample_is_stratified(batch_size):
    rng = np.random.default_rng(batch_size)
    leaves = random_priorities(rng, 1000)
    tree = filled_tree(leaves)
    cumsum = np.cumsum(leaves)
    segment = tree.total / batch_size
    for _ in range(10):
        drawn = tree.sample(batch_size, rng)
        assert drawn.shape == (batch_size,) and drawn.dtype == np.int64
        k = np.arange(batch_size)
        lower = np.concatenate([[0.0], cumsum])[drawn]
        # Leaf k's interval [lower, upper) meets segment k: [k, k + 1) * total / B.
        assert np.all(lower <= (k + 1) * segment * (1 + 1e-12))
        assert np.all(cumsum[drawn] >= k * segment * (1 - 1e-12))


@pytest.mark.parametrize("capacity", [0, -1, 2.0, "3", True, None])
def test_invalid_capacity(capacity):
    with pytest.raises(ValueError, match="capacity"):
        SumTree(capacity)


def snapshot(tree):
    return tree._sum.copy(), tree._min.copy()


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf, -np.inf, -1e-300, 1e308])
def test_invalid_priorities_raise_and_leave_tree_unchanged(bad):
    tree = filled_tree(np.arange(6.0))
    before = snapshot(tree)
    with pytest.raises(ValueError, match="priorities"):
        tree.set([0, 1, 2], [4.0, bad, 5.0])
    for old, new in zip(before, snapshot(tree)):
        np.testing.assert_array_equal(old, new)


@pytest.mark.parametrize("indices", [[0, 6], [-1, 0], [2**62, 0],
                                     np.array([2**64 - 1, 0], np.uint64)])
def test_out_of_range_indices_raise_and_leave_tree_unchanged(indices):
    tree = filled_tree(np.arange(6.0))
    before = snapshot(tree)
    with pytest.raises(ValueError, match="indices"):
        tree.set(indices, [1.0, 1.0])
    with pytest.raises(ValueError, match="indices"):
        tree.get(indices)
    for old, new in zip(before, snapshot(tree)):
        np.testing.assert_array_equal(old, new)


def test_malformed_set_arguments():
    tree = SumTree(6)
    with pytest.raises(ValueError, match="integers"):
        tree.set([0.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="same shape"):
        tree.set([0, 1], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="same shape"):
        tree.set([[0, 1]], [1.0, 1.0])
    tree.set(np.array([], np.int64), [])
    assert tree.total == 0.0


def test_empty_tree_raises():
    tree = SumTree(10)
    rng = np.random.default_rng(0)
    for _ in range(2):
        with pytest.raises(ValueError, match="no priority"):
            tree.sample(4, rng)
        with pytest.raises(ValueError, match="no priority"):
            tree.find_prefix_sum([0.0])
        with pytest.raises(ValueError, match="no non-zero priority"):
            tree.min
        tree.set([3, 7], [1.0, 2.0])
        tree.set([3, 7], [0.0, 0.0])  # Emptied again.


def test_invalid_sample_and_lookup_arguments():
    tree = filled_tree(np.ones(4))
    rng = np.random.default_rng(0)
    for batch_size in (0, -3, 2.0):
        with pytest.raises(ValueError, match="batch_size"):
            tree.sample(batch_size, rng)
    for value in (-1e-9, 4.000001, np.nan):
        with pytest.raises(ValueError, match="values"):
            tree.find_prefix_sum([1.0, value])


def test_min_tracks_smallest_non_zero_priority():
    tree = SumTree(7)
    tree.set([0, 1, 5], [3.0, 0.25, 2.0])
    assert tree.min == 0.25
    tree.set([1], [0.0])
    assert tree.min == 2.0


def test_state_dict_round_trip_through_npz():
    rng = np.random.default_rng(0)
    tree = SumTree(1025)
    for _ in range(20):
        tree.set(rng.integers(0, 1025, 300), random_priorities(rng, 300))
    buffer = io.BytesIO()
    np.savez(buffer, **tree.state_dict())
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as state:
        restored = SumTree.from_state_dict(state)
    assert restored.capacity == tree.capacity
    for old, new in zip(snapshot(tree), snapshot(restored)):
        np.testing.assert_array_equal(old, new)  # Bit for bit, internal nodes included.
    np.testing.assert_array_equal(
        tree.sample(512, np.random.default_rng(7)), restored.sample(512, np.random.default_rng(7)))


def test_from_state_dict_rejects_malformed_state():
    good = filled_tree(np.arange(5.0)).state_dict()
    for key, value, match in [
        ("priorities", np.arange(4.0), "priorities"),
        ("priorities", np.array([1.0, -1.0, 0.0, 0.0, 0.0]), "non-negative"),
        ("priorities", np.arange(5), "priorities"),
        ("capacity", np.array([5]), "capacity"),
        ("capacity", np.asarray(0), "capacity"),
    ]:
        with pytest.raises(ValueError, match=match):
            SumTree.from_state_dict({**good, key: value})
    with pytest.raises(ValueError, match="missing"):
        SumTree.from_state_dict({"capacity": good["capacity"]})
