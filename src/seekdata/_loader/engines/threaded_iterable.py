"""An ``IterableDataset`` under thread workers (``worker_method="thread"``): torchdata's
per-worker iteration, run in :class:`~seekdata._loader.threads.Pool` threads, with torchdata's
state.

Process workers (torchdata's loader) give each worker its own copy of the dataset, its own
iterator (``get_worker_info()`` tells it which part of the stream is its), and hand out batch
``k`` from the workers in turn, skipping a worker once its iterator has ended. Threads do the
same with the same pieces: torch's own iterable fetcher (``next()`` ``batch_size`` times, then
collate), torchdata's per-worker state (``_make_state_dict``: the dataset's and the iterator's
``state_dict()``, and whether the fetcher ended) and torchdata's checkpoint layout
(``_snapshot``: the main snapshot, each worker's snapshot, the last worker that yielded). So the
batches are the process workers' batches, in their order, and a checkpoint taken under one
method resumes under the other (at the same ``num_workers``, as for any iterable state).

One dataset serves every thread, except where its state lives on the dataset object itself
(torchdata's ``Stateful``: ``state_dict``/``load_state_dict`` on the dataset) or the dataset
is its own iterator (``__next__``): then each thread gets a deep copy of it, as each process
gets one, since one object cannot hold ``num_workers`` positions.

What differs from torchdata: a snapshot is taken at every batch (``snapshot_every_n_steps`` is
read as 1: the same state as torchdata's at 1, the most precise one at any value), and state
always comes from the thread that made the batch, under the batch's own turn.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils.data

from seekdata._loader.device import move
from seekdata._loader.threads import Pool, RngWatch, unshared

__all__ = ["ThreadedIterable", "needs_copy"]

# torchdata's checkpoint keys (its _StatefulMultiProcessingDataLoaderIter class attributes)
_SNAPSHOT = "_snapshot"
_MAIN = "_main_snapshot"
_WORKERS = "_worker_snapshots"
_STEP = "_snapshot_step"
_SINCE = "_steps_since_snapshot"
_LAST = "_last_yielded_worker_id"
_FINISHED = "_iterator_finished"
_BASE_SEED = "_base_seed"


def needs_copy(dataset: Any) -> bool:
    """Whether each thread needs its own copy of ``dataset``: its iteration state lives on the
    dataset object (torchdata's ``Stateful`` protocol on the dataset, or the dataset is its own
    iterator), which ``num_workers`` threads cannot share."""
    from torchdata.stateful_dataloader.stateful import Stateful

    return isinstance(dataset, Stateful) or hasattr(dataset, "__next__")


def _worker_key(i: int) -> str:
    return f"worker_{i}"


def _stateless(state: dict[str, Any]) -> bool:
    """torchdata's test for a fast-forward resume: the first worker snapshot holds neither a
    dataset state nor an iterator state, so the epoch is replayed from its start."""
    first = next((s for s in state[_SNAPSHOT][_WORKERS].values() if s is not None), None)
    if first is None:
        return False
    fetcher = first["fetcher_state"] or {}
    return first["dataset_state"] is None and fetcher.get("dataset_iter_state") is None


class _Task:
    """What the caller hands worker ``worker``: the start of its iteration (``start``, with
    ``restore``: its checkpointed state, if any), or ``index`` (the batch sampler's next
    indices) with ``main``, the main snapshot at its send."""

    __slots__ = ("index", "main", "restore", "start", "worker")

    def __init__(
        self, worker: int, start: bool, index: Any, main: dict[str, Any] | None, restore: Any
    ) -> None:
        self.worker, self.start, self.index, self.main = worker, start, index, main
        self.restore = restore


class _Out:
    """A worker's answer: ``data`` (a batch; None when its iterator ended or for a start) and
    its state after it, the way torchdata's worker reports it."""

    __slots__ = ("data", "ended", "main", "state", "worker")

    def __init__(self, worker: int, data: Any, ended: bool, state: Any, main: Any) -> None:
        self.worker, self.data, self.ended, self.state, self.main = worker, data, ended, state, main


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Book:
    """The checkpoint of one iteration, in torchdata's layout: what was handed out so far."""

    def __init__(self, num_workers: int, base_seed: int, main: dict[str, Any]) -> None:
        self.num_workers = num_workers
        self.base_seed = base_seed
        self.main = main  # the main snapshot of the last batch handed out (at its send)
        self.workers: dict[str, Any] = {_worker_key(i): None for i in range(num_workers)}
        self.step = 0  # batches handed out
        self.last = num_workers - 1  # the worker that made the last one
        self.finished = False

    def state(self) -> dict[str, Any]:
        return copy.deepcopy(
            {
                _SNAPSHOT: {
                    _STEP: self.step,
                    _LAST: self.last,
                    _MAIN: self.main,
                    _WORKERS: self.workers,
                },
                _SINCE: 0,
                _FINISHED: self.finished,
            }
        )


