"""The seekable path: a seekdata sampler's cursor; each epoch planned by arithmetic, O(1)."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from seekdata import _partition as P
from seekdata import state as S
from seekdata._engines.keyed import WHERE, KeyedEngine
from seekdata._fetch import BatchKey
from seekdata.sampler import DistributedSampler, dataset_length


def plan_batches(
    sampler: DistributedSampler,
    epoch: int,
    start: int,
    batch_size: int,
    drop_last: bool,
    step0: int,
) -> Iterator[BatchKey]:
    """This rank's batches of ``epoch`` from global position ``start``, as keys."""
    local = sampler.local_len(start)
    total = min(P.batches(local, batch_size, drop_last) * batch_size, local)  # last may be short
    b = batch_size
    k0, chunk = 0, b  # the first chunk is one batch (fast first batch), then it grows
    while k0 < total:
        idx = sampler.local_indices(epoch, start, k0, min(k0 + chunk, total)).tolist()
        for j in range(0, len(idx), b):
            yield BatchKey(epoch, step0 + (k0 + j) // b, tuple(idx[j : j + b]))
        k0 += chunk
        chunk = min(chunk * 4, max(b, 8192 // b * b))


class BatchIndices(torch.utils.data.BatchSampler):
    """``loader.batch_sampler`` with torch's meaning: iterating it gives this rank's index lists
    of the current epoch from the cursor, and ``len()`` is the batches of a full epoch.

    It is a view: iterating it never moves the cursor (only batches the loader hands out do).
    Frameworks rebuild loaders from it; the rebuilt loader gets the right indices but fetches
    them without seekdata's per-sample randomness, so accelerate's rebuilds are refused (see
    :mod:`seekdata.integrations.accelerate`).
    """

    def __init__(self, engine: SeekableEngine, sampler: DistributedSampler) -> None:
        super().__init__(sampler, engine.batch_size or 1, engine.drop_last)
        self._engine = weakref.proxy(engine)
        self._seeker = sampler

    def __iter__(self) -> Iterator[list[int]]:
        if "accelerate" in sys.modules:  # a rebuild by accelerate would drop the keyed fetch
            from seekdata.integrations.accelerate import _refuse_rebuild

            _refuse_rebuild(sys._getframe(1))
        s = self._seeker
        epoch, start = s.next_start()
        keys = plan_batches(s, epoch, start, self.batch_size, self.drop_last, 0)
        return (list(key.indices) for key in keys)

    def __len__(self) -> int:
        return int(self._engine.full_len())


class SeekableEngine(KeyedEngine):
    """Batches from a :class:`seekdata.DistributedSampler`'s cursor: O(1) setup and resume."""

    def __init__(self, sampler: DistributedSampler, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.dataset = dataset
        self.sampler = sampler
        self.cursor = sampler.cursor
        self.b = self.batch_size or 1
        self.epoch, self.start, self.step0 = 0, 0, 0
        # torch's rule: batch_size=None means no batch sampler
        self.batch_sampler = None if self.batch_size is None else BatchIndices(self, sampler)

    def _resized(self) -> DistributedSampler | None:
        """torch's default samplers read len(dataset) at every iter() and len(); the loader's
        own sampler does too: rebuilt (same seed, epoch and epoch-end flags) when it changed."""
        old = self.sampler
        if not self.owns_sampler or dataset_length(self.dataset, WHERE) == old.n:
            return None
        new = DistributedSampler(self.dataset, 1, 0, shuffle=old.shuffle, seed=old.seed)
        new.cursor = old.cursor.resized(new.n)
        return new

    def iterate(self, place: Callable[[Any], Any] | None) -> Iterator[Any]:
        resized = self._resized()
        if resized is not None:
            old = self.sampler
            if 0 < old.position < old.n:
                raise ValueError(
                    f"{WHERE}: len(dataset) changed from {old.n} to {resized.n} in the middle "
                    f"of epoch {old.epoch} (at position {old.position}), where the cursor "
                    f"counts the old length; finish the epoch, or call "
                    f"set_epoch({old.epoch + 1}), before iterating"
                )
            self.sampler, self.cursor = resized, resized.cursor
            if self.batch_sampler is not None:
                self.batch_sampler = BatchIndices(self, resized)
        return super().iterate(place)

    def full_len(self) -> int:
        sampler = self._resized() or self.sampler
        return P.batches(sampler.local_len(0), self.b, self.drop_last)

    # --- planning -------------------------------------------------------------------------------

    def begin(self) -> None:
        self.epoch, self.start = self.sampler.begin()
        self.step0 = self.cursor.step if self.start > 0 else 0
        self.cursor.advance(self.start, self.step0)
        self.num_batches = P.batches(self.sampler.local_len(self.start), self.b, self.drop_last)

    def batches(self) -> Iterator[BatchKey]:
        return plan_batches(
            self.sampler, self.epoch, self.start, self.b, self.drop_last, self.step0
        )

    def consumed(self, k: int, end: bool = False) -> None:
        if end:
            self.cursor.finish()
        elif k >= self.num_batches:
            self.cursor.advance(self.sampler.n, self.step0 + k)
        else:
            self.cursor.advance(self.sampler.position_after(self.start, k * self.b), self.step0 + k)

    def set_epoch(self, epoch: int) -> None:
        self.cursor.set_epoch(epoch, "StatefulDataLoader.set_epoch", stacklevel=3)

    # --- state ----------------------------------------------------------------------------------

    def stream_fields(self) -> dict[str, Any]:
        return self.sampler.stream_fields()

    def world_size(self) -> int:
        return self.sampler.num_replicas

    def max_step(self, state: Any) -> int:
        # every step consumes at least one new global position (rank 0's is never padding)
        return int(state[S.K_POSITION])

    def check(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        self.sampler.check_state(state, expected, where, strict)

    def load(self, state: Any, step: int) -> None:
        self.sampler.restore(state, step)

    def adopt_seed(self, seed: int) -> None:
        if self.owns_sampler:
            self.sampler.reseed(seed)
        super().adopt_seed(seed)
