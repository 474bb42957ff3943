"""The plan of an epoch: a value, computed from the cursor without moving it.

An iterator of :class:`seekdata.StatefulDataLoader` holds one :class:`Plan`: which epoch, from
which position, the first batch's number in the epoch, how many batches there are to its end
and which of them a ``skip_steps`` range leaves out. The batches themselves
(:class:`PlannedBatch`: epoch, batch in the epoch, dataset indices; the plan makes them, the
workers fetch them) are a pure function of the plan (:func:`seekable_batches`), and so is the
cursor after k of them were handed out (:func:`seekable_after`). Planning moves nothing; the
iterator commits the plan to the cursor when it hands out its first batch, so ``len(it)`` and
torch's iterator attributes never move the cursor.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from seekdata._core import partition as _partition
from seekdata._core.cursor import Snapshot
from seekdata._core.growth import GrownOrder, pad_origin

__all__ = [
    "Geometry",
    "Plan",
    "PlannedBatch",
    "plan_seekable",
    "seekable_after",
    "seekable_batches",
]

#: positions per call to the order after an epoch's first batch
_CHUNK = 1 << 16


@dataclass(slots=True)
class PlannedBatch:
    """One batch as the epoch's plan has it: its epoch, its number in the epoch on this rank
    (``batch``) and its dataset indices. Not frozen: a frozen dataclass's ``__init__`` costs
    three times as much, once per batch."""

    epoch: int
    batch: int
    indices: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.indices)


class Geometry(NamedTuple):
    """How a seekable sampler cuts an epoch: n positions over ``world`` ranks, this one
    ``rank``; the sampler's ``drop_last``; its order (``indices(epoch, positions)``)."""

    n: int
    world: int
    rank: int
    drop_last: bool
    order: Any

    @staticmethod
    def of(sampler: Any) -> Geometry:
        return Geometry(
            sampler.n, sampler.num_replicas, sampler.rank, sampler.drop_last, sampler.order
        )

    def local_len(self, start: int) -> int:
        return _partition.local_len(self.n, self.world, self.drop_last, start)

    def position_after(self, start: int, consumed: int) -> int:
        return _partition.position_after(self.n, self.world, self.drop_last, start, consumed)


class Plan(NamedTuple):
    """One epoch's batches from the cursor, as an iterator hands them out."""

    at: tuple[int, int]  # the cursor's (epoch, position) of the next iter(): the plan's source
    epoch: int
    start_position: int  # seekable: the global sample position of the first batch (replay: 0)
    origin: int  # where the partition began: padding repeats from here
    batch0: int  # the first batch's number in the epoch (on this rank)
    span: int  # batches from batch0 to the epoch's end, skipped ones included
    holes: tuple[tuple[int, int], ...] = ()  # in-epoch batch ranges skip_steps leaves out
    # seekable plans: how the epoch is cut, so its batches and cursor need nothing else
    geo: Geometry | None = None
    batch_size: int = 1
    drop_last: bool = False  # the batches' (the sampler's is in geo)
    local: int = 0  # positions this rank takes from start_position to the epoch's end
    # replay plans: the replay cursor's count where the plan starts (batches consumed in the
    # epoch; its end marker when the epoch ended), which is what that cursor calls a position
    start_batches: int = 0

    @property
    def num_batches(self) -> int:
        """Batches the iterator hands out."""
        return self.span - sum(b - a for a, b in self.holes)


def plan_seekable(
    geo: Geometry, at: tuple[int, int], now: Snapshot, batch_size: int, drop_last: bool
) -> Plan:
    """The plan of the epoch the next iter() runs: ``at`` is the cursor's ``next_start()`` (its
    epoch-end rules), ``now`` its value. Skipped global steps become in-epoch holes; a cursor in
    one jumps past it."""
    epoch, start = at
    local = geo.local_len(start)
    if local == 0:  # nothing left for any rank: the epoch's end
        start = geo.n
    rolled = epoch != now.epoch  # the epoch-end rule started the next epoch
    batch0 = now.batch if not rolled and start > 0 else 0
    origin = 0 if rolled else now.origin
    if isinstance(geo.order, GrownOrder):  # re-partitioned where the dataset grew
        origin = max(origin, pad_origin(geo.order, epoch))
    span = _partition.batches(local, batch_size, drop_last)
    holes: list[tuple[int, int]] = []
    if now.skips:  # skipped global steps in this epoch: in-epoch ranges
        per_epoch = _partition.batches(geo.local_len(0), batch_size, drop_last)
        holes = _partition.epoch_holes(
            [list(s) for s in now.skips], epoch, per_epoch, batch0, batch0 + span
        )
        if holes and holes[0][0] == batch0:  # the cursor is in one: jump it now
            jump = holes.pop(0)[1] - batch0
            start = geo.position_after(start, jump * batch_size)
            batch0, span, local = batch0 + jump, span - jump, geo.local_len(start)
    return Plan(
        at, epoch, start, origin, batch0, span, tuple(holes), geo, batch_size, drop_last, local
    )


def seekable_batches(plan: Plan) -> Iterator[PlannedBatch]:
    """The batches of a seekable ``plan`` on this rank, around its holes."""
    step, end = plan.batch0, plan.batch0 + plan.span
    for a, stop in [*plan.holes, (end, end)]:
        if step < a:
            yield from _run(plan, step, a - step)
        step = stop


def _run(plan: Plan, batch0: int, limit: int) -> Iterator[PlannedBatch]:
    """At most ``limit`` batches of ``plan``, numbered from ``batch0``."""
    geo, b = plan.geo, plan.batch_size
    assert geo is not None  # a seekable plan
    start, local, span = plan.start_position, plan.local, plan.span  # span: batches of local
    if batch0 != plan.batch0:  # after a hole
        start = geo.position_after(start, (batch0 - plan.batch0) * b)
        local = geo.local_len(start)
        span = _partition.batches(local, b, plan.drop_last)
    total = min(span * b, local, limit * b)  # the last may be short
    # the first chunk is one batch (a fast first batch, at resume too), then chunks of ~64K
    # positions: an order's call has a fixed cost (the Feistel's cycle-walking passes, ~0.2 ms
    # each), so few large calls keep the order's share of a batch small
    k0, chunk = 0, b
    while k0 < total:
        positions = _partition.local_positions(
            geo.n, geo.world, geo.rank, start, plan.origin, k0, min(k0 + chunk, total)
        )
        idx = tuple(np.asarray(geo.order.indices(plan.epoch, positions)).tolist())
        batch = batch0 + k0 // b
        for j in range(0, len(idx), b):
            yield PlannedBatch(plan.epoch, batch, idx[j : j + b])
            batch += 1
        k0 += chunk
        chunk = max(b, _CHUNK // b * b)


def seekable_after(plan: Plan, k: int) -> tuple[int, int]:
    """The cursor's (position, batch in the epoch) after ``k`` batches of a seekable ``plan``."""
    geo = plan.geo
    assert geo is not None  # a seekable plan
    batch = (
        _partition.kept_step(plan.batch0, k, list(plan.holes)) if plan.holes else plan.batch0 + k
    )
    if k >= plan.num_batches:
        return geo.n, batch
    consumed = (batch - plan.batch0) * plan.batch_size
    # P.position_after with the plan's local length known
    return (geo.n if consumed >= plan.local else plan.start_position + consumed * geo.world), batch
