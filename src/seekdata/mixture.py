"""Seekable weighted mixtures: which source, and which of its samples, sits at a position.

A :class:`Mixture` of K map-style sources with weights is itself a map-style dataset. Position
``p`` of mixture epoch ``e`` is position ``P = e * len(mixture) + p`` of one endless stream, and
everything about ``P`` is a pure function of counters, computed in O(log K) time from O(K)
tables:

1. **Which source.** The weights are exact rationals ``a_k / A``. A binary tree over the
   sources (built once, weight-balanced) splits the stream: a node that has received ``m``
   positions has sent ``round(m * a_left / a_node)`` of them left. Walking the tree with exact
   integer arithmetic gives the source of ``P`` *and* how many positions that source received
   before ``P`` (its own stream position ``q``), for any ``P`` (1e12 included), with no table
   of positions and no replay.
2. **Which sample.** Source k walks its own epochs: ``source_epoch = q // n_k``, and the sample
   is ``order_k(source_epoch, q % n_k)``, a seekable order (Feistel, or the shard-local order
   for tar shards) keyed by the source's seed. A small source repeats, reshuffled each time; a
   large one simply continues in the next mixture epoch.
3. **Its randomness.** The sample is fetched under the key (source seed, source epoch, index),
   where the source seed is hashed from (seed, source id): global RNG and
   :func:`seekdata.sample_rng` see the same numbers whatever else is in the mixture.

The bound: over every prefix of the stream, each source's count stays within
:attr:`Mixture.bound` of ``weight * p`` (1/2 for two sources, below 1 for three, below 2 for
any weights; docs/mixtures.md). The source pattern is the same every epoch; samples are shuffled.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence, Sized
from fractions import Fraction
from typing import Any

import numpy as np
import torch.utils.data

from seekdata import rng
from seekdata.order import Feistel, Order, make_order

__all__ = ["Mixture"]

_MIX_TAG = 0x4D495854  # "MIXT": per-source seeds are derive_key(seed, _MIX_TAG, source id)


def _fraction(value: Any, k: int) -> Fraction:
    where = "Mixture"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{where}: weights must be real numbers (int, float, Fraction); weight {k} is "
            f"{type(value).__name__} {value!r}; pass e.g. weights=[0.7, 0.3] or [7, 3]"
        )
    if isinstance(value, numbers.Rational):
        frac = Fraction(int(value.numerator), int(value.denominator))
    else:
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(
                f"{where}: weights must be finite; weight {k} is {f}; pass a positive number"
            )
        frac = Fraction(str(f))  # the shortest decimal that reads back as f: 0.3 is 3/10
    if frac <= 0:
        raise ValueError(
            f"{where}: weights must be > 0; weight {k} is {value!r}; drop the source instead "
            f"of giving it weight 0"
        )
    return frac


def _integer_weights(weights: Sequence[Any]) -> list[int]:
    """The weights as coprime positive integers with the same ratios (exact)."""
    fracs = [_fraction(w, k) for k, w in enumerate(weights)]
    denominator = math.lcm(*(f.denominator for f in fracs))
    ints = [int(f * denominator) for f in fracs]
    g = math.gcd(*ints)
    return [a // g for a in ints]


_M64 = (1 << 64) - 1
_ROUNDS = 8  # as seekdata.order's Feistel


def _mix64(x: int) -> int:
    """``seekdata.rng._mix64`` (splitmix64's finaliser) on one Python int."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _feistel(n: int, seed: int, epoch: int, x: int) -> int:
    """``seekdata.order.Feistel(n, seed).indices(epoch, [x])[0]`` for one position, in pure
    Python: ~5 µs instead of numpy's ~150 µs on a one-element array (tested equal)."""
    if n == 1:
        return 0
    keys = rng._key_cached(seed, (rng.ORDER, epoch), _ROUNDS)
    bits = max((n - 1).bit_length(), 2)
    b = bits - (bits >> 1)
    mask_a, mask_b = (1 << (bits - b)) - 1, (1 << b) - 1
    rounds = [(key, i % 2 == 0) for i, key in enumerate(keys)]
    m1, m2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
    while True:  # cycle walking: the domain is < 2n
        left, right = x >> b, x & mask_b
        for key, even in rounds:  # _mix64 inlined: this loop is the per-sample cost
            v = (right if even else left) ^ key
            v ^= v >> 30
            v = (v * m1) & _M64
            v ^= v >> 27
            v = (v * m2) & _M64
            v ^= v >> 31
            if even:
                left ^= v & mask_a
            else:
                right ^= v & mask_b
        x = (left << b) | right
        if x < n:
            return x


def _global_seeds(seed: int, epoch: int, index: int) -> list[int]:
    """``seekdata.rng.global_seeds(seed, epoch, [index])[0]`` for one index (tested equal)."""
    key = rng._key_cached(seed, (rng.SAMPLE, epoch), 4)
    h = _mix64(_mix64(index ^ key[0]) ^ key[1])
    return [h & 0xFFFFFFFF, h >> 32, h ^ key[2]]


def _up(value: Fraction) -> float:
    """The smallest float >= ``value`` (exact when ``value`` is a float)."""
    f = float(value)
    return f if Fraction(f) >= value else math.nextafter(f, math.inf)


class _Tree:
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
                share = _up(Fraction(weight, total))
                stack.append(
                    (part, _up(Fraction(1, 2) + Fraction(share) * Fraction(bound)), node, left)
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


class Mixture(torch.utils.data.Dataset):
    """K map-style datasets interleaved by weight, seekable in O(log K) at any position.

    Args:
        datasets: the sources: map-style datasets (``__len__`` and ``__getitem__``), e.g.
            :class:`seekdata.wds.TarShards`, any mix.
        weights: one positive weight per source (int, float or Fraction; floats are read as
            their shortest decimal, so 0.3 is exactly 3/10). Only the ratios matter.
        length: samples per mixture epoch (``len(mixture)``); default: the sources' total.
        seed: keys the sources' orders and their samples' randomness.
        order: each source's order: ``"feistel"`` (default), ``"shards"`` (shard-local for
            sources with ``shard_sizes``, Feistel for the others) or ``"sequential"``.
        source_ids: the ids that key each source's seed; default ``0 .. K-1``. Give a source
            the same id in two mixtures and its samples get the same randomness in both.
        reseed_global_rng: reseed torch/numpy/``random`` global RNG from the sample's key
            around each fetch, as :class:`seekdata.StatefulDataLoader` does; give both the
            same value (a loader that does not reseed does not restore the caller's RNG).

    The mixture shuffles itself: iterate it in sequential order (``StatefulDataLoader``'s
    default, or ``DistributedSampler(mixture, shuffle=False)``); ``shuffle=True`` raises.
    Inside a seekdata loader the mixture epoch is the loader's; elsewhere, :meth:`set_epoch`.
    """

    #: Read by :class:`seekdata.DistributedSampler`: shuffling positions again is refused.
    shuffles_itself = True

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Sequence[Any],
        *,
        length: int | None = None,
        seed: int = 0,
        order: str = "feistel",
        source_ids: Sequence[int] | None = None,
        reseed_global_rng: bool = True,
    ) -> None:
        where = "Mixture"
        if not isinstance(datasets, Sequence) or isinstance(datasets, str | bytes):
            raise TypeError(
                f"{where}: datasets must be a list of map-style datasets; got "
                f"{type(datasets).__name__}; pass e.g. [web, code]"
            )
        if not isinstance(weights, Sequence) or isinstance(weights, str | bytes):
            raise TypeError(
                f"{where}: weights must be a list of numbers; got {weights!r}; pass e.g. [0.7, 0.3]"
            )
        if len(datasets) == 0 or len(weights) != len(datasets):
            raise ValueError(
                f"{where}: one weight per dataset and at least one dataset; got "
                f"{len(datasets)} datasets and {len(weights)} weights"
            )
        self.seed = rng.check_counter(seed, "seed", where)
        if not isinstance(reseed_global_rng, bool):
            raise TypeError(
                f"{where}: reseed_global_rng must be a bool; got {reseed_global_rng!r}; pass "
                f"the loader's value (True by default)"
            )
        self.reseed_global_rng = reseed_global_rng
        if order not in ("feistel", "shards", "sequential"):
            raise ValueError(
                f"{where}: order must be 'feistel', 'shards' or 'sequential'; got {order!r}; "
                f"use 'shards' to keep tar shards' shard-local order"
            )
        self.datasets = list(datasets)
        self.sizes = [_source_length(d, k) for k, d in enumerate(self.datasets)]
        ids = list(range(len(datasets))) if source_ids is None else list(source_ids)
        if len(ids) != len(datasets) or len(set(ids)) != len(ids):
            raise ValueError(
                f"{where}: source_ids must be {len(datasets)} distinct ints, one per dataset; "
                f"got {source_ids!r}; pass e.g. source_ids=[0, 1] or leave it unset"
            )
        self.source_ids = [rng.check_counter(i, "source id", where) for i in ids]
        self._a = _integer_weights(weights)
        self._tree = _Tree(self._a)
        total = sum(self.sizes) if length is None else length
        self.length = rng.check_counter(total, "length", where)
        if self.length < 1:
            raise ValueError(
                f"{where}: length must be >= 1; got {length}; pass the samples per mixture "
                f"epoch, or leave it unset for the sources' total"
            )
        self.order = order
        self.source_seeds = [
            rng.derive_key(self.seed, _MIX_TAG, i, words=1)[0] for i in self.source_ids
        ]
        self._orders = [self._make_order(k) for k in range(len(self.datasets))]
        self.epoch = 0

    def _make_order(self, k: int) -> Order:
        n, seed, ds = self.sizes[k], self.source_seeds[k], self.datasets[k]
        if self.order == "shards" and getattr(ds, "shard_sizes", None) is None:
            return Feistel(n, seed)
        return make_order(self.order, n, seed, dataset=ds)

    # --- the pure maps --------------------------------------------------------------------------

    @property
    def weights(self) -> tuple[Fraction, ...]:
        """The normalised weights, exact: each source's share of the stream."""
        total = sum(self._a)
        return tuple(Fraction(a, total) for a in self._a)

    @property
    def bound(self) -> float:
        """Over every prefix ``p`` of the stream, ``|count_k(p) - weight_k * p| <= bound``: the
        exact bound of this tree, rounded up to a float."""
        return max(self._tree.bounds)

    def _stream_position(self, position: int, epoch: int | None, where: str) -> int:
        position = rng.check_counter(position, "position", where)
        epoch = self.epoch if epoch is None else rng.check_counter(epoch, "epoch", where)
        return epoch * self.length + position

    def locate(self, position: int, epoch: int | None = None) -> tuple[int, int, int]:
        """``(source, source_epoch, index)`` at ``position`` of ``epoch`` (default: the current
        one). ``position`` may pass ``len(self)``: it then continues into later epochs."""
        stream = self._stream_position(position, epoch, "Mixture.locate")
        k, q = self._tree.locate(stream)
        n = self.sizes[k]
        source_epoch = q // n
        order = self._orders[k]
        if isinstance(order, Feistel):
            return k, source_epoch, _feistel(n, order.seed, source_epoch, q % n)
        return k, source_epoch, int(order.indices(source_epoch, np.array([q % n]))[0])

    def counts(self, position: int, epoch: int | None = None) -> list[int]:
        """How many of the stream's positions before (``epoch``, ``position``) each source got."""
        return self._tree.counts(self._stream_position(position, epoch, "Mixture.counts"))

    def sample_generator(self, source: int, source_epoch: int, index: int) -> np.random.Generator:
        """The stream :func:`seekdata.sample_rng` gives that sample: to reproduce it elsewhere."""
        return rng.sample_generator(self.source_seeds[source], source_epoch, index)

    def set_epoch(self, epoch: int) -> None:
        """The mixture epoch used outside a seekdata loader (inside one, the loader's)."""
        self.epoch = rng.check_counter(epoch, "epoch", "Mixture.set_epoch")

    # --- Dataset --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, position: int) -> Any:
        if isinstance(position, bool) or not isinstance(position, int | np.integer):
            raise TypeError(f"Mixture: index must be an int; got {type(position).__name__}")
        if not 0 <= position < self.length:
            raise IndexError(f"Mixture: index must be in [0, {self.length}); got {position}")
        fetch = rng._fetch
        in_fetch = fetch.index >= 0  # a seekdata loader is fetching: its epoch is ours
        k, source_epoch, index = self.locate(int(position), fetch.epoch if in_fetch else None)
        seed = self.source_seeds[k]
        seeds = _global_seeds(seed, source_epoch, index) if self.reseed_global_rng else None
        # in the main process outside a loader, put the caller's global RNG back afterwards;
        # inside a seekdata loader that reseeds, the loader does it once per batch
        in_main = torch.utils.data.get_worker_info() is None
        saved = rng.capture_globals() if seeds is not None and in_main and not in_fetch else None
        outer = (fetch.seed, fetch.epoch, fetch.index, fetch.fresh)
        rng.enter_sample(seed, source_epoch, index, seeds)
        try:
            return self.datasets[k][index]
        finally:
            fetch.seed, fetch.epoch, fetch.index, fetch.fresh = outer
            if saved is not None:  # the main process: its global RNG as it was
                rng.restore_globals(saved)

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{type(d).__name__}(n={n}) x {float(w):.4g}"
            for d, n, w in zip(self.datasets, self.sizes, self.weights, strict=True)
        )
        return f"Mixture([{parts}], length={self.length}, seed={self.seed})"


def _source_length(dataset: Any, k: int) -> int:
    where = "Mixture"
    if isinstance(dataset, torch.utils.data.IterableDataset) or not (
        isinstance(dataset, Sized) and hasattr(dataset, "__getitem__")
    ):
        raise TypeError(
            f"{where}: every source must be map-style (__len__ and __getitem__), because the "
            f"mixture reads sample i of a source directly; source {k} is "
            f"{type(dataset).__name__}; wrap shards in seekdata.wds.TarShards"
        )
    n = len(dataset)
    if n < 1:
        raise ValueError(
            f"{where}: every source must hold at least 1 sample; source {k} "
            f"({type(dataset).__name__}) has len 0; drop it or fix its path"
        )
    return n
