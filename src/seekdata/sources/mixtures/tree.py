"""The integer maths behind :class:`seekdata.Mixture`: the weight-balanced split tree (the
one-position Feistel order and global-RNG seeds it uses live with their vectorised twins:
:func:`seekdata.order.feistel_index`, :func:`seekdata._core.rngkeys.sample_seeds`).

Pure functions of integers, exact at any position: Python ints never overflow, so
``round(m * a_left / a_node)`` is computed exactly for m = 1e12 and weights of any size.
"""

from __future__ import annotations

import math
from fractions import Fraction

from seekdata._core.orders import feistel_index
from seekdata._core.rngkeys import sample_seeds

# One-position twins of the vectorised order and seeds: the same derivations, where they live.
feistel = feistel_index
global_seeds = sample_seeds


def up(value: Fraction) -> float:
    """The smallest float >= ``value`` (exact when ``value`` is a float)."""
    f = float(value)
    return f if Fraction(f) >= value else math.nextafter(f, math.inf)


class Tree:
    """The weight-balanced split tree. Internal node j sends ``round(m * a_left / a_sum)`` of
    the first m positions it receives to its left child. Children are node ids (>= 0) or
    leaves (``-1 - source``)."""

    def __init__(self, a: list[int]) -> None:
        self.left: list[int] = []
        self.right: list[int] = []
        self.a_left: list[int] = []
        self.a_sum: list[int] = []
        self._cuts: list[int] = []
        self.bounds = [0.0] * len(a)
        # (sources sorted by weight, their node's error bound, parent node, is the left child)
        stack = [(sorted(range(len(a)), key=lambda k: (-a[k], k)), 0.0, -1, True)]
        while stack:  # iterative: geometric weights make a chain as deep as K
            ks, bound, parent, is_left = stack.pop()
            node = self._split(ks, a) if len(ks) > 1 else -1 - ks[0]
            if parent >= 0:
                (self.left if is_left else self.right)[parent] = node
            if node < 0:
                self.bounds[ks[0]] = bound
                continue
            cut, total, a_left = self._cuts[node], self.a_sum[node], self.a_left[node]
            for part, weight, left in ((ks[:cut], a_left, True), (ks[cut:], total - a_left, False)):
                # a child's error: its own rounding (<= 1/2) plus its share of the parent's
                share = up(Fraction(weight, total))
                stack.append(
                    (part, up(Fraction(1, 2) + Fraction(share) * Fraction(bound)), node, left)
                )
        del self._cuts

    def _split(self, ks: list[int], a: list[int]) -> int:
        """A node for sources ``ks`` (sorted by weight, descending), split where the two
        halves' weights are closest; returns its id."""
        total = sum(a[k] for k in ks)
        best, cut, acc = total + 1, 1, 0
        for i in range(1, len(ks)):
            acc += a[ks[i - 1]]
            if abs(2 * acc - total) < best:
                best, cut = abs(2 * acc - total), i
        self.left.append(0)
        self.right.append(0)
        self.a_left.append(sum(a[k] for k in ks[:cut]))
        self.a_sum.append(total)
        self._cuts.append(cut)
        return len(self.left) - 1

    def locate(self, position: int) -> tuple[int, int]:
        """(source, positions the source received before ``position``): O(depth)."""
        if not self.left:
            return 0, position
        node, m = 0, position
        left, right, a_left, a_sum = self.left, self.right, self.a_left, self.a_sum
        while node >= 0:
            al, s = a_left[node], a_sum[node]
            before = (2 * m * al + s) // (2 * s)  # round(m * al / s), halves up
            if (2 * (m + 1) * al + s) // (2 * s) > before:
                m, node = before, left[node]
            else:
                m, node = m - before, right[node]
        return -1 - node, m

    def counts(self, position: int) -> list[int]:
        """Positions each source received before ``position``: O(K)."""
        out = [0] * len(self.bounds)
        if not self.left:
            out[0] = position
            return out
        stack = [(0, position)]
        while stack:
            node, m = stack.pop()
            if node < 0:
                out[-1 - node] = m
                continue
            al, s = self.a_left[node], self.a_sum[node]
            before = (2 * m * al + s) // (2 * s)
            stack.append((self.left[node], before))
            stack.append((self.right[node], m - before))
        return out
