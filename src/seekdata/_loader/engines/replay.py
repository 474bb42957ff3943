"""The replay path: a sampler or batch sampler we cannot seek; resume replays its indices.

The cursor counts batches consumed in the epoch (its position and its step). The epoch ends
only when the sampler's iterator does: a sampler may yield any number of batches (e.g. a
``RandomSampler`` with replacement and ``num_samples`` > ``len(dataset)``), so a count is never
read as the end; a state of an ended epoch records ``n``. Resuming re-iterates the sampler and
skips that many batches of *indices*, O(k), never data, and warns once per loader.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from seekdata._core import dist as _dist
from seekdata._core import reshape as _reshape
from seekdata._core import state as _state
from seekdata._core.checks import is_int
from seekdata._core.cursor import Cursor, Snapshot
from seekdata._loader.config import LoaderConfig
from seekdata._loader.engines.mapstyle import MapEngine
from seekdata._loader.plan import Plan, PlannedBatch

#: The replay cursor's end: past any count of batches, reached only when the iterator finishes.
_ENDED = 2**63 - 1


class ReplayEngine(MapEngine):
    """Batches from any sampler or batch sampler, counted by the cursor."""

    def __init__(
        self,
        sampler: Any,
        n: int,
        dataset: Any,
        config: LoaderConfig,
        collate_fn: Callable[[list[Any]], Any],
    ) -> None:
        batch_sampler, batch_size = config.batch_sampler, config.batch_size
        if batch_sampler is not None:  # torch's rules held (LoaderConfig): no sampler, ...
            self.batches_of: Any = batch_sampler
        elif batch_size is None:
            self.batches_of = sampler
        else:
            self.batches_of = torch.utils.data.BatchSampler(sampler, batch_size, config.drop_last)
        super().__init__(dataset, config, collate_fn)
        self.sampler = sampler
        # the user's batch sampler, or the torch BatchSampler over the user's sampler
        self.batch_sampler = (
            batch_sampler
            if batch_sampler is not None
            else (None if batch_size is None else self.batches_of)
        )
        self.single = batch_sampler is None and batch_size is None
        self.inner = sampler if sampler is not None else batch_sampler
        self.n = n
        # only finish() reaches the end (a count never does); the position counts batches
        self.cursor = Cursor(_ENDED, unit=_state.UNITS[1])
        self._warned = False  # the replay warning, once per loader (not per process: testable)

    def _total(self) -> int | None:
        return len(self.batches_of) if hasattr(self.batches_of, "__len__") else None

    def _forward_epoch(self, epoch: int) -> None:
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)

    def full_len(self) -> int:
        return len(self.batches_of)

    def rank(self) -> int:
        """The sampler's ``rank`` (or its inner sampler's), else the process group's."""
        for obj in (self.inner, getattr(self.inner, "sampler", None)):
            if is_int(getattr(obj, "rank", None)):  # the integer rule (np.int64 too)
                return int(obj.rank)  # type: ignore[union-attr]
        return _dist.rank_or_zero()

    # --- planning: values from the cursor; moves only in commit and advance_past -----------------

    def plan(self) -> Plan:
        at = self.cursor.next_start()
        epoch, position = at
        rolled = epoch != self.cursor.epoch  # the epoch-end rule started the next epoch
        ended = not rolled and position >= _ENDED
        batch0 = 0 if rolled or ended else self.cursor.batch
        total = self._total() or 0
        span = 0 if ended else max(total - batch0, 0)
        return Plan(at, epoch, 0, 0, batch0, span, start_batches=position)

    def batches(self, plan: Plan) -> Iterator[PlannedBatch]:
        if plan.epoch != self.cursor.epoch:  # the next epoch: the user's sampler learns it first
            self._forward_epoch(plan.epoch)
        if plan.start_batches >= _ENDED:
            return
        done, epoch = plan.batch0, plan.epoch
        it = iter(self.batches_of)
        if done and not self._warned:
            self._warned = True
            warnings.warn(
                f"StatefulDataLoader: the sampler {type(self.inner).__name__} cannot seek, so "
                f"resuming replays its first {done} batches of indices (O(k), no data is "
                f"loaded); use seekdata.DistributedSampler for an O(1) resume",
                stacklevel=2,
            )
        for _ in range(done):
            next(it, None)
        for j, batch in enumerate(it):
            try:  # batch_size=None: one index, or a bulk-loading list, passed through as is
                indices = (batch,) if self.single else tuple(int(i) for i in batch)
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"StatefulDataLoader: with batching, the sampler must yield integer indices "
                    f"(each keys its sample's randomness); got the batch {batch!r}; map keys to "
                    f"integer positions, or pass batch_size=None to hand the dataset whatever "
                    f"the sampler yields"
                ) from e
            yield PlannedBatch(epoch, done + j, indices)

    def seek_batch(self, batch: int) -> None:
        """The next iterator replays ``batch`` batches of indices of its epoch first."""
        epoch, _ = self.cursor.next_start()
        self.detach_live()
        self.cursor.seek(batch, epoch, batch)

    def commit(self, plan: Plan) -> None:
        self.cursor.enter(plan.start_batches, plan.batch0)  # the plan was made from next_start()

    def advance_past(self, plan: Plan, k: int, end: bool = False) -> int:
        done = plan.batch0 + k
        if end:
            self.cursor.advance(done, done)
            self.cursor.finish()
            return done
        self.cursor.advance(done, done)
        return done - 1  # the number of the batch handed out

    def cursor_fields(self, now: Snapshot) -> dict[str, Any]:
        fields = self.cursor.fields(now)
        if now.position >= self.cursor.end:  # an ended epoch is recorded as n, as before
            fields[_state.K_POSITION] = self.n
        return fields

    def set_epoch(self, epoch: int) -> None:
        self.cursor.set_epoch(epoch, "StatefulDataLoader.set_epoch", stacklevel=3)
        self._forward_epoch(epoch)

    # --- state ----------------------------------------------------------------------------------

    def world_size(self) -> int:
        """The sampler's ``num_replicas`` (or its inner sampler's), else the process group's."""
        for obj in (self.inner, getattr(self.inner, "sampler", None)):
            if is_int(getattr(obj, "num_replicas", None)):
                return int(obj.num_replicas)  # type: ignore[union-attr]
        return _dist.world_size_or_one()

    def max_step(self, state: Any) -> int:
        if not state[_state.K_EXHAUSTED]:
            # batches consumed in the epoch, on each rank (a state from before this rule that
            # recorded an epoch's end as n has its step <= n)
            return int(state[_state.K_POSITION])
        return max(self.n, self._total() or 0, int(state.get(_state.K_STEP, 0)))

    def stream_fields(self) -> dict[str, Any]:
        return {
            _state.K_N: self.n,
            _state.K_SEED: int(getattr(self.inner, "seed", 0)),
            _state.K_ORDER: f"replay:{type(self.inner).__name__}",
            _state.K_SHUFFLE: bool(getattr(self.inner, "shuffle", False)),
            _state.K_DROP_LAST: bool(getattr(self.inner, "drop_last", False)),
        }

    def check(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        _state.check_state(state, expected, where=where, strict=strict)
        _reshape.check_replay_world(state, self.world_size(), self._total(), self.inner, where)

    def load(self, state: Any, batch: int) -> None:
        exhausted = state[_state.K_EXHAUSTED]
        position = _ENDED if exhausted else state[_state.K_POSITION]
        self.cursor.restore(state[_state.K_EPOCH], position, exhausted, 0, batch)
        self._forward_epoch(state[_state.K_EPOCH])
