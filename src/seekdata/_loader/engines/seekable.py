"""The seekable path: a seekdata sampler's cursor; each epoch planned by arithmetic, O(1)."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from seekdata._core import partition as _partition
from seekdata._core import reshape as _reshape
from seekdata._core import state as _state
from seekdata._core.checks import check_int
from seekdata._loader import rebuild as _rebuild
from seekdata._loader.config import LoaderConfig
from seekdata._loader.engines.mapstyle import WHERE, MapEngine
from seekdata._loader.plan import (
    Geometry,
    Plan,
    PlannedBatch,
    plan_seekable,
    seekable_after,
    seekable_batches,
)
from seekdata.sampler import DistributedSampler, dataset_length


class BatchIndices(torch.utils.data.BatchSampler):
    """``loader.batch_sampler`` with torch's meaning: iterating it gives this rank's index lists
    of the current epoch from the cursor, and ``len()`` is the batches of a full epoch.

    It is a view: iterating it never moves the cursor (only batches the loader hands out do).
    Frameworks rebuild loaders from it; the rebuilt loader gets the right indices but fetches
    them without seekdata's per-sample randomness, so a framework's hook may refuse them (the
    ``"batch_sampler_iterated"`` event of :mod:`seekdata.integrations.hooks`).

    A framework may rebuild it as torch's ``BatchSampler`` API says, ``BatchIndices(sampler,
    batch_size=, drop_last=)``, around a sampler of its own that wraps ours, then build a new
    loader with it: that instance carries a rank request (:attr:`assign_rank`, from the
    ``"batch_sampler_rebuilt"`` hook), which :class:`seekdata.StatefulDataLoader` turns back
    into the same seekable stream on the requested rank.
    """

    def __init__(
        self,
        sampler: Any,
        batch_size: int,
        drop_last: bool,
        *,
        engine: SeekableEngine | None = None,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.assign_rank: _rebuild.RankRequest | None = None
        if engine is None:  # a framework's rebuild around its distributed sampler
            from seekdata.integrations import hooks  # the framework table: lazily

            frame = sys._getframe(1)
            request = hooks.consult("batch_sampler_rebuilt", frame, sampler, batch_size, drop_last)
            self.assign_rank = request
            return
        # the engine holds this view: a weak reference back, so that no cycle keeps a dropped
        # loader (and its persistent workers) alive until the garbage collector runs
        self._engine = weakref.proxy(engine)

    def __iter__(self) -> Iterator[list[int]]:
        from seekdata.integrations import hooks  # the framework table: lazily

        # a framework iterating it to rebuild the loader would drop the keyed fetch
        hooks.consult("batch_sampler_iterated", sys._getframe(1), self)
        engine = self._engine
        return (list(batch.indices) for batch in engine.batches(engine.plan()))

    def __len__(self) -> int:
        if self.assign_rank is not None:  # not iterated: see assign_rank
            return len(self.assign_rank.sampler) // self.batch_size
        return int(self._engine.full_len())


class SeekableEngine(MapEngine):
    """Batches from a :class:`seekdata.DistributedSampler`'s cursor: O(1) setup and resume."""

    def __init__(
        self,
        sampler: DistributedSampler,
        dataset: Any,
        config: LoaderConfig,
        collate_fn: Callable[[list[Any]], Any],
    ) -> None:
        super().__init__(dataset, config, collate_fn)
        self.dataset = dataset
        self.sampler = sampler
        self.cursor = sampler.cursor
        self.batch_size = config.batch_size or 1  # samples per batch (1 with batch_size=None)
        self.drop_last = config.drop_last  # the batches' (the sampler's is its own)
        # torch's rule: batch_size=None means no batch sampler
        self.batch_sampler = None if config.batch_size is None else self._view(sampler)

    def _resized(self) -> DistributedSampler | None:
        """torch's default samplers read len(dataset) at every iter() and len(); the loader's
        own sampler does too: rebuilt (same seed, epoch and epoch-end flags) when it changed."""
        old = self.sampler
        if not self.config.owns_sampler or dataset_length(self.dataset, WHERE) == old.n:
            return None
        new = DistributedSampler(
            self.dataset, 1, 0, shuffle=old.shuffle, seed=old.seed, grown=old.growths or None
        )
        new.cursor = old.cursor.resized(new.n)
        return new

    def iterate(self) -> Iterator[Any]:
        resized = self._resized()
        if resized is not None:
            _state.check_resize(self.sampler.cursor.snapshot, self.sampler.n, resized.n, WHERE)
            self.sampler, self.cursor = resized, resized.cursor
            if self.batch_sampler is not None:
                self.batch_sampler = self._view(resized)
        return super().iterate()

    def _view(self, sampler: DistributedSampler) -> BatchIndices:
        # a rebuild by Lightning's DDP reaches the sampler only: what it needs to rebuild this
        # stream is recorded against the sampler (seekdata.integrations.hooks reads it)
        config = self.config
        _rebuild.remember(sampler, config.owns_sampler, self.keys.explicit, self.seed)
        return BatchIndices(sampler, self.batch_size, self.drop_last, engine=self)

    def growths_for(
        self, state: Any, grow: bool, where: str
    ) -> tuple[dict[str, Any], tuple[Any, ...]]:
        sampler = self.sampler
        if grow:
            growths = _reshape.growth_at(state, sampler.growths, sampler.n, where, sampler.dataset)
            return sampler.fields_then(int(state[_state.K_N])), growths
        n_then, growths = _reshape.check_grown(
            state, sampler.growths, sampler.n, where, sampler.dataset
        )
        return (sampler.fields_then(n_then) if n_then != sampler.n else {}), growths

    def adopt_growths(self, growths: tuple[Any, ...]) -> None:
        if growths != self.sampler.growths:
            self.sampler.grow(growths)

    def grown_field(self) -> dict[str, Any]:
        return self.sampler.grown_field()

    def full_len(self) -> int:
        sampler = self._resized() or self.sampler
        return _partition.batches(sampler.local_len(0), self.batch_size, self.drop_last)

    def rank(self) -> int:
        return int(self.sampler.rank)

    def assign_rank(self, num_replicas: int, rank: int) -> None:
        self.sampler.reshard(num_replicas, rank)  # the sampler's name for it; the cursor stays

    # --- planning: values from the cursor; moves only in commit and advance_past -----------------

    def plan(self) -> Plan:
        at = self.cursor.next_start()
        return plan_seekable(
            Geometry.of(self.sampler), at, self.cursor.snapshot, self.batch_size, self.drop_last
        )

    def batches(self, plan: Plan) -> Iterator[PlannedBatch]:
        return seekable_batches(plan)

    def commit(self, plan: Plan) -> None:
        self.cursor.enter(plan.start_position, plan.batch0)  # the plan was made from next_start()

    def advance_past(self, plan: Plan, k: int, end: bool = False) -> int:
        if end:
            self.cursor.finish()
            return plan.batch0 + k
        position, batch = seekable_after(plan, k)
        self.cursor.advance(position, batch)
        return batch - 1  # the number of the batch handed out

    # --- moving the cursor ----------------------------------------------------------------------

    def skip(self, batches: int) -> None:
        where = "StatefulDataLoader.skip"
        self._move(check_int(batches, "batches", where), where)  # negative: back

    def seek_batch(self, batch: int) -> None:
        self._move(batch - self._at()[2], "StatefulDataLoader.skip_to")

    def _at(self) -> tuple[int, int, int]:
        """(epoch, position, batch number) the next iterator starts at."""
        epoch, position = self.cursor.next_start()
        now = self.cursor.snapshot
        return epoch, position, now.batch if epoch == now.epoch and position > 0 else 0

    def _move(self, batches: int, where: str) -> None:
        if batches == 0:
            return
        sampler = self.sampler
        geo = (sampler.n, sampler.num_replicas, sampler.drop_last, self.batch_size, self.drop_last)
        try:
            epoch, position, batch = _partition.move(geo, self.full_len(), self._at(), batches)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        sampler.check_reachable(epoch, where)
        self.detach_live()
        self.cursor.seek(position, epoch, batch)

    def skip_steps(self, start: int, stop: int) -> None:
        where = "StatefulDataLoader.skip_steps"
        start, stop = check_int(start, "start", where, 0), check_int(stop, "stop", where, 0)
        if start >= stop:
            raise ValueError(
                f"{where}: the range [start, stop) must not be empty; got start={start}, "
                f"stop={stop}; pass stop > start"
            )
        self.detach_live()
        self.cursor.add_skip(start, stop)

    def set_epoch(self, epoch: int) -> None:
        self.cursor.set_epoch(epoch, "StatefulDataLoader.set_epoch", stacklevel=3)

    # --- state ----------------------------------------------------------------------------------

    def stream_fields(self) -> dict[str, Any]:
        return self.sampler.stream_fields()

    def world_size(self) -> int:
        return self.sampler.num_replicas

    def max_step(self, state: Any) -> int:
        # every step consumes at least one new global position (rank 0's is never padding)
        return int(state[_state.K_POSITION])

    def check(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        self.sampler.check_state(state, expected, where, strict)

    def load(self, state: Any, batch: int) -> None:
        self.sampler.restore(state, batch)

    def elastic_batch(self, state: Any, where: str, strict: bool) -> int:
        """Elastic global batch: a state saved with W ranks of B loads on W' ranks of B' when
        W'·B' = W·B and both cut epochs alike (see :func:`seekdata._core.reshape.global_batch`)."""
        drop = (self.sampler.drop_last, self.drop_last)
        world = self.sampler.num_replicas
        return _reshape.global_batch(
            state, self.sampler.n, (world, self.batch_size), drop, where, strict
        )

    def adopt_seed(self, seed: int) -> None:
        if self.config.owns_sampler:
            self.sampler.reseed(seed)
        super().adopt_seed(seed)
        if self.batch_sampler is not None:
            config = self.config
            _rebuild.remember(self.sampler, config.owns_sampler, self.keys.explicit, seed)
