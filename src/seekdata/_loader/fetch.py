"""What runs inside the engine's workers: keyed batches in, samples fetched under their RNG.

The loader's batch sampler yields :class:`PlannedBatch` objects instead of index lists. torch's
map-style fetcher hands each one to ``dataset.__getitems__`` (public since torch 2.0), which
here reads the batch the way the dataset reads:

- a dataset with a batched read of its own (:func:`batched_read`: HF ``datasets``, Arrow,
  a memmap of rows) gets one ``dataset.__getitems__(indices)`` call per batch, as torch makes
  it, with global RNG seeded from the batch's counters (seed, READ, epoch, step, digest of the
  indices) and :func:`seekdata.sample_rng` pointing at the batch's stream;
- any other dataset (or ``batched_fetch=False``) gets ``dataset[index]`` per sample, with global
  RNG seeded from (seed, epoch, index) and :func:`seekdata.sample_rng` at the sample's stream.

The collate wrapper then applies the batch-level transform with the batch's stream (seed,
BATCH, epoch, step, digest of the indices), in the worker. Every key and seed comes from
:mod:`seekdata.rng` (rng.STREAMS).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import numpy as np
import torch.utils.data
from torch._utils import ExceptionWrapper

from seekdata._core import globalrng as _globalrng
from seekdata._core import sample as _sample
from seekdata._core import source as _source
from seekdata._core import streams as _streams
from seekdata._core.rngkeys import batch_counters
from seekdata._loader import workers as _workers
from seekdata._loader.plan import PlannedBatch


class _Fetched(list):
    """The samples of one batch, carrying its plan to the collate wrapper — and, in the main
    process, the caller's global RNG state, which the collate wrapper restores."""

    planned: PlannedBatch
    saved: tuple[Any, Any, Any] | None = None


class _Read:
    """What one ``dataset.__getitems__`` call returned for a batch, as is (torch hands it to
    ``collate_fn`` unchanged), with its plan and, in the main process, the caller's global RNG
    state, which the collate wrapper restores."""

    __slots__ = ("planned", "samples", "saved")

    def __init__(
        self, samples: Any, planned: PlannedBatch, saved: tuple[Any, Any, Any] | None
    ) -> None:
        self.samples, self.planned, self.saved = samples, planned, saved


def batched_read(dataset: Any) -> bool:
    """Whether the loader reads a batch of ``dataset`` with one ``dataset.__getitems__`` call.

    What the source declares (``reads_batches``, a member of the source protocol: the
    file-backed sources say False and are read one sample at a time after their ``prefetch``;
    ``ParquetRows`` says True), else torch's rule (the attribute exists and is callable), except
    for torch's own wrappers, which define ``__getitems__`` whatever they wrap: a ``Subset``
    reads in batches when its dataset does, a ``StackDataset`` when all of its datasets do.
    Otherwise a ``Subset`` of a dataset that reads one sample at a time would lose its
    per-sample keys without a word. The rule is :func:`seekdata._core.source.reads_in_batches`."""
    return _source.reads_in_batches(dataset)


class FailedBatch:
    """A batch whose fetch or collation raised, carried to the loader as a value.

    torch's iterator counts a batch whose fetch raised as consumed and goes on with the next at
    the next ``next()``. Carrying the error as a value (instead of raising in the engine's
    iterator) keeps that rule on every path — a generator that raises is finished, which ended
    the epoch silently without workers — and lets the loader count the batch before it raises
    the error for the caller (:meth:`raise_error`)."""

    __slots__ = ("error",)

    def __init__(self, error: Any) -> None:
        self.error = error  # the exception (main process), or torch's wrapper of it (a worker)

    @staticmethod
    def caught() -> FailedBatch:
        """The exception being handled, as a value: as is in the main process; in a worker,
        wrapped as torch wraps a worker's error (its traceback as text: it crosses a pipe)."""
        info = torch.utils.data.get_worker_info()
        if info is None or getattr(info, "worker_method", None) == "thread":
            # this process (a thread worker too): the exception itself, with its traceback
            error = sys.exc_info()[1]
            if info is not None:
                _note(error, f"in DataLoader worker thread {info.id}")  # type: ignore[arg-type]
            return FailedBatch(error)
        # torch's own wrapper (private, stable since torch 1.0): the error torch's iterator
        # would raise for this worker, "Caught X in DataLoader worker process N" and the trace
        return FailedBatch(ExceptionWrapper(where=f"in DataLoader worker process {info.id}"))

    def raise_error(self) -> NoReturn:
        if isinstance(self.error, BaseException):
            raise self.error
        self.error.reraise()
        raise AssertionError("unreachable: reraise() raises")  # pragma: no cover


