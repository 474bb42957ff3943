"""A :class:`seekdata.Mixture` source that grew: its stream position -> (source epoch, index).

A source of ``n0`` items walks epochs of ``n0``: position ``q`` is offset ``q % n0`` of epoch
``q // n0``. When it grows to ``n1`` (append-only: the first ``n0`` items keep their indices)
after delivering ``Q`` items, its current epoch ``e_g = Q // n0`` has ``r = Q % n0`` items
consumed. The new items join **at once**, in that epoch, which becomes an epoch of ``n1``:

- offsets ``x < r`` (consumed) are what they were;
- offsets ``r <= x < n1`` are the merged remainder: ``v = F(x - r)``, a permutation of
  ``[0, n1 - r)`` keyed by (source seed, growth tag, ``e_g``, growth number), and the item is
  the old order's offset ``r + v`` if ``v < n0 - r`` (an unconsumed old item), else the new
  item ``n0 + v - (n0 - r)``. For ``order="sequential"`` F is the identity (the epoch is the
  sequential order over ``n1``); for ``order="shards"`` the old remainder comes first, then the
  new items in their own shard-local order (mixing them would defeat reading shards in turn);
- epochs after ``e_g`` are the source's order over ``n1``.

So every source epoch is a permutation of the source as it stands at the epoch's end: nothing
consumed comes back, nothing old is lost, each new item appears once in ``e_g``. Each growth
opens a *regime* (where its epoch starts in the source's stream, that epoch, ``n``); a lookup
bisects the regimes and costs O(1) Feistel rounds per growth merged into the same epoch.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from seekdata._core import source as _source
from seekdata._core import streams as _streams
from seekdata._core.orders import Feistel, Order, feistel_index, make_order

GROW_TAG = 0x47524F57  # "GROW": a merged remainder's key is derive_key(seed, GROW_TAG, e_g, g)


class Regime(NamedTuple):
    """From source position ``start`` on, epochs of ``n`` items starting with ``epoch``;
    ``r`` items of ``epoch`` were consumed under the previous regime (``n0`` items then)."""

    start: int
    epoch: int
    n: int
    r: int
    n0: int
    order: Order  # the source's order over n: epochs after the merged one
    merge: Order | None  # the remainder's permutation (shuffled) or the new items' order
    shuffled: bool  # merge permutes the whole remainder (feistel), not only the new items


def _at(order: Order, epoch: int, x: int) -> int:
    if isinstance(order, Feistel):
        return feistel_index(order.n, order.seed, epoch, x)
    return int(order.indices(epoch, np.array([x]))[0])


class _Shards:
    """``shard_sizes`` of a part of a sharded dataset, for its shard-local order."""

    def __init__(self, shard_sizes: Sequence[int]) -> None:
        self.shard_sizes = list(shard_sizes)


def shard_part(dataset: Any, lo: int, hi: int) -> _Shards | None:
    """The shards of ``dataset`` that hold items ``[lo, hi)`` exactly, or None where ``lo`` or
    ``hi`` falls inside a shard (or the dataset has no shards): then a Feistel order. The first
    ``hi`` items of a dataset that declares ``shard_sizes_of_first`` are the shards it had then."""
    sizes = _source.shard_sizes(dataset)
    if sizes is None:
        return None
    then = _source.shard_sizes_of_first(dataset)
    if lo == 0 and then is not None and hi < sum(int(s) for s in sizes):
        return _Shards(then(hi))
    ends = np.cumsum([0, *(int(s) for s in sizes)]).tolist()
    if lo not in ends or hi not in ends:
        return None
    return _Shards(sizes[ends.index(lo) : ends.index(hi)])


class SourceLengths:
    """The regimes of one source that grew; ``locate(q)`` -> (source epoch, index)."""

    def __init__(
        self, n: int, seed: int, kind: str, dataset: Any, counts: Sequence[tuple[int, int]]
    ) -> None:
        """``counts``: (items delivered when it grew, new length) per growth, in order."""
        self.regimes = [
            Regime(0, 0, n, 0, n, self._order(kind, n, seed, dataset, 0, n), None, False)
        ]
        for g, (q, n1) in enumerate(counts, start=1):
            last = self.regimes[-1]
            epoch, r = self._epoch(last, q)
            merge: Order | None = None
            if r and kind == "feistel":
                merge = Feistel(n1 - r, _streams.derive_key(seed, GROW_TAG, epoch, g, words=1)[0])
            elif r and kind == "shards":  # the new items' own order, after the old remainder
                key = _streams.derive_key(seed, GROW_TAG, epoch, g, words=1)[0]
                merge = self._order(kind, n1 - last.n, key, dataset, last.n, n1)
            order = self._order(kind, n1, seed, dataset, 0, n1)
            self.regimes.append(
                Regime(q - r, epoch, n1, r, last.n, order, merge, kind == "feistel")
            )
        self.starts = [regime.start for regime in self.regimes]

    @staticmethod
    def _order(kind: str, n: int, seed: int, dataset: Any, lo: int, hi: int) -> Order:
        part = shard_part(dataset, lo, hi) if kind == "shards" else None
        if kind == "shards" and part is None:
            return Feistel(n, seed)
        return make_order(kind, n, seed, dataset=part)

    @staticmethod
    def _epoch(regime: Regime, q: int) -> tuple[int, int]:
        e, x = divmod(q - regime.start, regime.n)
        return regime.epoch + e, x

    def locate(self, q: int) -> tuple[int, int]:
        """(source epoch, index) of the source's stream position ``q``: O(log growths)."""
        g = bisect.bisect_right(self.starts, q) - 1
        epoch, x = self._epoch(self.regimes[g], q)
        return epoch, self._index(g, epoch, x)

    def _index(self, g: int, epoch: int, x: int) -> int:
        regime = self.regimes[g]
        while g and epoch == regime.epoch and regime.r:  # the epoch a growth merged into
            if x >= regime.r:  # the merged remainder (below r: consumed before the growth)
                old_rest, v = regime.n0 - regime.r, x - regime.r
                if regime.merge is not None and regime.shuffled:
                    v = _at(regime.merge, 0, v)
                if v >= old_rest:  # a new item
                    if regime.merge is not None and not regime.shuffled:  # shards: own order
                        return regime.n0 + _at(regime.merge, epoch, v - old_rest)
                    return regime.n0 + v - old_rest
                x = regime.r + v  # an unconsumed old item at this offset of the old order
            g -= 1
            regime = self.regimes[g]
        return _at(regime.order, epoch, x)


def grown_sources(
    growths: Sequence[tuple[int, int, int, int]],
    order: str,
    datasets: Sequence[Any],
    seeds: Sequence[int],
    counts_at: Callable[[int], list[int]],
) -> dict[int, SourceLengths]:
    """The regimes of each source that grew, from the growth records ``(source, at, n0, n1)``
    (sorted by ``at``) and the mixture's counts at a stream position (what it had delivered)."""
    out = {}
    for k in sorted({g[0] for g in growths}):
        mine = [g for g in growths if g[0] == k]
        kind = order
        if kind == "shards" and _source.shard_sizes(datasets[k]) is None:
            kind = "feistel"  # as the mixture's own order for a source without shards
        counts = [(counts_at(at)[k], n1) for _, at, _, n1 in mine]
        out[k] = SourceLengths(mine[0][2], seeds[k], kind, datasets[k], counts)
    return out
