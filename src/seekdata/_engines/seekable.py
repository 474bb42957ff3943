"""The seekable path: a seekdata sampler's cursor; each epoch planned by arithmetic, O(1)."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeGuard

import torch.utils.data

from seekdata import _partition as P
from seekdata import state as S
from seekdata._engines.keyed import WHERE, KeyedEngine
from seekdata._fetch import BatchKey
from seekdata.rng import check_int
from seekdata.sampler import DistributedSampler, dataset_length

#: positions per call to the order after an epoch's first batch
_CHUNK = 1 << 16


def plan_batches(
    sampler: DistributedSampler,
    epoch: int,
    start: int,
    batch_size: int,
    drop_last: bool,
    step0: int,
    limit: int | None = None,
) -> Iterator[BatchKey]:
    """This rank's batches of ``epoch`` from global position ``start`` (at most ``limit``), as
    keys numbered from ``step0``."""
    local = sampler.local_len(start)
    total = min(P.batches(local, batch_size, drop_last) * batch_size, local)  # last may be short
    if limit is not None:
        total = min(total, limit * batch_size)
    b = batch_size
    # the first chunk is one batch (a fast first batch, at resume too), then chunks of ~64K
    # positions: an order's call has a fixed cost (the Feistel's cycle-walking passes, ~0.2 ms
    # each), so few large calls keep the order's share of a batch small
    k0, chunk = 0, b
    while k0 < total:
        idx = tuple(sampler.local_indices(epoch, start, k0, min(k0 + chunk, total)).tolist())
        step = step0 + k0 // b
        for j in range(0, len(idx), b):
            yield BatchKey(epoch, step, idx[j : j + b])
            step += 1
        k0 += chunk
        chunk = max(b, _CHUNK // b * b)


class _Plan(NamedTuple):
    """One epoch's batches from the cursor: epoch, start position, first step, the steps it
    spans and the skipped in-epoch ranges (holes) within them."""

    epoch: int
    start: int
    step0: int
    span: int
    holes: list[tuple[int, int]]


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class BatchIndices(torch.utils.data.BatchSampler):
    """``loader.batch_sampler`` with torch's meaning: iterating it gives this rank's index lists
    of the current epoch from the cursor, and ``len()`` is the batches of a full epoch.

    It is a view: iterating it never moves the cursor (only batches the loader hands out do).
    Frameworks rebuild loaders from it; the rebuilt loader gets the right indices but fetches
    them without seekdata's per-sample randomness, so accelerate's rebuilds are refused (see
    :mod:`seekdata.integrations.accelerate`).

    Lightning's DDP rebuilds it as torch's ``BatchSampler`` API says, ``BatchIndices(sampler,
    batch_size=, drop_last=)``, around a ``DistributedSamplerWrapper`` of our sampler, then
    builds a new loader with it: that instance is a *reshard request* (:attr:`reshard`), which
    :class:`seekdata.StatefulDataLoader` turns back into the same seekable stream on this rank.
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
        self.reshard: Reshard | None = None
        if engine is None:  # a framework's rebuild around its distributed sampler
            self.reshard = Reshard.of(sampler, batch_size, drop_last)
            return
        self._engine = weakref.proxy(engine)
        self._seeker = sampler

    def __iter__(self) -> Iterator[list[int]]:
        if "accelerate" in sys.modules:  # a rebuild by accelerate would drop the keyed fetch
            from seekdata.integrations.accelerate import _refuse_rebuild

            _refuse_rebuild(sys._getframe(1))
        epoch, start = self._seeker.next_start()
        plan = self._engine.plan(epoch, start)
        return (list(key.indices) for key in self._engine.keys(plan))

    def __len__(self) -> int:
        if self.reshard is not None:
            return len(self.reshard.sampler) // self.batch_size  # not iterated: see reshard
        return int(self._engine.full_len())


