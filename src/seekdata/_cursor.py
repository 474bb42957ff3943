"""The cursor: where a stream stands, and the epoch-end rules, written once.

Every engine (seekable, replay, iterable) and the sampler hold a :class:`Cursor` and move it
only through its methods. Its fields are the state's: the epoch, the global position in it
(``end`` means the epoch's positions are used up), the origin of the current partition, this
rank's step in the epoch and whether the epoch's iterator finished (``exhausted``).

The epoch changes in three ways only:

- ``set_epoch(e)``: to (e, 0), unless the cursor is already in epoch e (a resumed run keeps
  its position); below an epoch a state restored, it warns (a buggy resume loop);
- an explicit move (``seek``, ``restore``);
- the torch-compatible roll-over: ``begin()`` (an ``iter()``) after the epoch's iterator
  finished, with no ``set_epoch`` since, starts epoch + 1. A state saved at the end but before
  the iterator finished first yields the (empty) rest of the epoch, as the uninterrupted loop.
"""

from __future__ import annotations

from typing import Any

from seekdata import state as S
from seekdata.rng import check_counter

__all__ = ["Cursor"]


class Cursor:
    """(epoch, position, origin, step, exhausted) and the rules that move them."""

    def __init__(self, end: int) -> None:
        self.end = end  # the position that means "the epoch ended" (the dataset length)
        self.epoch = 0
        self.position = 0
        self.origin = 0  # where this partition of the epoch began: padding repeats from here
        self.step = 0  # batches this rank consumed in the epoch (loaders only)
        self.exhausted = False  # this epoch's iterator finished: the next begin() may roll over
        self._explicit = False  # set_epoch/seek since the last begin(): an end is kept
        self._restored: int | None = None  # the epoch a state restored, until set_epoch
        self.skips: list[list[int]] = []  # global-step ranges [start, stop) never handed out

    @property
    def ended(self) -> bool:
        """Every position of the epoch is consumed."""
        return self.position >= self.end

    def next_start(self) -> tuple[int, int]:
        """(epoch, position) the next :meth:`begin` starts from; moves nothing."""
        if self.ended and self.exhausted and not self._explicit:
            return self.epoch + 1, 0
        return self.epoch, self.position

    def begin(self) -> bool:
        """Apply the epoch-end rules at ``iter()``; True when the epoch rolled over."""
        rolled = self.ended and self.exhausted and not self._explicit
        if rolled:
            self._enter(self.epoch + 1)
        self._explicit = self.exhausted = False
        return rolled

    def _enter(self, epoch: int) -> None:
        self.epoch, self.position, self.origin, self.step = epoch, 0, 0, 0
        self.exhausted = False

    def set_epoch(self, epoch: int, where: str, stacklevel: int = 2) -> bool:
        """Move to (epoch, 0), or keep the position in ``epoch``; True when the epoch changed.
        ``stacklevel``: frames from this call up to the user's line (2: a public method the user
        called directly), so the rewind warning points at the user's code."""
        epoch = check_counter(epoch, "epoch", where)
        S.warn_rewind(where, epoch, self._restored, stacklevel=stacklevel + 2)
        self._restored = None
        changed = epoch != self.epoch
        if changed:
            self._enter(epoch)
        self._explicit = True
        return changed

    def seek(self, position: int, epoch: int | None = None, step: int | None = None) -> None:
        """An explicit move to ``position`` of ``epoch`` (the current one by default): the
        partition restarts from the epoch's head; an end stays an end until ``set_epoch``."""
        if epoch is not None:
            self.epoch = epoch
        self.position, self.origin = position, 0
        if step is not None:
            self.step = step
        self._explicit = True

    def advance(self, position: int, step: int | None = None) -> None:
        """Samples were handed out: the cursor is now at ``position`` (and ``step``)."""
        self.position = position
        if step is not None:
            self.step = step

    def finish(self) -> None:
        """The epoch's iterator finished: every position is consumed."""
        self.position, self.exhausted = self.end, True

    def fields(self) -> dict[str, Any]:
        """The cursor's part of a state (without the step, which only loaders save)."""
        return {
            S.K_EPOCH: self.epoch,
            S.K_POSITION: self.position,
            S.K_EXHAUSTED: self.exhausted and self.ended,
        }

    def add_skip(self, start: int, stop: int) -> None:
        """Never hand out global steps ``[start, stop)``: merged into :attr:`skips` (sorted,
        disjoint), which the state records."""
        merged: list[list[int]] = []
        for a, b in sorted([*self.skips, [start, stop]]):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.skips = merged

    def origin_field(self) -> int:
        return self.origin if not self.ended else 0

    def restore(
        self, epoch: int, position: int, exhausted: bool, origin: int = 0, step: int = 0
    ) -> None:
        """Move to a validated state; a ``set_epoch`` below its epoch will warn."""
        self.epoch, self.step = epoch, step
        self.position = min(position, self.end)
        self.origin = min(origin, self.position) if not self.ended else 0
        self.exhausted = exhausted and self.ended
        self._explicit = False
        self._restored = epoch

    def resized(self, end: int) -> Cursor:
        """The same cursor over an epoch of ``end`` positions (a dataset whose length changed,
        between epochs): at the end if this one was, else at the start."""
        new = Cursor(end)
        new.epoch, new.exhausted, new._explicit = self.epoch, self.exhausted, self._explicit
        new.skips = self.skips
        new.position = end if self.ended else 0
        return new
