"""A host-side NumPy sum tree for proportional prioritized replay.

Schaul et al. 2016, "Prioritized Experience Replay" (arXiv:1511.05952), Sec. 3.3 and
Appendix B.2.1: a transition i is drawn with probability P(i) = p_i / sum_k p_k, found by a
descent of a binary tree whose internal nodes hold the sums of their children, and a batch of
k transitions is stratified: one draw from each of k equal segments of [0, sum_k p_k).

Every operation walks the tree for a whole batch at once: O(log N) NumPy calls per batch and
no Python loop per item. The tree is not thread-safe; the replay buffer that owns it locks.
"""
from typing import Any

import numpy as np

# Levels of at most _DENSE_LEVEL_NODES + _DENSE_NODES_PER_UPDATE * n nodes, for n updated
# leaves, are recomputed whole (two contiguous NumPy calls a level) instead of by gathering and
# scattering the n parents (four calls a level, each a cache miss per item in a large tree).
# Tuned with benchmarks/bench_sum_tree.py.
_DENSE_LEVEL_NODES = 1024
_DENSE_NODES_PER_UPDATE = 4


class SumTree:
    """Sum tree (and min tree) over `capacity` float64 leaf priorities.

    Layout: the leaf count is padded to a power of two P; one flat array of 2P nodes holds the
    tree, node 1 is the root, node i has children 2i and 2i+1, leaf j is node P + j, and the
    padding leaves P + capacity .. 2P - 1 stay 0 so they are never drawn. A min tree of the same
    shape, stored in the same nodes, holds +inf at zero and padding leaves, so its root is the
    smallest non-zero priority, which normalizes importance weights:
    max_j w_j = (N * p_min / total) ** -beta (Sec. 3.4).

    Attributes:
      capacity: the number of leaves.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise ValueError(f"capacity must be an int, got {capacity!r}")
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self._depth = (self.capacity - 1).bit_length()  # Levels below the root.
        self._num_leaves = 1 << self._depth  # P.
        # Both trees in one array of complex128 nodes, the sum in the real part and the min in
        # the imaginary part: a node's two values share a cache line, and updating a node in
        # both trees is one 16-byte gather and one 16-byte scatter (NumPy scatters 1-D items
        # much faster than rows of a [N, 2] float array). No complex arithmetic is ever done.
        self._nodes = np.zeros(2 * self._num_leaves, np.complex128)  # [2P]
        self._sum = self._nodes.real  # [2P] float64 views
        self._min = self._nodes.imag
        self._min[:] = np.inf
        # Row i holds the children (2i, 2i+1) of node i: one gather fetches both, both trees.
        self._pairs = self._nodes.reshape(-1, 2)  # [P, 2]
        self._max_priority = np.finfo(np.float64).max / self.capacity
        self._max_priority_bits = np.float64(self._max_priority).view(np.uint64)
        # Per level l >= 1 (nodes 2**l .. 2**(l+1) - 1): views of its left children, right
        # children and parents in both trees, made once since slicing costs as much as the adds.
        self._levels = []
        for level in range(1, self._depth + 1):
            lo, hi = 1 << level, 2 << level
            self._levels.append(tuple(
                view for tree in (self._sum, self._min)
                for view in (tree[lo:hi:2], tree[lo + 1:hi:2], tree[lo >> 1:hi >> 1])))

    @property
    def nbytes(self) -> int:
        """Bytes of the node array (both trees)."""
        return self._nodes.nbytes

    @property
    def total(self) -> float:
        """The sum of all priorities (the root)."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """The smallest non-zero priority.

        Raises:
          ValueError: if every priority is zero (an empty tree has no minimum to normalize by).
        """
        smallest = float(self._min[1])
        if smallest == np.inf:
            raise ValueError("min is undefined: the sum tree holds no non-zero priority")
        return smallest

    def get(self, indices: Any) -> np.ndarray:
        """Returns the priorities of leaves `indices` (any shape), as float64 of that shape."""
        indices = self._check_indices(indices)
        return self._sum[indices + self._num_leaves]

    def set(self, indices: Any, priorities: Any) -> None:
        """Sets leaf priorities and recomputes their ancestors.

        Where an index repeats, its last priority wins. Everything is checked before anything is
        written, so a call that raises leaves the tree unchanged.

        Args:
          indices: integer leaf indices in [0, capacity), any shape.
          priorities: non-negative priorities, at most float64 max / capacity, the same shape
            as `indices`.

        Raises:
          ValueError: on shapes that differ, an index out of range, or a priority that is
            negative, NaN or above float64 max / capacity (infinite included).
        """
        indices = self._check_indices(indices)
        priorities = np.asarray(priorities, dtype=np.float64)
        if priorities.shape != indices.shape:
            raise ValueError(
                f"indices and priorities must have the same shape, got {indices.shape} "
                f"and {priorities.shape}")
        indices, priorities = indices.ravel(), priorities.ravel()
        if indices.size == 0:
            return
        self.check_priorities(priorities)
        self._write(indices + self._num_leaves, priorities)

    def _write(self, nodes: np.ndarray, priorities: np.ndarray) -> None:
        """Writes checked float64 priorities `[n]` to leaf nodes `[n]`, then their ancestors."""
        values = np.empty(nodes.shape, np.complex128)  # [n] (sum, min) of each leaf
        values.real = priorities
        values.imag = priorities
        # Zero leaves hold +inf in the min tree, so the min is over non-zero priorities.
        np.copyto(values.imag, np.inf, where=priorities == 0.0)
        self._nodes[nodes] = values
        # NumPy does not promise which of several values for one index a fancy assignment keeps.
        # Every leaf holding its own value again means no index had two different values (NaN,
        # the one value unequal to itself, was rejected above): nothing to resolve, no sort paid.
        if nodes.size > 1 and not (self._nodes.take(nodes) == values).all():
            last_nodes, last = np.unique(nodes[::-1], return_index=True)
            nodes, values = last_nodes, values[::-1][last]
            self._nodes[nodes] = values
        self._update_ancestors(nodes)

    def find_prefix_sum(self, values: Any) -> np.ndarray:
        """Finds, for each v, the leaf i with cumsum[i - 1] <= v < cumsum[i].

        Schaul et al. 2016, Appendix B.2.1: the inverse-CDF lookup behind proportional sampling.
        The returned leaves always hold a positive priority, also where float rounding in the
        tree's partial sums would otherwise walk into a zero or padding leaf.

        Args:
          values: [B] (any shape) prefix sums in [0, total]; v == total counts as the last
            non-zero leaf.

        Returns:
          int64 leaf indices, the shape of `values`.

        Raises:
          ValueError: if the tree is empty or a value is NaN or outside [0, total].
        """
        total = self._check_not_empty()
        values = np.array(values, dtype=np.float64)  # A copy: clipped below.
        if values.size and not (values.min() >= 0.0 and values.max() <= total):
            bad = values[~((values >= 0.0) & (values <= total))]
            raise ValueError(f"values must lie in [0, total={total}], got {bad[:5]}")
        flat = values.ravel()
        np.minimum(flat, np.nextafter(total, 0.0), out=flat)
        return self._descend(flat).reshape(values.shape)

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Draws `batch_size` leaves with probability p_i / total, stratified.

        Schaul et al. 2016, Appendix B.2.1: draw k is the prefix sum v_k = (k + u_k) * total / B
        with u_k ~ U[0, 1), so each of the B equal segments of [0, total) holds exactly one draw.

        Args:
          batch_size: B > 0.
          rng: the generator for u.

        Returns:
          [B] int64 leaf indices; draw k lies in segment k.

        Raises:
          ValueError: if batch_size <= 0 or the tree holds no priority.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise ValueError(f"batch_size must be an int, got {batch_size!r}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        total = self._check_not_empty()
        values = np.arange(batch_size, dtype=np.float64)
        values += rng.random(batch_size)
        values *= total / batch_size  # [B]
        # (B - 1 + u) * total / B can round up to total itself.
        np.minimum(values, np.nextafter(total, 0.0), out=values)
        return self._descend(values)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Returns the leaves and capacity as plain arrays (np.savez, allow_pickle=False).

        Internal nodes are not saved: from_state_dict rebuilds them bit for bit, since every
        node is fl(left + right) of its children whichever order the leaves were set in.
        """
        return {
            "capacity": np.asarray(self.capacity, dtype=np.int64),
            "priorities": self._sum[self._num_leaves:self._num_leaves + self.capacity].copy(),
        }

    @classmethod
    def from_state_dict(cls, state: Any) -> "SumTree":
        """Builds a tree from state_dict() output (a dict or an NpzFile), validating it."""
        for key in ("capacity", "priorities"):
            if key not in state:
                raise ValueError(f"state is missing {key!r}; it has {sorted(state)}")
        capacity = np.asarray(state["capacity"])
        if capacity.shape != () or capacity.dtype.kind not in "iu":
            raise ValueError(f"state capacity must be an integer scalar, got {capacity!r}")
        tree = cls(int(capacity))
        priorities = np.asarray(state["priorities"])
        if priorities.shape != (tree.capacity,) or priorities.dtype.kind != "f":
            raise ValueError(
                f"state priorities must be float [{tree.capacity}], got {priorities.dtype} "
                f"{priorities.shape}")
        priorities = priorities.astype(np.float64)
        tree.check_priorities(priorities)
        leaves = slice(tree._num_leaves, tree._num_leaves + tree.capacity)
        tree._sum[leaves] = priorities
        tree._min[leaves] = np.where(priorities > 0.0, priorities, np.inf)
        tree._recompute_levels(tree._depth)
        return tree

    def _check_indices(self, indices: Any) -> np.ndarray:
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":
            raise ValueError(f"indices must be integers, got dtype {indices.dtype}")
        # uint64 values past 2**63 wrap to negatives here and fail the range check below.
        indices = indices.astype(np.int64, copy=False)
        # Read as uint64, a negative index is above 2**63: one max() checks both bounds.
        if indices.size and indices.view(np.uint64).max() >= self.capacity:
            bad = indices[(indices < 0) | (indices >= self.capacity)]
            raise ValueError(f"indices must lie in [0, {self.capacity}), got {bad[:5]}")
        return indices

    def check_priorities(self, priorities: np.ndarray) -> None:
        """Raises the ValueError `set` would raise for these float64 priorities, so that a
        caller can validate before it changes anything of its own."""
        # A bound of float64 max / capacity keeps every partial sum, the total included, finite.
        if not priorities.size:
            return
        # Fast accept: read as uint64, float64 values with the sign bit clear keep their order
        # and NaN lies above +inf, so one max() accepts exactly the non-negative values up to the
        # bound. Whatever fails it (-0.0 too, which is fine) gets the precise check below.
        if priorities.view(np.uint64).max() <= self._max_priority_bits:
            return
        # min and max propagate NaN, so these two reductions also reject NaN.
        bound = self._max_priority
        if not (priorities.min() >= 0.0 and priorities.max() <= bound):
            bad = priorities[~((priorities >= 0.0) & (priorities <= bound))]
            raise ValueError(
                f"priorities must be finite, non-negative and at most {bound:.3g} (float64 max "
                f"/ capacity, so the total cannot overflow), got {bad[:5]}")

    def _check_not_empty(self) -> float:
        total = self.total
        if not total > 0.0:
            raise ValueError("the sum tree holds no priority (total is 0); set some first")
        return total

    def _update_ancestors(self, nodes: np.ndarray) -> None:
        """Recomputes every ancestor of leaf `nodes` `[n]` from its children, bottom-up.

        Parents are recomputed as left + right, never incremented by the leaf's change: adding
        deltas would let rounding drift accumulate over millions of updates, and would apply a
        repeated index twice. A parent reached from two updated leaves is written twice with the
        same value, which is harmless, so the parents need no np.unique.
        """
        dense_nodes = _DENSE_LEVEL_NODES + _DENSE_NODES_PER_UPDATE * nodes.size
        # The parents of levels 1 .. dense_level number at most dense_nodes a level: they are
        # recomputed whole, the levels below by gathering and scattering the n parents.
        dense_level = min(self._depth, dense_nodes.bit_length())
        sparse_levels = self._depth - dense_level
        if sparse_levels:
            # Buffers reused on every level: the children of each parent, (left, right) as
            # complex `[n, 2]` and as float64 (left sum, left min, right sum, right min)
            # `[n, 4]`; the parents' new (sum, min) as complex `[n]`.
            children = np.empty((nodes.size, 2), np.complex128)
            parents = np.empty(nodes.size, np.complex128)
            left_sum, left_min, right_sum, right_min = children.view(np.float64).T
            sums, mins = parents.real, parents.imag
            # Row k: the ancestors k + 1 levels up, all levels in one call.
            ancestors = nodes >> np.arange(1, sparse_levels + 1)[:, None]  # [S, n]
            for level_nodes in ancestors:
                # mode="clip" (indices are in range) lets take write `children` unbuffered.
                self._pairs.take(level_nodes, axis=0, out=children, mode="clip")
                np.add(left_sum, right_sum, out=sums)
                np.minimum(left_min, right_min, out=mins)
                self._nodes[level_nodes] = parents
        self._recompute_levels(dense_level)

    def _recompute_levels(self, level: int) -> None:
        """Recomputes every node above `level`, whole level by whole level."""
        for left_sum, right_sum, sums, left_min, right_min, mins in self._levels[:level][::-1]:
            np.add(left_sum, right_sum, out=sums)
            np.minimum(left_min, right_min, out=mins)

    def _descend(self, values: np.ndarray) -> np.ndarray:
        """Returns the leaves of prefix sums `values` ([B], in [0, total)), left untouched."""
        remaining = values.copy()  # [B]
        nodes = np.ones(values.shape, dtype=np.int64)
        for _ in range(self._depth):
            nodes <<= 1
            left = self._sum[nodes]  # [B]
            go_right = remaining >= left
            remaining -= left * go_right
            nodes += go_right
        # Rounding can make `remaining - left` equal the right child's whole sum although
        # v < left + right exactly; the walk then runs off the right edge of that subtree into a
        # zero or padding leaf. Rare, so only those draws are redone with a guarded walk.
        stray = self._sum[nodes] == 0.0
        if stray.any():
            nodes[stray] = self._guarded_descend(values[stray])
        return nodes - self._num_leaves

    def _guarded_descend(self, values: np.ndarray) -> np.ndarray:
        """Like the plain walk, but keeps 0 <= v < sum(node) with sum(node) > 0 at every level.

        It goes right only into a subtree with a positive sum and clips v below that sum, so it
        ends on a positive leaf: the last one at or before v when rounding pushed v past it.
        """
        remaining = values.copy()  # [B]
        nodes = np.ones(values.shape, dtype=np.int64)
        for _ in range(self._depth):
            nodes <<= 1
            left = self._sum[nodes]  # [B]
            right = self._sum[nodes + 1]  # [B]
            go_right = (remaining >= left) & (right > 0.0)
            remaining = np.where(
                go_right,
                np.minimum(remaining - left, np.nextafter(right, 0.0)),
                np.minimum(remaining, np.nextafter(left, 0.0)))
            nodes += go_right
        return nodes
