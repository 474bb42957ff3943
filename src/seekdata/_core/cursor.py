"""The cursor: where a stream stands, and the epoch-end rules, written once.

Every engine (seekable, replay, iterable) and the sampler hold a :class:`Cursor` and move it
only through its methods. Its fields are the state's: the epoch, the position in it, in the
unit the cursor was made with (``unit``: global sample positions, or batches on the paths that
cannot seek; ``state["unit"]`` says which), ``end`` meaning the epoch is used up, the origin of
the current partition, this rank's batch in the epoch and whether the epoch's iterator finished
(``exhausted``).

The epoch changes in three ways only:

- ``set_epoch(e)``: to (e, 0), unless the cursor is already in epoch e (a resumed run keeps
  its position); below an epoch a state restored, it warns (a buggy resume loop);
- an explicit move (``seek``, ``restore``);
- the torch-compatible roll-over: ``begin()`` (an ``iter()``) after the epoch's iterator
  finished, with no ``set_epoch`` since, starts epoch + 1. A state saved at the end but before
  the iterator finished first yields the (empty) rest of the epoch, as the uninterrupted loop.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from seekdata._core import state as _state
from seekdata._core.checks import check_counter

__all__ = ["Cursor", "Snapshot"]


class Snapshot(NamedTuple):
    """Where a cursor stands: one immutable value, replaced whole at every move, so a reader on
    another thread (an async checkpoint calling ``state_dict()``) never sees half a move."""

    epoch: int = 0
    position: int = 0
    origin: int = 0  # where this partition of the epoch began: padding repeats from here
    batch: int = 0  # this rank's batches consumed in the epoch (loaders only; state["step"])
    exhausted: bool = False  # this epoch's iterator finished: the next begin() may roll over
    skips: tuple[tuple[int, int], ...] = ()  # global-step ranges [start, stop) never handed out


class Cursor:
    """(epoch, position, origin, batch, exhausted, skips) and the rules that move them."""

    def __init__(self, end: int, unit: str = _state.UNITS[0]) -> None:
        self.end = end  # the position that means "the epoch ended" (the dataset length)
        self.unit = unit  # what the position counts (samples, or batches: state["unit"])
        self.snapshot = Snapshot()
        self._explicit = False  # set_epoch/seek since the last begin(): an end is kept
        self._restored: int | None = None  # the epoch a state restored, until set_epoch

    # one field each, read from the current value
    epoch = property(lambda self: self.snapshot.epoch)
    position = property(lambda self: self.snapshot.position)
    origin = property(lambda self: self.snapshot.origin)
    batch = property(lambda self: self.snapshot.batch)
    exhausted = property(lambda self: self.snapshot.exhausted)
    skips = property(lambda self: self.snapshot.skips)

    @property
    def ended(self) -> bool:
        """Every position of the epoch is consumed."""
        return self.snapshot.position >= self.end

    def next_start(self) -> tuple[int, int]:
        """(epoch, position) the next :meth:`begin` starts from; moves nothing."""
        now = self.snapshot
        if now.position >= self.end and now.exhausted and not self._explicit:
            return now.epoch + 1, 0
        return now.epoch, now.position

    def begin(self) -> bool:
        """Apply the epoch-end rules at ``iter()``; True when the epoch rolled over."""
        now = self.snapshot
        rolled = now.position >= self.end and now.exhausted and not self._explicit
        if rolled:
            self.snapshot = Snapshot(now.epoch + 1, skips=now.skips)
        elif now.exhausted:
            self.snapshot = now._replace(exhausted=False)
        self._explicit = False
        return rolled

    def enter(self, position: int, batch: int) -> None:
        """An iterator starts the plan it made from :meth:`next_start`: apply the epoch-end
        rules (:meth:`begin`), then stand at the plan's first ``position`` and ``batch``."""
        self.begin()
        self.snapshot = self.snapshot._replace(position=position, batch=batch)

    def set_epoch(self, epoch: int, where: str, stacklevel: int = 2) -> bool:
        """Move to (epoch, 0), or keep the position in ``epoch``; True when the epoch changed.
        ``stacklevel``: frames from this call up to the user's line (2: a public method the user
        called directly), so the rewind warning points at the user's code."""
        epoch = check_counter(epoch, "epoch", where)
        _state.warn_rewind(where, epoch, self._restored, stacklevel=stacklevel + 2)
        self._restored = None
        changed = epoch != self.snapshot.epoch
        if changed:
            self.snapshot = Snapshot(epoch, skips=self.snapshot.skips)
        self._explicit = True
        return changed

    def seek(self, position: int, epoch: int | None = None, batch: int | None = None) -> None:
        """An explicit move to ``position`` of ``epoch`` (the current one by default): the
        partition restarts from the epoch's head; an end stays an end until ``set_epoch``."""
        now = self.snapshot
        self.snapshot = now._replace(
            epoch=now.epoch if epoch is None else epoch,
            position=position,
            origin=0,
            batch=now.batch if batch is None else batch,
        )
        self._explicit = True

    def advance(self, position: int, batch: int | None = None) -> None:
        """Samples were handed out: the cursor is now at ``position`` (and ``batch``)."""
        now = self.snapshot
        self.snapshot = now._replace(position=position, batch=now.batch if batch is None else batch)

    def finish(self) -> None:
        """The epoch's iterator finished: every position is consumed."""
        self.snapshot = self.snapshot._replace(position=self.end, exhausted=True)

    def fields(self, now: Snapshot | None = None) -> dict[str, Any]:
        """The cursor's part of a state (without the batch, which only loaders save), from one
        value of the cursor (``now``: its current :attr:`snapshot`)."""
        now = self.snapshot if now is None else now
        return {
            _state.K_EPOCH: now.epoch,
            _state.K_POSITION: now.position,
            _state.K_UNIT: self.unit,
            _state.K_EXHAUSTED: now.exhausted and now.position >= self.end,
        }

    def add_skip(self, start: int, stop: int) -> None:
        """Never hand out global steps ``[start, stop)``: merged into :attr:`skips` (sorted,
        disjoint), which the state records."""
        merged: list[list[int]] = []
        for a, b in sorted([*map(list, self.snapshot.skips), [start, stop]]):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.snapshot = self.snapshot._replace(skips=tuple((a, b) for a, b in merged))

    def origin_field(self, now: Snapshot | None = None) -> int:
        now = self.snapshot if now is None else now
        return now.origin if now.position < self.end else 0

    def restore(
        self,
        epoch: int,
        position: int,
        exhausted: bool,
        origin: int = 0,
        batch: int = 0,
        skips: Any = (),
    ) -> None:
        """Move to a validated state; a ``set_epoch`` below its epoch will warn."""
        position = min(position, self.end)
        ended = position >= self.end
        self.snapshot = Snapshot(
            epoch,
            position,
            min(origin, position) if not ended else 0,
            batch,
            exhausted and ended,
            tuple((int(a), int(b)) for a, b in skips),
        )
        self._explicit = False
        self._restored = epoch

    def resized(self, end: int) -> Cursor:
        """The same cursor over an epoch of ``end`` positions (a dataset whose length changed,
        between epochs): at the end if this one was, else at the start."""
        new = Cursor(end, self.unit)
        now = self.snapshot
        new.snapshot = Snapshot(now.epoch, end if self.ended else 0, 0, 0, now.exhausted, now.skips)
        new._explicit = self._explicit
        return new