class KeyedDataset(torch.utils.data.Dataset):
    """Wraps a map-style dataset so that each fetch runs under its counters: the sample's, or
    the batch's for a batched read."""

    def __init__(
        self, dataset: Any, seed: int, reseed_global_rng: Any, batched_fetch: bool = True
    ) -> None:
        self.dataset = dataset
        self.seed = seed
        self.reseed = _globalrng.reseed_set(reseed_global_rng, "KeyedDataset")
        self.reseed_global_rng = bool(self.reseed)
        self.batched = batched_fetch and batched_read(dataset)  # one __getitems__ per batch
        # the source protocol's prefetch: a batch's bytes fetched at once, before its samples
        # are read one by one under their own keys (None: nothing to fetch ahead)
        self.prefetch = None if self.batched else _source.prefetch(dataset)
        # e.g. a Mixture: it reseeds every generator from its sample's own key before the
        # source runs, so reseeding from the position's key first is unobservable (read once:
        # a declaration of the source protocol)
        self.reseeds_itself = _source.reseeds_global_rng_itself(dataset)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, planned: Any) -> Any:  # batch_size=None: one planned batch per sample
        if not isinstance(planned, PlannedBatch):
            return self.dataset[planned]
        try:
            if not isinstance(planned.indices[0], int | np.integer):
                return self._fetch_bulk(planned)
            fetched = self._fetch(planned)
        except Exception:
            return FailedBatch.caught()
        if fetched.saved is not None:  # no keyed collate follows a single sample
            _globalrng.restore(fetched.saved)
        return fetched[0]

    def _fetch_bulk(self, planned: PlannedBatch) -> Any:
        """torch's bulk loading (batch_size=None, a sampler yielding lists of indices): the
        dataset fetches many samples in one call, so global RNG is keyed by the batch, as
        during collation; there is no single sample for sample_rng()."""
        saved = None
        if self.reseed:
            saved = self._callers(self.reseed)
            _seed_globals_for_batch(self.seed, planned, self.reseed)
        try:
            return self.dataset[planned.indices[0]]
        finally:
            if saved is not None:
                _globalrng.restore(saved)

    @staticmethod
    def _callers(reseed: tuple[str, ...]) -> tuple[Any, Any, Any] | None:
        """The caller's global RNG, when this fetch runs in the caller's process (num_workers=0):
        restored after the batch (even under step_rng, which reseeds it next: it tells a seed
        the program set from its own by torch.initial_seed())."""
        if torch.utils.data.get_worker_info() is None:
            return _globalrng.save(reseed)
        return None

    def __getitems__(self, planned: PlannedBatch) -> _Fetched | _Read | FailedBatch:
        """The samples of ``planned`` (torch's fetcher calls this with the batch sampler's item)."""
        try:
            if self.batched:
                return self._read(planned)
            if self.prefetch is not None:
                self.prefetch(list(planned.indices))  # changes no sample, draws nothing
            return self._fetch(planned)
        except Exception:
            return FailedBatch.caught()

    def _read(self, planned: PlannedBatch) -> _Read:
        """One ``dataset.__getitems__(indices)`` call, under the batch's counters."""
        reseed = self.reseed
        saved = None
        if reseed:
            saved = self._callers(reseed)  # restored by Collate
            _, epoch, step, digest = batch_counters(planned.epoch, planned.batch, planned.indices)
            _streams.seed_globals(_streams.read_seeds(self.seed, epoch, step, digest), reseed)
        _sample.enter_read(self.seed, planned)  # sample_rng(): the batch's stream
        try:
            samples = self.dataset.__getitems__(list(planned.indices))  # a list, as torch passes
        except BaseException as e:
            if saved is not None:
                _globalrng.restore(saved)
            if isinstance(e, StopIteration):  # torch's iterator would end the epoch silently
                raise _stopped(self.dataset, planned.indices, planned) from e
            if isinstance(e, Exception):  # its type stays the caller's to catch, as with torch
                _note(e, f"while {_reading(self.dataset, planned)}")
            raise
        finally:
            _sample.exit_read()
        error = _miscount(self.dataset, planned, samples)
        if error is not None:
            if saved is not None:
                _globalrng.restore(saved)
            raise error
        return _Read(samples, planned, saved)

    def _fetch(self, planned: PlannedBatch) -> _Fetched:
        reseed = self.reseed
        saved = self._callers(reseed) if reseed else None  # restored in Collate
        if reseed and self.reseeds_itself:
            reseed = ()
        indices = planned.indices
        out = _Fetched()
        try:  # the hot loop is the sample context's (one call per batch)
            _sample.fetch_batch(
                out, self.dataset.__getitem__, self.seed, planned.epoch, indices, reseed
            )
            if len(out) != len(indices):  # a StopIteration from getitem ends map() early
                raise _stopped(self.dataset, indices[len(out)])
        except BaseException as e:
            if saved is not None:
                _globalrng.restore(saved)
            if isinstance(e, StopIteration):  # torch's iterator would end the epoch silently
                raise _stopped(self.dataset, indices[len(out)]) from e
            raise
        out.planned = planned
        out.saved = saved
        return out


