"""A dataset that grew: its epochs' order across a declared growth.

A dataset is append-only when it grows (shards appended to a ``TarShards``, token files
appended, table rows appended): its first ``n0`` items keep their indices. A dataset says
whether it can grow so with :data:`APPEND_STABLE`, an attribute the loader reads and never
trusts alone (:func:`check_append`): ``False`` refuses every growth; otherwise a sharded
dataset must grow by whole shards, and a dataset with a ``stream_signature`` must have kept
its first items (``signature_of_first(n0)`` equals the signature recorded when it had ``n0``). A
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

from seekdata._core import source as _source
from seekdata._core.checks import check_counter, check_int
from seekdata._core.orders import Feistel, Order
from seekdata._core.rngkeys import key_words
from seekdata._core.state import StateMismatchError

__all__ = [
    "APPEND_STABLE",
    "GrownOrder",
    "Growth",
    "check_append",
    "check_growths",
    "first_items",
    "pad_origin",
    "signature_then",
]

_GROW = 0x47524F57  # "GROW": key of the merged rest of a growth epoch

#: The attribute a dataset declares growth with: ``True``, its first items keep their indices
#: and data when it grows (``TarShards``, ``TokenWindows``); ``False``, they do not
#: (``PackedDocuments`` re-packs its last block, a ``Mixture`` re-routes its stream), so every
#: growth is refused, with the dataset's ``grow_instead`` (what to do) in the message. A dataset
#: without it is taken as append-only when a growth is declared, as the user says.
APPEND_STABLE = "append_stable"


class Growth(NamedTuple):
    """The dataset had ``length`` items until the cursor (``epoch``, ``position``): the global
    position in that epoch, as a state's ``epoch`` and ``position`` say. What
    ``load_state_dict(state, grow=True)`` records, and what ``grown=`` declares."""

    epoch: int
    position: int
    length: int


def check_growths(grown: Any, n: int, where: str, dataset: Any = None) -> tuple[Growth, ...]:
    """``grown`` as sorted, normalised growths of a dataset that has ``n`` items now: each
    one's ``length`` below the next one's (and below ``n``), a position at or past the
    epoch's end moved to the next epoch's start; ``dataset`` (given) can have grown from each
    length (:func:`check_append`). Raises naming the fix."""
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
    for g in out if dataset is not None else ():
        check_append(dataset, g.length, where)
    return tuple(out)


def refuse_unstable(dataset: Any, where: str, label: str = "") -> None:
    """Raise when ``dataset`` declares ``append_stable = False``: why, and what to do instead."""
    if _source.append_stable(dataset):
        return
    name = type(dataset).__name__
    instead = _source.grow_instead(dataset)
    raise StateMismatchError(
        f"{where}: {label or 'the dataset'} ({name}) cannot grow: it declares {APPEND_STABLE} "
        f"= False, so after data is appended the items it held would not keep their indices "
        f"and data; {instead or 'start a new run on the grown dataset'}"
    )


def check_append(
    dataset: Any, n0: int, where: str, label: str = "", recorded: str | None = None
) -> None:
    """``dataset`` grew from its first ``n0`` items, append-only; raise where that cannot be:
    it declares ``append_stable = False``; it is sharded and ``n0`` is not a sum of its first
    shard sizes; or ``recorded`` (the ``stream_signature`` it had with ``n0`` items) is not
    the signature of its first ``n0`` items now (:func:`signature_then`)."""
    refuse_unstable(dataset, where, label)
    first_items(dataset, n0, f"{where}: {label}" if label else where)
    if (
        recorded is not None
        and signature_then(dataset, n0) != recorded
        and not _source.accepts_signature(dataset, recorded, n0)
    ):
        raise StateMismatchError(
            f"{where}: {label or 'the dataset'} did not grow append-only: the signature of its "
            f"first {n0} items is {signature_then(dataset, n0)!r} but {recorded!r} before it "
            f"grew; its old items were reordered, replaced or rewritten (token files in "
            f"another order, say); keep the old data in its order and append after it"
        )


def signature_then(dataset: Any, n: int | None) -> str | None:
    """The ``stream_signature`` ``dataset`` had with its first ``n`` items (None: all of them):
    its ``signature_of_first(n)``, or, without one, its ``stream_signature``; None when it
    has no stream signature."""
    here = _source.stream_signature(dataset)
    if here is None:
        return None
    first = _source.signature_of_first(dataset)
    if n is None or first is None or n == len(dataset):
        return here
    return str(first(n))


class _ShardPrefix(NamedTuple):
    shard_sizes: tuple[int, ...]


def first_items(dataset: Any, size: int, where: str = "DistributedSampler") -> Any:
    """What an order over the first ``size`` items of ``dataset`` reads from it: the dataset
    itself, or for a sharded one the shards that held them (a growth appends whole shards, or
    fills up the last shard of a dataset that declares ``shard_sizes_of_first``)."""
    sizes = _source.shard_sizes(dataset)
    if sizes is None or sum(sizes) == size:
        return dataset
    then = _source.shard_sizes_of_first(dataset)
    if then is not None:
        held = tuple(int(s) for s in then(size))
        if sum(held) != size:  # a declaration is never trusted blindly
            raise StateMismatchError(
                f"{where}: {type(dataset).__name__}.shard_sizes_of_first({size}) adds up to "
                f"{sum(held)}, not {size}; it must give the shard sizes of the first {size} "
                f"items; fix the dataset's shard_sizes_of_first"
            )
        return _ShardPrefix(held)
    prefix, total = [], 0
    for s in sizes:
        if total >= size:
            break
        prefix.append(int(s))
        total += int(s)
    if total != size:
        raise StateMismatchError(
            f"{where}: a sharded dataset grows by whole shards, so {size} items "
            f"must be the first shards' total; the first shards hold {total} there; declare "
            f"the length the dataset had (a sum of its first shard sizes), and append new "
            f"samples as shards of their own"
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