def _started(run: Iterator[Any], book: _Book, pool: Pool) -> None:
    """Each worker's state once its iteration started (restored), as torchdata waits for them
    before the first batch."""
    for _ in range(pool.num_workers):
        out = next(run)
        if isinstance(out, _Failed):
            run.close()  # type: ignore[attr-defined]  # threads._Run
            raise out.error
        book.workers[_worker_key(out.worker)] = out.state


class ThreadedIterable:
    """The thread-worker iteration of :class:`~seekdata._loader.engines.iterable.IterableEngine`
    over torchdata's loader ``engine`` (read for its options: they are torch's, set by the
    loader): ``iterate()``, ``state_dict()``, ``load_state_dict()`` as torchdata's loader."""

    def __init__(self, engine: Any, watch_names: tuple[str, ...], user_fn: Any) -> None:
        self.engine = engine
        self.watch_names = watch_names
        self.user_fn = user_fn  # worker_init_fn (the loader's; threads never reseed global RNG)
        self._pool: Pool | None = None  # persistent threads
        self._datasets: list[Any] = []  # each thread's dataset (the one, or its copy)
        self._base_seed: int | None = None  # the persistent iterator's
        self._pending: dict[str, Any] | None = None  # a loaded state, for the next iteration
        self._book: _Book | None = None  # the iteration in progress (or the last one)
        self._fresh: Iterator[Any] | None = None  # started for state_dict(), not yet iterated

    # --- the loader's side --------------------------------------------------------------------

    def close(self) -> None:
        """Stop persistent threads (an option changed, or a state was loaded)."""
        if self._pool is not None:
            self._pool.close()
        self._pool = None
        self._fresh = None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.close()
        self._book = None
        self._pending = copy.deepcopy(state) if state else None

    def state_dict(self) -> dict[str, Any]:
        if self._book is None:
            if self._pending is not None:
                return copy.deepcopy(self._pending)
            self._fresh = self._start(eager=True)  # as torchdata: start the workers for it
        assert self._book is not None  # _start set it
        return self._book.state()

    def iterate(self) -> Iterator[Any]:
        fresh, self._fresh = self._fresh, None
        return fresh if fresh is not None else self._start()

    # --- one iteration ------------------------------------------------------------------------

    def _new_base_seed(self) -> int:
        """torch draws the worker base seed from the loader's generator at every new iterator
        (``_BaseDataLoaderIter``); so do we, so a state's ``_base_seed`` is the processes'."""
        return int(
            torch.empty((), dtype=torch.int64).random_(generator=self.engine.generator).item()
        )

    def _start(self, eager: bool = False) -> Iterator[Any]:
        """Start an iteration (the threads' fetchers, restored from a loaded state if any) and
        return its batches; each worker's first state is awaited, as torchdata does, at the
        first batch (``eager``: now, for a ``state_dict()`` before iterating)."""
        engine = self.engine
        n = engine.num_workers
        persistent = bool(engine.persistent_workers)
        pending, self._pending = self._pending, None
        restore: dict[str, Any] | None = None
        if pending is not None:
            drawn = self._new_base_seed()  # torchdata draws one, then takes the checkpoint's
            self._base_seed = pending[_SNAPSHOT][_MAIN].get(_BASE_SEED, drawn)
            self.close()
            restore = pending[_SNAPSHOT][_WORKERS]
            if pending[_FINISHED]:
                # torchdata starts the next epoch: persistent workers keep the restored
                # dataset state, new ones (a new base seed) start from the dataset here
                restore = (
                    {key: {**value, "fetcher_state": None} for key, value in restore.items()}
                    if persistent
                    else None
                )
                pending = None
        pool = self._pool
        if pool is None or not pool.alive:
            if pending is None and restore is None:  # a new iterator: torch draws its seed
                self._base_seed = self._new_base_seed()
            assert self._base_seed is not None
            dataset = engine.dataset
            copies = needs_copy(dataset)
            self._datasets = [copy.deepcopy(dataset) if copies else dataset for _ in range(n)]
            watch = RngWatch(self.watch_names)
            pool = Pool(n, dataset, self._base_seed, self.user_fn, watch, self._datasets)
            self._pool = pool if persistent else None
        assert self._base_seed is not None
        sampler = engine._index_sampler  # torch's batch sampler over an iterable: [None] * bs
        sampler_iter = iter(sampler)
        counted = itertools.count(1)

        def main_state() -> dict[str, Any]:
            from torchdata.stateful_dataloader.worker import try_to_serialize

            return {
                "_num_workers": n,
                "_sampler_iter_state": try_to_serialize(sampler_iter),
                "_index_sampler_state": try_to_serialize(sampler),
                "_sampler_iter_yielded": sent,
                "_IterableDataset_len_called": engine._IterableDataset_len_called,
                "_shared_seed": None,
                _BASE_SEED: self._base_seed,
            }

        sent = 0
        book = self._book = _Book(n, self._base_seed, main_state())
        alive = [True] * n
        replay = pending is not None and _stateless(pending)
        first = 0 if pending is None or replay else (pending[_SNAPSHOT][_LAST] + 1) % n
        end = object()

        def planned() -> Iterator[_Task]:
            nonlocal sent
            for i in range(n):  # each worker starts (restores) its iteration first
                key = _worker_key(i)
                yield _Task(i, True, None, None, None if restore is None else restore.get(key))
            cycle = itertools.cycle([*range(first, n), *range(first)])
            while True:
                index = next(sampler_iter, end)  # torch's order: the index is drawn first
                if index is end:
                    return
                sent = next(counted)
                for _ in range(n):
                    worker = next(cycle)
                    if alive[worker]:
                        break
                else:
                    return  # every worker's iterator ended
                yield _Task(worker, False, index, main_state(), None)

        depth = (engine.prefetch_factor or 2) * n
        run = pool.batches(
            planned(), self._work(), depth, engine.timeout, _Failed, not persistent, phased=False
        )
        started = [False]
        if eager:  # state_dict() before iterating: the workers' first states, now
            _started(run, book, pool)
            started[0] = True
        batches = self._batches(run, book, alive, pool, started)
        if pending is not None:
            snap = pending[_SNAPSHOT]
            if replay:  # torchdata's fast-forward: nothing to restore, so replay the epoch
                for _ in range(snap[_STEP]):
                    next(batches, None)
            else:
                book.step, book.last, book.main = snap[_STEP], snap[_LAST], snap[_MAIN]
            for _ in range(pending[_SINCE]):  # the batches since torchdata's snapshot
                next(batches, None)
        return batches

    def _work(self) -> Any:
        """What a worker thread runs for a task: start its iteration, or fetch a batch."""
        from torch.utils.data._utils.fetch import _IterableDatasetFetcher
        from torchdata.stateful_dataloader.worker import _make_state_dict, try_to_deserialize

        engine = self.engine
        kind = torch.utils.data.dataloader._DatasetKind.Iterable
        datasets = self._datasets
        fetchers: list[Any] = [None] * len(datasets)
        auto = engine._auto_collation
        collate, drop_last = unshared(engine.collate_fn), engine.drop_last
        pin = engine.pin_memory and torch.accelerator.is_available()

        def state(i: int) -> Any:  # torchdata pickles it through a queue: a copy, as here
            return copy.deepcopy(_make_state_dict(i, kind, fetchers[i], datasets[i]))

        def work(task: _Task) -> _Out:
            i = task.worker
            if task.start:  # the worker's start: torchdata's worker loop, in order
                restore = task.restore
                if restore is not None and restore["dataset_state"] is not None:
                    datasets[i] = try_to_deserialize(datasets[i], restore["dataset_state"])
                fetcher = _IterableDatasetFetcher(datasets[i], auto, collate, drop_last)
                fetcher_state = None if restore is None else restore["fetcher_state"]
                if fetcher_state is not None:
                    if fetcher_state["dataset_iter_state"] is not None:
                        it = try_to_deserialize(
                            fetcher.dataset_iter, fetcher_state["dataset_iter_state"]
                        )
                        if it is not None:
                            fetcher.dataset_iter = it
                    fetcher.ended = False  # torchdata asks once more even at the end
                fetchers[i] = fetcher
                return _Out(i, None, False, state(i), None)
            try:
                data = fetchers[i].fetch(task.index)
            except StopIteration:
                return _Out(i, None, True, state(i), task.main)
            if pin:
                data = move(data, lambda t: t.pin_memory())
            return _Out(i, data, False, state(i), task.main)

        return work

    def _batches(
        self, run: Iterator[Any], book: _Book, alive: list[bool], pool: Pool, started: list[bool]
    ) -> Iterator[Any]:
        """The run's batches in order, the book kept at each one handed out (a worker whose
        iterator ended is skipped from then on, its last state kept). The code between two
        yields runs inside the caller's ``next()``: it marks that wait for ``RngWatch`` (odd
        phase) over the workers' starts and the batches skipped, not each ``next(run)``, so the
        first batch is always checked, as for map-style."""
        watch = pool.shared.watch
        watch.phase += 1  # odd: the caller waits in its first next()
        try:
            if not started[0]:
                _started(run, book, pool)
            for out in run:
                if isinstance(out, _Failed):
                    raise out.error
                book.workers[_worker_key(out.worker)] = out.state
                if out.ended:
                    alive[out.worker] = False
                    continue
                book.step += 1
                book.last = out.worker
                book.main = out.main
                watch.phase += 1  # even: the caller runs its step
                yield out.data
                watch.phase += 1  # odd: back in next()
            book.finished = True
        finally:  # an error, or the iterator dropped: its batches ahead go, its threads stop
            if watch.phase & 1:
                watch.phase += 1
            run.close()  # type: ignore[attr-defined]  # threads._Run