def _reading(dataset: Any, planned: PlannedBatch) -> str:
    """Which call read which batch, for an error: the class, epoch, batch and first indices."""
    shown = ", ".join(str(i) for i in planned.indices[:8]) + (", ..." if len(planned) > 8 else "")
    return (
        f"{type(dataset).__name__}.__getitems__ read batch "
        f"{planned.batch} of epoch {planned.epoch} ({len(planned)} indices: [{shown}])"
    )


def _miscount(dataset: Any, planned: PlannedBatch, samples: Any) -> Exception | None:
    """The error when a read did not return one sample per index, as torch's collation expects;
    a mapping (columns, for a collate_fn of your own) is passed on unchecked, as torch does."""
    if isinstance(samples, Mapping):
        return None
    try:
        count = len(samples)
    except TypeError:
        return TypeError(
            f"{_reading(dataset, planned)} and returned {type(samples).__name__}, which has no "
            f"len(); __getitems__ must return one sample per index (a list of {len(planned)}); "
            f"return a list, or pass batched_fetch=False to read each sample with __getitem__"
        )
    if count == len(planned):
        return None
    return ValueError(
        f"{_reading(dataset, planned)} and returned {count} samples; __getitems__ must return one "
        f"sample per index ({len(planned)}); fix its return value, or pass batched_fetch=False to "
        f"read each sample with __getitem__"
    )


def _note(error: BaseException, note: str) -> None:
    """Add ``note`` to the traceback of ``error``, whose type stays the caller's to catch
    (Python 3.11+; on 3.10 the error goes on as raised)."""
    add = getattr(error, "add_note", None)
    if add is not None:
        add(note)