class Reshard(NamedTuple):
    """A framework asked for our sampler on ``rank`` of ``world`` ranks (Lightning's DDP
    sampler injection); the rest is the original loader's."""

    sampler: DistributedSampler
    world: int
    rank: int
    batch_size: int
    drop_last: bool
    owns_sampler: bool
    seed_explicit: bool
    seed: int

    @staticmethod
    def of(wrapper: Any, batch_size: int, drop_last: bool) -> Reshard:
        # Lightning's DistributedSamplerWrapper keeps the sampler it shards as dataset._sampler
        inner = getattr(getattr(wrapper, "dataset", None), "_sampler", None)
        view = getattr(inner, "_seekdata_view", None)
        ours = isinstance(inner, DistributedSampler) and view is not None
        if not isinstance(wrapper, torch.utils.data.DistributedSampler) or not ours:
            raise TypeError(
                f"BatchIndices: a rebuilt seekdata batch sampler must wrap the loader's own "
                f"seekdata.DistributedSampler (Lightning's DDP sampler injection does); got "
                f"{type(wrapper).__name__}; pass Trainer(use_distributed_sampler=False) and "
                f"sampler=seekdata.DistributedSampler(dataset, num_replicas=..., rank=...), or "
                f"let the framework rebuild the loader from loader.sampler"
            )
        if type(wrapper).__name__.startswith("Unrepeated"):  # Lightning's predict: no padding
            raise TypeError(
                f"BatchIndices: {type(wrapper).__name__} shards without padding (Lightning's "
                f"predict), which a seekdata cursor shared by ranks does not do; predict with a "
                f"torch DataLoader, or pass Trainer(use_distributed_sampler=False) and a "
                f"seekdata.DistributedSampler(dataset, num_replicas=..., rank=...)"
            )
        owns, explicit, seed = view  # type: ignore[misc]  # checked: ours
        return Reshard(
            inner,  # type: ignore[arg-type]  # checked: ours
            wrapper.num_replicas,
            wrapper.rank,
            batch_size,
            drop_last,
            owns,
            explicit,
            seed,
        )


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
        self.batch_sampler = None if self.batch_size is None else self._view(sampler)

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
                self.batch_sampler = self._view(resized)
        return super().iterate(place)

    def _view(self, sampler: DistributedSampler) -> BatchIndices:
        # a rebuild by Lightning's DDP reaches the sampler only: it carries what the loader
        # needs to rebuild this stream (Reshard.of)
        sampler._seekdata_view = (self.owns_sampler, self.seed_explicit, self.seed)
        return BatchIndices(sampler, self.b, self.drop_last, engine=self)

    def full_len(self) -> int:
        sampler = self._resized() or self.sampler
        return P.batches(sampler.local_len(0), self.b, self.drop_last)

    def rank(self) -> int:
        return int(self.sampler.rank)

    # --- planning -------------------------------------------------------------------------------

    def plan(self, epoch: int, start: int) -> _Plan:
        """The epoch's batches from global position ``start``: moves nothing. Skipped global
        steps become in-epoch holes; a cursor inside one jumps past it."""
        step0 = self.cursor.step if start > 0 else 0
        span = P.batches(self.sampler.local_len(start), self.b, self.drop_last)
        holes: list[tuple[int, int]] = []
        if self.cursor.skips:  # skipped global steps in this epoch: in-epoch ranges
            lo, hi = step0, step0 + span
            holes = P.epoch_holes(self.cursor.skips, epoch, self.full_len(), lo, hi)
            if holes and holes[0][0] == step0:  # the cursor is in one: jump it now
                jump = holes.pop(0)[1] - step0
                start = self.sampler.position_after(start, jump * self.b)
                step0, span = step0 + jump, span - jump
        return _Plan(epoch, start, step0, span, holes)

    def begin(self) -> None:
        plan = self.plan(*self.sampler.begin())
        self.epoch, self.start, self.step0 = plan.epoch, plan.start, plan.step0
        self.span, self.holes = plan.span, plan.holes
        self.cursor.advance(self.start, self.step0)
        self.num_batches = self.span - sum(b - a for a, b in self.holes)

    def batches(self) -> Iterator[BatchKey]:
        return self.keys(_Plan(self.epoch, self.start, self.step0, self.span, self.holes))

    def keys(self, plan: _Plan) -> Iterator[BatchKey]:
        """The batches of ``plan``, around its holes."""
        if not plan.holes:
            return plan_batches(
                self.sampler, plan.epoch, plan.start, self.b, self.drop_last, plan.step0
            )
        return self._around_holes(plan)

    def _around_holes(self, plan: _Plan) -> Iterator[BatchKey]:
        step, end = plan.step0, plan.step0 + plan.span
        for a, b in [*plan.holes, (end, end)]:
            if step < a:
                start = self.sampler.position_after(plan.start, (step - plan.step0) * self.b)
                yield from plan_batches(
                    self.sampler, plan.epoch, start, self.b, self.drop_last, step, a - step
                )
            step = b

    def consumed(self, k: int, end: bool = False) -> None:
        step = P.kept_step(self.step0, k, self.holes) if self.holes else self.step0 + k
        if end:
            self.cursor.finish()
        elif k >= self.num_batches:
            self.cursor.advance(self.sampler.n, step)
        else:
            position = self.sampler.position_after(self.start, (step - self.step0) * self.b)
            self.cursor.advance(position, step)

    # --- moving the cursor ----------------------------------------------------------------------

    def skip(self, batches: int) -> None:
        where = "StatefulDataLoader.skip"
        batches = check_int(batches, "batches", where)  # negative: back
        if batches == 0:
            return
        per_epoch = self.full_len()
        epoch, position = self.cursor.next_start()
        if position >= self.sampler.n:
            step = per_epoch  # the epoch is used up: a move counts from its end
        else:
            step = self.cursor.step if epoch == self.cursor.epoch else 0
        try:
            epoch, step = P.moved(epoch, step, batches, per_epoch)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        self.detach_live()
        self.cursor.seek(self.sampler.position_after(0, step * self.b), epoch, step)

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
        return int(state[S.K_POSITION])

    def check(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        self.sampler.check_state(state, expected, where, strict)

    def load(self, state: Any, step: int) -> None:
        self.sampler.restore(state, step)

    def elastic_batch(self, state: Any, where: str, strict: bool) -> int:
        """Elastic global batch: a state saved with W ranks of B loads on W' ranks of B' when
        W'·B' = W·B. Global step s is the global positions [s·W·B, (s+1)·W·B) however W·B is
        factored, so every later step sees the same samples with the same per-sample
        randomness. A changed B that changes W·B is refused with the batch size that fits."""
        here = self.batch_size or 1
        if not isinstance(state, dict):
            return here
        old, world = state.get(S.K_BATCH_SIZE), state.get(S.K_WORLD_SIZE)
        if not (_is_int(old) and _is_int(world)) or min(old, world) < 1 or old == here:
            return here  # a malformed field: the state check names it
        w_here = self.sampler.num_replicas
        if old * world == here * w_here:  # the same global batch: a deliberate, checked change
            if self.drop_last or self.sampler.drop_last:  # ... if it cuts epochs alike
                drop = (self.sampler.drop_last, self.drop_last)
                S.check_geometry(state, self.sampler.n, (w_here, here), drop, where, strict)
            return int(old)
        if not strict:
            return here  # the state check warns about the batch size, as for any field
        fits = old * world // w_here if old * world % w_here == 0 else None
        fix = (
            f"pass batch_size={fits} to keep the global batch, or "
            if fits not in (None, old)
            else ""
        )
        raise S.StateMismatchError(
            f"{where}: batch_size is {old} on {world} ranks in the checkpoint (global batch "
            f"{old * world}) but {here} on {w_here} ranks here (global batch {here * w_here}); "
            f"a changed per-rank batch must keep the global batch; {fix}pass batch_size={old} "
            f"(the same per-rank batch, a new global batch), or strict=False"
        )

    def adopt_seed(self, seed: int) -> None:
        if self.owns_sampler:
            self.sampler.reseed(seed)
        super().adopt_seed(seed)
