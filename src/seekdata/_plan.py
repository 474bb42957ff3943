"""Plans for the loader: a seekable one (seekdata samplers) and a replaying one (any other).

Both give the loader the same small interface: ``begin`` an epoch at the cursor, yield its
``batches`` as :class:`BatchKey`, move the cursor when batches are ``consumed``, ``check``
a state (raising, assigning nothing) and then ``load`` it. Only the replaying plan ever
iterates past what it yields: a sampler we cannot seek is re-iterated and its first k batches
of *indices* skipped (never data).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch.utils.data

from seekdata import _dist
from seekdata import state as S
from seekdata._fetch import BatchKey
from seekdata.rng import check_counter
from seekdata.sampler import DistributedSampler


class SeekPlan:
    """One epoch's batches from a seekdata sampler's cursor: pure arithmetic, O(1) setup."""

    def __init__(self, sampler: DistributedSampler, batch_size: int, drop_last: bool) -> None:
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.epoch, self.start, self.step0, self.num_batches = 0, 0, 0, 0

    def _batches_from(self, start: int) -> int:
        local, b = self.sampler._local_len(start), self.batch_size
        return local // b if self.drop_last else -(-local // b)

    def begin(self, step: int) -> None:
        self.epoch, self.start = self.sampler._begin()
        self.step0 = step if self.start > 0 else 0
        self.num_batches = self._batches_from(self.start)

    def batches(self) -> Iterator[BatchKey]:
        s, b = self.sampler, self.batch_size
        total = min(self.num_batches * b, s._local_len(self.start))  # the last batch may be short
        k0, chunk = 0, b  # the first chunk is one batch (fast first batch), then it grows
        while k0 < total:
            idx = s._local_indices(self.epoch, self.start, k0, min(k0 + chunk, total)).tolist()
            for j in range(0, len(idx), b):
                yield BatchKey(self.epoch, self.step0 + (k0 + j) // b, tuple(idx[j : j + b]))
            k0 += chunk
            chunk = min(chunk * 4, max(b, 8192 // b * b))

    def consumed(self, k: int, end: bool = False) -> None:
        s = self.sampler
        if end:
            s.position, s._exhausted = s.n, True
        elif k >= self.num_batches:
            s.position = s.n
        else:
            s.position = s._position_after(self.start, k * self.batch_size)

    def full_len(self) -> int:
        return self._batches_from(0)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def cursor(self) -> dict[str, Any]:
        s = self.sampler
        return {
            S.K_EPOCH: s.epoch,
            S.K_POSITION: s.position,
            S.K_EXHAUSTED: s._exhausted and s.position >= s.n,
        }

    def world_size(self) -> int:
        return self.sampler.num_replicas

    def origin(self) -> int:
        return self.sampler._origin_field()

    def stream_fields(self) -> dict[str, Any]:
        return self.sampler._stream_fields()

    def max_step(self, state: Any) -> int:
        # every step consumes at least one new global position (rank 0's is never padding)
        return int(state[S.K_POSITION])

    def check(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        self.sampler._check_cursor(state, expected, where, strict)

    def load(self, state: Any) -> None:
        self.sampler._assign_cursor(state)


class ReplayPlan:
    """Batches from a sampler or batch sampler we cannot seek: resume replays its indices.

    The cursor is (epoch, batches consumed in the epoch). Resuming re-iterates the sampler
    and skips that many batches of indices, O(k), and warns once per loader.
    """

    def __init__(
        self,
        sampler: Any,
        batch_sampler: Any,
        batch_size: int | None,
        drop_last: bool,
        n: int,
        where: str,
    ) -> None:
        if batch_sampler is not None:
            if sampler is not None or batch_size not in (None, 1) or drop_last:
                raise ValueError(
                    f"{where}: batch_sampler option is mutually exclusive with batch_size, "
                    f"shuffle, sampler and drop_last; got batch_size={batch_size}, "
                    f"drop_last={drop_last}, sampler={type(sampler).__name__}; pass only "
                    f"batch_sampler"
                )
            self.batches_of: Any = batch_sampler
            self.batch_size = 1
        elif batch_size is None:
            self.batches_of = sampler
            self.batch_size = 1
        else:
            self.batches_of = torch.utils.data.BatchSampler(sampler, batch_size, drop_last)
            self.batch_size = batch_size
        self.single = batch_sampler is None and batch_size is None
        self.inner = sampler if sampler is not None else batch_sampler
        self.n = n
        self.epoch, self.done_batches, self._explicit = 0, 0, False
        self._restored: int | None = None  # the epoch a state restored, until set_epoch
        self._warned = False  # the replay warning, once per loader (not per process: testable)
        self.ended = self.exhausted = False  # all batches consumed / the iterator finished
        self.step0, self.num_batches = 0, 0

    def begin(self, step: int) -> None:
        if self.ended and self.exhausted and not self._explicit:
            self.epoch, self.done_batches, self.ended = self.epoch + 1, 0, False
            if hasattr(self.inner, "set_epoch"):
                self.inner.set_epoch(self.epoch)
        self._explicit = self.exhausted = False
        self.step0 = self.done_batches
        total = len(self.batches_of) if hasattr(self.batches_of, "__len__") else 0
        self.num_batches = 0 if self.ended else max(total - self.done_batches, 0)

    def batches(self) -> Iterator[BatchKey]:
        if self.ended:
            return
        it = iter(self.batches_of)
        if self.done_batches and not self._warned:
            self._warned = True
            warnings.warn(
                f"StatefulDataLoader: the sampler {type(self.inner).__name__} cannot seek, so "
                f"resuming replays its first {self.done_batches} batches of indices (O(k), no "
                f"data is loaded); use seekdata.DistributedSampler for an O(1) resume",
                stacklevel=2,
            )
        for _ in range(self.done_batches):
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
            yield BatchKey(self.epoch, self.step0 + j, indices)

    def consumed(self, k: int, end: bool = False) -> None:
        self.done_batches = self.step0 + k
        total = len(self.batches_of) if hasattr(self.batches_of, "__len__") else None
        self.ended = self.ended or end or (total is not None and self.done_batches >= total)
        self.exhausted = self.exhausted or end

    def full_len(self) -> int:
        return len(self.batches_of)

    def set_epoch(self, epoch: int) -> None:
        where = "StatefulDataLoader.set_epoch"
        epoch = check_counter(epoch, "epoch", where)
        S.warn_rewind(where, epoch, self._restored)
        self._restored = None
        if epoch != self.epoch:
            self.epoch, self.done_batches, self.ended, self.exhausted = epoch, 0, False, False
        self._explicit = True
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)

    def cursor(self) -> dict[str, Any]:
        return {
            S.K_EPOCH: self.epoch,
            S.K_POSITION: self.n if self.ended else self.done_batches,
            S.K_EXHAUSTED: self.exhausted,
        }

    def world_size(self) -> int:
        """The sampler's ``num_replicas`` (or its inner sampler's), else the process group's."""
        for obj in (self.inner, getattr(self.inner, "sampler", None)):
            if isinstance(getattr(obj, "num_replicas", None), int):
                return int(obj.num_replicas)  # type: ignore[union-attr]
        return _dist.world_size_or_one()

    def origin(self) -> int:
        return 0

    def max_step(self, state: Any) -> int:
        if state[S.K_POSITION] < self.n:
            return int(state[S.K_POSITION])  # batches consumed in the epoch, on each rank
        return max(self.n, len(self.batches_of) if hasattr(self.batches_of, "__len__") else 0)

    def stream_fields(self) -> dict[str, Any]:
        return {
            S.K_N: self.n,
            S.K_SEED: int(getattr(self.inner, "seed", 0)),
            S.K_ORDER: f"replay:{type(self.inner).__name__}",
            S.K_SHUFFLE: bool(getattr(self.inner, "shuffle", False)),
            S.K_DROP_LAST: bool(getattr(self.inner, "drop_last", False)),
        }

    def check(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        for message in S.check_state(state, expected, where=where, strict=strict):
            warnings.warn(message + " (strict=False: continuing)", stacklevel=4)
        old, here, done = state.get(S.K_WORLD_SIZE), self.world_size(), state[S.K_POSITION]
        if old is not None and old != here and 0 < done < self.n:
            name = type(self.inner).__name__
            raise S.StateMismatchError(
                f"{where}: world_size is {old} in the checkpoint but {here} here, and the "
                f"sampler {name} cannot seek: it partitions the epoch by world size, so the "
                f"rest of epoch {state[S.K_EPOCH]} ({done} batches consumed on each rank) cannot "
                f"be continued on {here} ranks without losing or repeating samples; resume on "
                f"{old} ranks, or from an epoch boundary, or use seekdata.DistributedSampler "
                f"(order='torch' keeps torch's order), whose cursor re-partitions the rest"
            )

    def load(self, state: Any) -> None:
        self.epoch = state[S.K_EPOCH]
        self.ended = state[S.K_POSITION] >= self.n
        self.exhausted = self.ended and bool(state[S.K_EXHAUSTED])
        self.done_batches = 0 if self.ended else state[S.K_POSITION]
        self._explicit = False
        self._restored = self.epoch
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(self.epoch)
