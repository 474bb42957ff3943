"""The replay path: a sampler or batch sampler we cannot seek; resume replays its indices.

The cursor counts batches consumed in the epoch (its position and its step). The epoch ends
only when the sampler's iterator does: a sampler may yield any number of batches (e.g. a
``RandomSampler`` with replacement and ``num_samples`` > ``len(dataset)``), so a count is never
read as the end; a state of an ended epoch records ``n``. Resuming re-iterates the sampler and
skips that many batches of *indices*, O(k), never data, and warns once per loader.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch.utils.data

from seekdata import _dist
from seekdata import state as S
from seekdata._cursor import Cursor, Now
from seekdata._engines.keyed import WHERE, KeyedEngine
from seekdata._fetch import BatchKey

#: The replay cursor's end: past any count of batches, reached only when the iterator finishes.
_ENDED = 2**63 - 1


class ReplayEngine(KeyedEngine):
    """Batches from any sampler or batch sampler, counted by the cursor."""

    def __init__(
        self, sampler: Any, batch_sampler: Any, n: int, dataset: Any, **kwargs: Any
    ) -> None:
        batch_size, drop_last = kwargs["batch_size"], kwargs["drop_last"]
        if batch_sampler is not None:
            if sampler is not None or batch_size not in (None, 1) or drop_last:
                raise ValueError(
                    f"{WHERE}: batch_sampler option is mutually exclusive with batch_size, "
                    f"shuffle, sampler and drop_last; got batch_size={batch_size}, "
                    f"drop_last={drop_last}, sampler={type(sampler).__name__}; pass only "
                    f"batch_sampler"
                )
            self.batches_of: Any = batch_sampler
        elif batch_size is None:
            self.batches_of = sampler
        else:
            self.batches_of = torch.utils.data.BatchSampler(sampler, batch_size, drop_last)
        super().__init__(dataset, **kwargs)
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
        self.cursor = Cursor(_ENDED)  # only finish() reaches it (a count never does)
        self._warned = False  # the replay warning, once per loader (not per process: testable)
        self.step0 = 0

    def _total(self) -> int | None:
        return len(self.batches_of) if hasattr(self.batches_of, "__len__") else None

    def _forward_epoch(self) -> None:
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(self.cursor.epoch)

    def full_len(self) -> int:
        return len(self.batches_of)

    def rank(self) -> int:
        """The sampler's ``rank`` (or its inner sampler's), else the process group's."""
        for obj in (self.inner, getattr(self.inner, "sampler", None)):
            if isinstance(getattr(obj, "rank", None), int):
                return int(obj.rank)  # type: ignore[union-attr]
        return _dist.rank_or_zero()

    # --- planning -------------------------------------------------------------------------------

    def begin(self) -> None:
        if self.cursor.begin():
            self._forward_epoch()
        self.step0 = 0 if self.cursor.ended else self.cursor.step
        self.cursor.advance(self.cursor.position, self.step0)
        total = self._total() or 0
        self.num_batches = 0 if self.cursor.ended else max(total - self.step0, 0)

    def batches(self) -> Iterator[BatchKey]:
        if self.cursor.ended:
            return
        done, epoch = self.step0, self.cursor.epoch
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
            yield BatchKey(epoch, done + j, indices)

    def consumed(self, k: int, end: bool = False) -> None:
        done = self.step0 + k
        self.cursor.advance(done, done)
        if end:
            self.cursor.finish()

    def cursor_fields(self, now: Now) -> dict[str, Any]:
        fields = self.cursor.fields(now)
        if now.position >= self.cursor.end:  # an ended epoch is recorded as n, as before
            fields[S.K_POSITION] = self.n
        return fields

    def set_epoch(self, epoch: int) -> None:
        self.cursor.set_epoch(epoch, "StatefulDataLoader.set_epoch", stacklevel=3)
        self._forward_epoch()

    # --- state ----------------------------------------------------------------------------------

    def world_size(self) -> int:
        """The sampler's ``num_replicas`` (or its inner sampler's), else the process group's."""
        for obj in (self.inner, getattr(self.inner, "sampler", None)):
            if isinstance(getattr(obj, "num_replicas", None), int):
                return int(obj.num_replicas)  # type: ignore[union-attr]
        return _dist.world_size_or_one()

    def max_step(self, state: Any) -> int:
        if not state[S.K_EXHAUSTED]:
            # batches consumed in the epoch, on each rank (a state from before this rule that
            # recorded an epoch's end as n has its step <= n)
            return int(state[S.K_POSITION])
        return max(self.n, self._total() or 0, int(state.get(S.K_STEP, 0)))

    def stream_fields(self) -> dict[str, Any]:
        return {
            S.K_N: self.n,
            S.K_SEED: int(getattr(self.inner, "seed", 0)),
            S.K_ORDER: f"replay:{type(self.inner).__name__}",
            S.K_SHUFFLE: bool(getattr(self.inner, "shuffle", False)),
            S.K_DROP_LAST: bool(getattr(self.inner, "drop_last", False)),
        }

    def check(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        S.check_state(state, expected, where=where, strict=strict)
        old, here, done = state.get(S.K_WORLD_SIZE), self.world_size(), state[S.K_POSITION]
        total = self._total()
        if (
            old is not None
            and old != here
            and not state[S.K_EXHAUSTED]
            and done > 0
            and (total is None or done < total)
        ):
            name = type(self.inner).__name__
            raise S.StateMismatchError(
                f"{where}: world_size is {old} in the checkpoint but {here} here, and the "
                f"sampler {name} cannot seek: it partitions the epoch by world size, so the "
                f"rest of epoch {state[S.K_EPOCH]} ({done} batches consumed on each rank) cannot "
                f"be continued on {here} ranks without losing or repeating samples; resume on "
                f"{old} ranks, or from an epoch boundary, or use seekdata.DistributedSampler "
                f"(order='torch' keeps torch's order), whose cursor re-partitions the rest"
            )

    def load(self, state: Any, step: int) -> None:
        exhausted = state[S.K_EXHAUSTED]
        position = _ENDED if exhausted else state[S.K_POSITION]
        self.cursor.restore(state[S.K_EPOCH], position, exhausted, 0, step)
        self._forward_epoch()