def _stopped(dataset: Any, index: Any, batch: PlannedBatch | None = None) -> RuntimeError:
    """The error for a StopIteration out of ``__getitem__(index)`` (or out of the
    ``__getitems__`` call that read ``batch``), which torch's iterator takes for the epoch's end."""
    if batch is None:
        call = f"{type(dataset).__name__}.__getitem__({index}) raised StopIteration"
        what = "a sample"
    else:
        call, what = f"{_reading(dataset, batch)} and raised StopIteration", "its samples"
    return RuntimeError(
        f"{call}, which would end the epoch silently; a map-style dataset must return {what} or "
        f"raise another exception (IndexError for an index out of range)"
    )


def _seed_globals_for_batch(seed: int, planned: PlannedBatch, reseed: tuple[str, ...]) -> None:
    """Global RNG during collation (e.g. a collator's random masking): keyed by the batch."""
    _, epoch, step, digest = batch_counters(planned.epoch, planned.batch, planned.indices)
    _streams.seed_globals(_streams.batch_seeds(seed, epoch, step, digest), reseed)


#: Collate functions that draw no randomness: reseeding global RNG before them is unobservable
#: (the next fetch reseeds per sample; with num_workers=0 the caller's state is restored).
_RANDOMLESS = (torch.utils.data.default_collate, torch.utils.data.default_convert)


class Collate:
    """Collates a keyed batch, then applies the batch transform with the batch's stream."""

    def __init__(
        self,
        collate_fn: Callable[[list[Any]], Any],
        batch_transform: Callable[[Any, np.random.Generator], Any] | None,
        seed: int,
        reseed_global_rng: Any = True,
    ) -> None:
        self.collate_fn = collate_fn
        self.batch_transform = batch_transform
        self.seed = seed
        self.reseed = _globalrng.reseed_set(reseed_global_rng, "Collate")
        self.reseed_global_rng = bool(self.reseed)
        self._randomless = any(collate_fn is f for f in _RANDOMLESS)
        self._reseed_batch = () if self._randomless and batch_transform is None else self.reseed

    def __call__(self, data: Any) -> Any:
        kind = type(data)
        if kind is FailedBatch:
            return data
        if kind is _Read:  # one __getitems__ call: what it returned, as torch passes it on
            samples = data.samples
        elif kind is _Fetched:  # torch's collate functions take the list as is; a user's a list
            samples = data if self._randomless else list(data)
        else:  # one sample (batch_size=None): nothing keyed
            try:
                return self.collate_fn(data)
            except Exception:
                return FailedBatch.caught()
        try:
            if self._reseed_batch:
                _seed_globals_for_batch(self.seed, data.planned, self._reseed_batch)
            batch = self.collate_fn(samples)
            if self.batch_transform is not None:
                # rng.batch_generator's stream; the loader's own indices need no checking
                planned = data.planned
                counters = batch_counters(planned.epoch, planned.batch, planned.indices)
                batch = self.batch_transform(batch, _streams.numpy_generator(self.seed, *counters))
            return batch
        except Exception:
            return FailedBatch.caught()
        finally:
            if data.saved is not None:  # num_workers=0: the caller's global RNG, as it was
                _globalrng.restore(data.saved)


class WorkerInit:
    """Worker start-up: outlive a preemption notice (SLURM signals every process of a job step;
    it is the trainer's to handle, see seekdata.preemption.worker_signals) while obeying the
    loader's process when it exits (``exiting``: its exit flag, which the engine sets before it
    starts workers), then run the user's function."""

    def __init__(self, user_fn: Callable[[int], None] | None) -> None:
        self.user_fn = user_fn
        self.exiting: Any = None  # preemption.exit_flag() of the process that starts workers

    def __call__(self, worker_id: int) -> None:
        _workers.worker_signals(self.exiting)
        info = torch.utils.data.get_worker_info()
        if info is not None and isinstance(info.dataset, KeyedDataset):
            # get_worker_info().dataset is the user's dataset (this worker's copy), as in torch;
            # WorkerInfo refuses assignment, hence object.__setattr__
            object.__setattr__(info, "dataset", info.dataset.dataset)
        if self.user_fn is not None:
            self.user_fn(worker_id)
