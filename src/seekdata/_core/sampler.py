"""The seekable sampler's implementation: a drop-in for ``torch.utils.data.DistributedSampler``
with a cursor of (epoch, global position). Public as :class:`seekdata.DistributedSampler`; the
face :mod:`seekdata.sampler` says how the cursor partitions an epoch over ranks."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
import torch.utils.data

from seekdata._core import dist as _dist
from seekdata._core import grown as _grown
from seekdata._core import identity as _identity
from seekdata._core import partition as _partition
from seekdata._core import source as _source
from seekdata._core import state as _state
from seekdata._core.checks import check_bool, check_counter, check_int
from seekdata._core.cursor import Cursor
from seekdata._core.growth import GrownOrder, Growth, check_growths, first_items, pad_origin
from seekdata._core.orders import Order, make_order

__all__ = ["DistributedSampler", "dataset_length"]

_CHUNK = 4096  # indices computed per vectorised call while iterating


def dataset_length(dataset: Any, where: str) -> int:
    """``len(dataset)``, checked: a map-style dataset of at least one sample."""
    if not isinstance(dataset, Sized):
        raise TypeError(
            f"{where}: dataset must have a length (a map-style dataset); got "
            f"{type(dataset).__name__} without __len__; pass a dataset that defines __len__"
        )
    n = len(dataset)
    if n < 1:
        raise ValueError(
            f"{where}: dataset must hold at least 1 sample; got len(dataset) == {n}; "
            f"check the dataset's path or filter"
        )
    return n


def _already_split(dataset: Any, n: int, num_replicas: int) -> str | None:
    """A warning when ``dataset`` looks like one rank's part of a Hugging Face ``datasets``
    split (``split_dataset_by_node``), which the sampler would split again; else None.

    It holds ``len(split) / num_replicas`` samples (rounded either way) of the split its info
    records; read with ``getattr`` only, so ``datasets`` is never imported.
    """
    if num_replicas < 2 or not type(dataset).__module__.startswith("datasets."):
        return None
    name = getattr(dataset, "split", None)
    splits = getattr(getattr(dataset, "info", None), "splits", None)
    whole = splits.get(str(name)) if name is not None and isinstance(splits, dict) else None
    total = getattr(whole, "num_examples", None)
    if (
        not isinstance(total, int)
        or total <= n
        or n not in (total // num_replicas, -(-total // num_replicas))
    ):
        return None
    return (
        f"DistributedSampler: with num_replicas={num_replicas} the dataset must be the whole "
        f"split, which the sampler divides among the ranks; got {n} of the {total} examples of "
        f"split {str(name)!r}, as datasets.distributed.split_dataset_by_node(..., "
        f"world_size={num_replicas}) leaves it, so the ranks together would see only "
        f"1/{num_replicas} of the split per epoch; pass the unsplit dataset and let the sampler "
        f"split it (it resumes on any world size), or keep split_dataset_by_node and pass "
        f"num_replicas=1, rank=0"
    )


class DistributedSampler(torch.utils.data.Sampler[int]):
    """Drop-in for ``torch.utils.data.DistributedSampler``, seekable in O(1).

    ``set_epoch(e)`` moves the cursor to (e, 0) unless it is already in epoch e (a resumed
    run keeps its position). After the epoch's last sample the cursor reads (e, n): a
    ``set_epoch(e)`` there keeps the epoch empty, ``set_epoch(e + 1)`` starts the next one,
    and an ``iter()`` with no ``set_epoch`` since the epoch's iterator finished rolls over to
    (e + 1, 0); a state saved after the last sample but before the iterator finished first
    yields the (empty) rest of epoch e, exactly as the uninterrupted loop would.
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        order: Any = "feistel",
        grown: Any = None,
    ) -> None:
        where = "DistributedSampler"
        self.dataset = dataset
        self.n = dataset_length(dataset, where)
        self.num_replicas, self.rank = _dist.world(num_replicas, rank, where=where)
        self.shuffle = check_bool(shuffle, "shuffle", where)
        self.drop_last = check_bool(drop_last, "drop_last", where)
        self.seed = check_counter(seed, "seed", where)
        self._order_arg = order
        if self.shuffle and _source.shuffles_itself(dataset):  # e.g. seekdata.Mixture
            raise ValueError(
                f"{where}: {type(dataset).__name__} orders its own positions, so shuffle must be "
                f"False (shuffling them again loses its per-prefix weight bound); got shuffle=True"
            )
        self.growths = check_growths(grown, self.n, where, dataset)
        self.order: Order = self._make_order(self.seed)
        self.cursor = Cursor(self.n)
        self._assign_rank(self.num_replicas, self.rank)

    def _assign_rank(self, num_replicas: int, rank: int) -> None:
        split = _already_split(self.dataset, self.n, num_replicas)
        if split is not None:
            warnings.warn(split, stacklevel=3)
        self.num_replicas, self.rank = num_replicas, rank
        self.num_samples = self.local_len(0)
        self.total_size = self.num_samples * self.num_replicas

    def reshard(self, num_replicas: int, rank: int) -> None:
        """Become rank ``rank`` of ``num_replicas`` (a framework sharding a single-process
        loader). The cursor is a global position, so it stays where it is."""
        where = "DistributedSampler.reshard"
        num_replicas, rank = _dist.world(num_replicas, rank, where=where)
        self._assign_rank(num_replicas, rank)

    # --- the cursor (seekdata._core.cursor.Cursor holds it and its epoch-end rules) -----------

    @property
    def epoch(self) -> int:
        return self.cursor.epoch

    @property
    def position(self) -> int:
        """Global positions of the epoch consumed over all ranks; ``n`` at the epoch's end."""
        return self.cursor.position

    @property
    def origin(self) -> int:
        return self.cursor.origin

    def local_len(self, start: int) -> int:
        """Samples each rank takes from global position ``start`` to the end of the epoch."""
        return _partition.local_len(self.n, self.num_replicas, self.drop_last, start)

    def position_after(self, start: int, consumed: int) -> int:
        """The global cursor after each rank consumed ``consumed`` samples from ``start``."""
        return _partition.position_after(self.n, self.num_replicas, self.drop_last, start, consumed)

    def local_indices(self, epoch: int, start: int, k0: int, k1: int) -> np.ndarray:
        """This rank's dataset indices for its local steps ``k0 <= k < k1`` from ``start``
        (in the cursor's current partition: padding repeats from its origin)."""
        origin = max(self.cursor.origin, pad_origin(self.order, epoch))
        pos = _partition.local_positions(
            self.n, self.num_replicas, self.rank, start, origin, k0, k1
        )
        return self.order.indices(epoch, pos)

    def begin(self) -> tuple[int, int]:
        """Apply the epoch-end rules at ``iter()``; return (epoch, start position)."""
        self.cursor.begin()
        if self.local_len(self.cursor.position) == 0:
            self.cursor.advance(self.n)
        return self.cursor.epoch, self.cursor.position

    def next_start(self) -> tuple[int, int]:
        """(epoch, start position) of the next ``iter()``; moves nothing."""
        epoch, start = self.cursor.next_start()
        return epoch, (start if self.local_len(start) else self.n)

    # --- torch API ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[int]:
        epoch, start = self.begin()
        total = self.local_len(start)
        cursor = self.cursor
        for k0 in range(0, total, _CHUNK):
            k1 = min(k0 + _CHUNK, total)
            for k, index in enumerate(self.local_indices(epoch, start, k0, k1).tolist(), k0 + 1):
                # count before yielding: what the caller holds counts as consumed
                cursor.advance(self.position_after(start, k))
                yield index
        cursor.finish()

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Move to (epoch, 0), or keep the position when the cursor is already in ``epoch``."""
        self.cursor.set_epoch(epoch, "DistributedSampler.set_epoch")

    def seek(self, position: int, epoch: int | None = None) -> None:
        """Move the cursor to global ``position`` of ``epoch`` (default: the current one).

        The epoch keeps its partition from position 0 (torch's padding from the epoch's head),
        so a seek on the world size that consumed the epoch continues it exactly."""
        where = "DistributedSampler.seek"
        position = check_counter(position, "position", where)
        if position > self.n:
            raise ValueError(
                f"{where}: position must be in [0, {self.n}] (n means the epoch's end); got "
                f"{position}; pass a global position, i.e. samples consumed over all ranks"
            )
        if epoch is not None:
            epoch = check_counter(epoch, "epoch", where)
        self.cursor.seek(position, epoch)

    def skip(self, batches: int, batch_size: int = 1) -> None:
        """Move the cursor by ``batches`` global batches (``batch_size`` samples per rank each;
        back when negative) in O(1), across epoch ends: every epoch counts
        ``ceil(len(self) / batch_size)`` batches, and a move lands on the epoch's own partition.
        :meth:`seekdata.StatefulDataLoader.skip` does this for a loader."""
        where = "DistributedSampler.skip"
        batches = check_int(batches, "batches", where)
        batch_size = check_int(batch_size, "batch_size", where, 1)
        per_epoch = _partition.batches(self.local_len(0), batch_size, False)
        epoch, position = self.cursor.next_start()
        at = (epoch, position, position // (self.num_replicas * batch_size))
        geo = (self.n, self.num_replicas, self.drop_last, batch_size, False)
        try:
            epoch, position, _ = _partition.move(geo, per_epoch, at, batches)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        self.check_reachable(epoch, where)
        self.cursor.seek(position, epoch)

    def indices(self, epoch: int, positions: Any) -> np.ndarray:
        """Dataset indices at global ``positions`` of ``epoch`` (any rank's view): O(1) each."""
        epoch = check_counter(epoch, "epoch", "DistributedSampler.indices")
        return self.order.indices(epoch, np.asarray(positions) % self.n)

    # --- state ----------------------------------------------------------------------------------

    def stream_fields(self) -> dict[str, Any]:
        """The state fields that define the stream (a state must match them to load)."""
        return {
            _state.K_N: self.n,
            _state.K_SEED: self.seed,
            _state.K_ORDER: self.order.spec() if self.shuffle else "sequential",
            _state.K_SHUFFLE: self.shuffle,
            _state.K_DROP_LAST: self.drop_last,
        }

    def state_dict(self) -> dict[str, Any]:
        """The cursor and the fields that define the stream: JSON-native, the same on every rank.
        One value of the cursor: safe to call from another thread while iterating."""
        now = self.cursor.snapshot
        return {
            _state.K_VERSION: _state.VERSION,
            _state.K_KIND: "sampler",
            **self.cursor.fields(now),
            **self.stream_fields(),
            _state.K_WORLD_SIZE: self.num_replicas,
            _state.K_ORIGIN: self.cursor.origin_field(now),
            **self.grown_field(),
            **_identity.stream_records(self.dataset, now.epoch, now.position),
        }

    def grown_field(self) -> dict[str, Any]:
        """The state's record of the dataset's growths (nothing when it never grew)."""
        return {_state.K_GROWN: [list(g) for g in self.growths]} if self.growths else {}

    def load_state_dict(self, state: Any, strict: bool = True, *, grow: bool = False) -> None:
        """Restore the cursor in O(1). Any world size; the stream fields must match.
        ``grow=True``: the dataset grew (append-only) since the state was saved."""
        where = "DistributedSampler.load_state_dict"
        state = _state.upgrade(state)  # a state of an earlier format, as this release writes it
        if check_bool(grow, "grow", where):
            growths = _grown.growth_at(state, self.growths, self.n, where, self.dataset)
            n_then = int(state[_state.K_N])
        else:
            n_then, growths = _grown.check_grown(state, self.growths, self.n, where, self.dataset)
        expected = {_state.K_KIND: "sampler", **self.stream_fields(), **self.fields_then(n_then)}
        # what identifies the data first (its length, its own stream), then drop_last
        rest = _identity.check_data(state, expected, self.dataset, n_then, where, strict)
        _state.check_unit(state, self.cursor.unit, where)  # even with strict=False
        self.check_state(state, rest, where, strict)
        if growths != self.growths:
            self.grow(growths)
        self.restore(state)

    def check_state(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        """Validate the whole state (raises; warns for strict=False mismatches); assigns nothing."""
        _state.check_state(state, expected, where=where, strict=strict)

    def restore(self, state: Any, batch: int = 0) -> None:
        """Move to a state :meth:`check_state` accepted. Another world size re-partitions
        the rest of the epoch from the cursor: its padding never repeats a consumed sample."""
        position = state[_state.K_POSITION]
        position = min(position, self.n) if position < state[_state.K_N] else self.n
        same_world = state.get(_state.K_WORLD_SIZE) == self.num_replicas
        origin = state.get(_state.K_ORIGIN, 0) if same_world else position
        self.cursor.restore(
            state[_state.K_EPOCH],
            position,
            bool(state[_state.K_EXHAUSTED]),
            origin,
            batch,  # a loader's batches consumed in the epoch (state["step"])
            state.get(_state.K_SKIPS, ()),  # a loader's skipped global steps
        )

    def reseed(self, seed: int) -> None:
        """Adopt a checkpoint's seed (a loader's own default sampler, when seed= was not given)."""
        self.seed = seed
        self.order = self._make_order(seed)

    def _over(self, size: int, seed: int) -> Order:
        """The order rule over the first ``size`` items of the dataset."""
        dataset = first_items(self.dataset, size)
        return make_order(self._order_arg, size, seed, shuffle=self.shuffle, dataset=dataset)

    def _make_order(self, seed: int) -> Order:
        """The order over the dataset, across its growths if it grew."""
        if not self.growths:
            return self._over(self.n, seed)
        mixes = self.shuffle and self._order_arg in ("feistel", "torch")  # else: concatenate
        return GrownOrder(lambda size: self._over(size, seed), self.growths, self.n, seed, mixes)

    def check_reachable(self, epoch: int, where: str) -> None:
        """A move may not land before the epoch where the dataset first grew: the epochs
        before it were cut over another length."""
        if self.growths and epoch < self.growths[0].epoch:
            first = self.growths[0]
            raise ValueError(
                f"{where}: the move lands in epoch {epoch}, before the dataset grew (epoch "
                f"{first.epoch}, from {first.length} items); its epochs before were cut over "
                f"that length; move back at most to epoch {first.epoch}"
            )

    def fields_then(self, n: int) -> dict[str, Any]:
        """The stream fields a state saved when the dataset had ``n`` items records."""
        spec = self._over(n, self.seed).spec() if self.shuffle else "sequential"
        return {_state.K_N: n, _state.K_ORDER: spec}

    def grow(self, growths: tuple[Growth, ...]) -> None:
        """Adopt ``growths`` (checked: :func:`seekdata._core.growth.check_growths`)."""
        self.growths = growths
        self.order = self._make_order(self.seed)


DistributedSampler.__module__ = "seekdata.sampler"  # where users import it from (its face)
