"""A dataset that grew: its epochs' order across a declared growth.

A dataset is append-only when it grows (shards appended to a ``TarShards``, token files
appended, table rows appended): its first ``n0`` items keep their indices. A
:class:`Growth` says "the dataset had ``length`` items until the cursor (``epoch``,
``position``)"; from there on it has more. :class:`GrownOrder` is the sampler's order across
such growths, and the rule is that **new items join at once, in the epoch where the dataset
grew**:

- positions ``x < r`` of that epoch (``r = min(position, n0)``: already consumed) keep the old
  order;
- positions ``r <= x < n1`` are the rest: ``v = F(x - r)``, a Feistel permutation of
  ``[0, n1 - r)`` keyed by (seed, GROW, epoch, the growth's number); the item is the old
  order's at ``r + v`` when ``v < n0 - r`` (an old item not served yet), else the new item
  ``n0 + v - (n0 - r)``;
- later epochs: the order over ``n1``, as for any dataset of that length.

So the growth epoch is a permutation of the grown dataset: nothing consumed comes back, no old
item is lost, every new item is served once in it. A sequential order concatenates (the rest
of the old items, then the new ones, in index order), and so does a shard order (the new shards
read in order): mixing them would defeat reading shards sequentially. A growth at an epoch's end
(``position >= length``) takes effect at the next epoch's start.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from seekdata._core.orders import Feistel, Order
from seekdata._core.rngkeys import check_counter, check_int, key_words

__all__ = ["GrownOrder", "Growth", "check_growths", "first_items", "pad_origin"]

_GROW = 0x47524F57  # "GROW": key of the merged rest of a growth epoch


class Growth(NamedTuple):
    """The dataset had ``length`` items until the cursor (``epoch``, ``position``): the global
    position in that epoch, as a state's ``epoch`` and ``position`` say. What
    ``load_state_dict(state, grow=True)`` records, and what ``grown=`` declares."""

    epoch: int
    position: int
    length: int


def check_growths(grown: Any, n: int, where: str) -> tuple[Growth, ...]:
    """``grown`` as sorted, normalised growths of a dataset that has ``n`` items now: each
    one's ``length`` below the next one's (and below ``n``), a position at or past the
    epoch's end moved to the next epoch's start. Raises naming the fix."""
    if grown is None:
        return ()
    if isinstance(grown, Growth) or not isinstance(grown, Sequence) or isinstance(grown, str):
        raise TypeError(
            f"{where}: grown must be a list of seekdata.Growth; got {type(grown).__name__}; "
            f"pass e.g. grown=[seekdata.Growth(epoch=3, position=40960, length=1000000)]"
        )
    out = []
    for g in grown:
        if not isinstance(g, tuple | list) or len(g) != 3:
            raise TypeError(
                f"{where}: each growth must be a seekdata.Growth(epoch, position, length); got "
                f"{g!r}; copy it from `seekdata inspect` of a checkpoint saved after the growth"
            )
        epoch = check_counter(g[0], "Growth.epoch", where)
        position = check_int(g[1], "Growth.position", where, 0)
        length = check_int(g[2], "Growth.length", where, 1)
        if position >= length:  # the epoch was used up: the new items join the next one
            epoch, position = epoch + 1, 0
        out.append(Growth(epoch, position, length))
    out.sort()
    sizes = [g.length for g in out] + [n]
    if any(a >= b for a, b in itertools.pairwise(sizes)):
        raise ValueError(
            f"{where}: each growth must add items: the lengths before each growth, in order, "
            f"then the dataset's length now must increase; got {sizes}; a dataset that lost "
            f"or rewrote items is another dataset: start a new run on it"
        )
    return tuple(out)


class _ShardPrefix(NamedTuple):
    shard_sizes: tuple[int, ...]


def first_items(dataset: Any, size: int) -> Any:
    """What an order over the first ``size`` items of ``dataset`` reads from it: the dataset
    itself, or for a sharded one the shards that held them (a growth appends whole shards)."""
    sizes = getattr(dataset, "shard_sizes", None)
    if sizes is None or sum(sizes) == size:
        return dataset
    prefix, total = [], 0
    for s in sizes:
        if total >= size:
            break
        prefix.append(int(s))
        total += int(s)
    if total != size:
        raise ValueError(
            f"DistributedSampler: a sharded dataset grows by whole shards, so {size} items "
            f"must be the first shards' total; the first shards hold {total} there; declare "
            f"the length the dataset had (a sum of its first shard sizes)"
        )
    return _ShardPrefix(tuple(prefix))


def pad_origin(order: Any, epoch: int) -> int:
    """Where the partition of ``epoch`` pads from: a mid-epoch growth re-partitions the rest
    of its epoch from the position where the dataset grew (0 otherwise)."""
    if not isinstance(order, GrownOrder):
        return 0
    return max((g.position for g in order.growths if g.epoch == epoch), default=0)


class GrownOrder:
    """The order of a dataset across its growths (see the module docstring). ``make(size)``
    builds the plain order over ``size`` items (the sampler's order rule); ``mixes``: whether
    a growth epoch permutes its rest (feistel, torch) or concatenates (sequential, shards)."""

    def __init__(
        self,
        make: Callable[[int], Order],
        growths: tuple[Growth, ...],
        n: int,
        seed: int,
        mixes: bool,
    ) -> None:
        self.growths = growths
        self._n, self._seed, self._mixes = n, seed, mixes
        self._after = [g.length for g in growths[1:]] + [n]  # the length after each growth
        self._orders = {size: make(size) for size in {*(g.length for g in growths), n}}

    @property
    def n(self) -> int:
        return self._n

    def spec(self) -> str:
        return self._orders[self._n].spec()  # the growths are recorded beside it ("grown")

    def indices(self, epoch: int, positions: Any) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        last = -1
        for i, g in enumerate(self.growths):
            if g.epoch <= epoch:
                last = i
        if last == -1:
            first = self.growths[0]
            raise ValueError(
                f"DistributedSampler: epoch {epoch} is before the dataset grew (epoch "
                f"{first.epoch}, position {first.position}, from {first.length} items); its "
                f"positions cut the grown dataset; resume from a checkpoint saved in or after "
                f"epoch {first.epoch}"
            )
        if self.growths[last].epoch < epoch:
            return self._orders[self._after[last]].indices(epoch, pos)
        return self._in_growth_epoch(last, epoch, pos)

    def _before(self, i: int, epoch: int, pos: np.ndarray) -> np.ndarray:
        """The order of ``epoch`` just before growth ``i`` (over its ``length`` items)."""
        if i > 0 and self.growths[i - 1].epoch == epoch:
            return self._in_growth_epoch(i - 1, epoch, pos)
        return self._orders[self.growths[i].length].indices(epoch, pos)

    def _in_growth_epoch(self, i: int, epoch: int, pos: np.ndarray) -> np.ndarray:
        g = self.growths[i]
        n0, n1, r = g.length, self._after[i], min(g.position, g.length)
        out = np.empty(pos.shape, dtype=np.int64)
        done = pos < r
        if done.any():
            out[done] = self._before(i, epoch, pos[done])
        rest = ~done
        if rest.any():
            x = pos[rest] - r
            if self._mixes and n1 - r > 1:
                words = key_words(self._seed, (_GROW, epoch, i), 1)
                x = Feistel(n1 - r, int(words[0]) >> 1).indices(epoch, x)
            old = x < n0 - r
            v = np.empty(x.shape, dtype=np.int64)
            if old.any():
                v[old] = self._before(i, epoch, r + x[old])
            v[~old] = n0 + x[~old] - (n0 - r)
            out[rest] = v
        return out
