"""What the seekable and replay paths share: torch's DataLoader over planned batches.

An iterator plans its epoch from the cursor (a :class:`~seekdata._loader.plan.Plan`, a value),
hands torch's DataLoader the plan's batches (:class:`~seekdata._loader.plan.PlannedBatch`: indices
plus counters) through :class:`_PlannedBatches`, and torch fetches them (workers, pinning,
prefetch) through :class:`~seekdata._loader.fetch.KeyedDataset`. :class:`_LoaderIter` commits the
plan to the cursor at its first batch and moves the cursor only for batches it has handed out; the
engine is the one caller of the cursor's moves.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from seekdata._core import reshape as _reshape
from seekdata._core import state as _state
from seekdata._core import streams as _streams
from seekdata._core.cursor import Cursor, Snapshot
from seekdata._core.rngkeys import step_seed
from seekdata._core.steprng import set_step_rng
from seekdata._loader import workers as _workers
from seekdata._loader.config import LoaderConfig
from seekdata._loader.device import DevicePrefetch
from seekdata._loader.fetch import Collate, FailedBatch, KeyedDataset, WorkerInit
from seekdata._loader.plan import Plan, PlannedBatch
from seekdata._loader.seed import seed_to_adopt
from seekdata._loader.threads import THREAD, Pool, RngWatch, pinned, unshared

_ENGINE_TAG = 0x454E474E  # "ENGN": key of the generator handed to torch (worker base seeds)
WHERE = "StatefulDataLoader"


class _PlannedBatches(torch.utils.data.Sampler[PlannedBatch]):
    """torch's batch sampler: the batches of the plan the starting iterator hands it.

    torch's DataLoader asks its batch sampler for an iterator when it starts one (and when
    persistent workers start another epoch); :class:`_LoaderIter` passes the plan's batches
    right before, as a value: nothing is read back from the engine."""

    def __init__(self) -> None:
        self._next: Iterator[PlannedBatch] = iter(())
        self._count = 0

    def hand(self, batches: Iterator[PlannedBatch], count: int) -> None:
        """The batches the next ``iter()`` of torch's DataLoader yields, and how many."""
        self._next, self._count = batches, count

    def __iter__(self) -> Iterator[PlannedBatch]:
        return self._next  # torch asks twice as it starts (__init__, then _reset): the same

    def __len__(self) -> int:
        return self._count


class MapEngine:
    """A map-style path. A subclass plans an epoch from the cursor (:meth:`plan`, a value; it
    moves nothing), lists the plan's batches (:meth:`batches`), commits the plan and counts
    batches handed out (:meth:`commit`, :meth:`advance_past`: the only moves of the cursor while
    iterating), and supplies the values its state is checked against."""

    cursor: Cursor
    sampler: Any
    batch_sampler: Any

    def __init__(
        self, dataset: Any, config: LoaderConfig, collate_fn: Callable[[list[Any]], Any]
    ) -> None:
        self.config = config  # the checked arguments (what follows only changes at runtime)
        self.keys = config.keys  # the seed, shared with the loader and the config: adopt_seed
        self.step_rng = config.step_rng  # key the caller's global RNG by each batch's number
        self.lookahead: DevicePrefetch | None = None  # device=: set by the loader
        self.place: Callable[[Any], Any] | None = None  # batch -> device (loader.place)
        self._live: weakref.ReferenceType[_LoaderIter] | None = None
        reseed = self.keys.reseed_global_rng
        self.keyed = KeyedDataset(dataset, self.seed, reseed, config.batched_fetch)
        self.planned = _PlannedBatches()
        # batch_size=None: one sample per step without collation, as torch does
        per_sample = config.per_sample
        self.loader = torch.utils.data.DataLoader(
            self.keyed,
            batch_size=None if per_sample else 1,  # torch's rule for batch_sampler=
            sampler=self.planned if per_sample else None,
            batch_sampler=None if per_sample else self.planned,  # type: ignore[arg-type]
            collate_fn=Collate(collate_fn, config.batch_transform, self.seed, reseed),
            worker_init_fn=WorkerInit(config.worker_init_fn),
            generator=_streams.torch_generator(self.seed, _ENGINE_TAG),
            **config.torch.kwargs(),
        )
        # worker_method="thread": the same fetch in threads of this process, which never
        # reseed global RNG (every thread shares it): a draw from it raises (RngWatch)
        self.worker_method = config.worker_method
        self.thread_keyed = KeyedDataset(dataset, self.seed, False, config.batched_fetch)
        self.thread_collate = _thread_collate(collate_fn, config.batch_transform, self.seed)
        self._pool: Pool | None = None  # persistent thread workers

    # --- what a subclass provides ---------------------------------------------------------------

    def plan(self) -> Plan:
        """The plan of the epoch the next iterator runs, from the cursor; moves nothing."""
        raise NotImplementedError

    def batches(self, plan: Plan) -> Iterator[PlannedBatch]:
        """The plan's batches on this rank (a pure function of the plan)."""
        raise NotImplementedError

    def commit(self, plan: Plan) -> None:
        """The iterator hands out the plan's first batch: the cursor enters the plan's epoch
        (its epoch-end rules) where the plan's first batch starts."""
        raise NotImplementedError

    def advance_past(self, plan: Plan, k: int, end: bool = False) -> int:
        """Move the cursor past the first ``k`` batches of ``plan``, which were handed out
        (``end``: the iterator finished); the number in the epoch of the last one handed out."""
        raise NotImplementedError

    def full_len(self) -> int:
        raise NotImplementedError

    def rank(self) -> int:
        """This rank, for the model-side step RNG (``step_rng``)."""
        raise NotImplementedError

    def assign_rank(self, num_replicas: int, rank: int) -> None:
        """Become rank ``rank`` of ``num_replicas`` (a framework sharding this loader)."""
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        raise NotImplementedError

    def stream_fields(self) -> dict[str, Any]:
        raise NotImplementedError

    def world_size(self) -> int:
        raise NotImplementedError

    def max_step(self, state: Any) -> int:
        raise NotImplementedError

    def check(self, state: Any, expected: dict[str, Any], where: str, strict: bool) -> None:
        raise NotImplementedError

    def load(self, state: Any, batch: int) -> None:
        raise NotImplementedError

    def growths_for(
        self, state: Any, grow: bool, where: str
    ) -> tuple[dict[str, Any], tuple[Any, ...]]:
        """(the stream fields ``state`` must record where the dataset grew since, the growths
        to adopt); changes nothing. Only a seekable sampler re-cuts an epoch that grew."""
        if grow:
            raise ValueError(
                f"{where}: grow=True re-cuts the epoch of a seekable sampler; got the sampler "
                f"{type(self.sampler).__name__}, whose order only replays; build the loader "
                f"with shuffle= or sampler=seekdata.DistributedSampler(dataset)"
            )
        return {}, ()

    def adopt_growths(self, growths: tuple[Any, ...]) -> None:
        """The dataset's growths, checked by :meth:`growths_for`."""

    def grown_field(self) -> dict[str, Any]:
        """The state's record of the dataset's growths (nothing when it never grew)."""
        return {}

    def cursor_fields(self, now: Snapshot) -> dict[str, Any]:
        """The cursor's part of the state, from one value of the cursor."""
        return self.cursor.fields(now)

    def skip(self, batches: int) -> None:
        raise ValueError(self._cannot_skip("skip"))

    def skip_steps(self, start: int, stop: int) -> None:
        raise ValueError(self._cannot_skip("skip_steps"))

    def seek_batch(self, batch: int) -> None:
        """The cursor at batch ``batch`` of the epoch the next iterator runs (accelerate's
        ``skip_first_batches``)."""
        raise ValueError(self._cannot_skip("skip_to"))

    def _cannot_skip(self, what: str) -> str:
        return (
            f"StatefulDataLoader.{what}: moving the cursor needs a seekable sampler; got the "
            f"sampler {type(self.sampler).__name__}, whose order only replays; build the loader "
            f"with shuffle= or sampler=seekdata.DistributedSampler(dataset)"
        )

    def detach_live(self) -> None:
        """The cursor moved: an iterator from before stops counting (torchdata's rule)."""
        live = self._live() if self._live is not None else None
        if live is not None:
            live.detach()
        self._live = None

    def elastic_batch(self, state: Any, where: str, strict: bool) -> int:
        """The per-rank batch size ``state`` must hold: ours (the seekable path also accepts
        another one that keeps the global batch)."""
        return self.config.batch_size or 1

    @property
    def seed(self) -> int:
        """The seed now (:class:`~seekdata._loader.config.Keys`, shared with the loader)."""
        return self.keys.seed

    def adopt_seed(self, seed: int) -> None:
        """A checkpoint's seed replaces ours (``seed=None``): the shared keys take it (the
        loader and its config see it), and what runs the fetch, which holds it by value (it
        is pickled into workers), is keyed with it."""
        self.keys.seed = seed
        self.keyed.seed = seed
        self.loader.collate_fn.seed = seed  # type: ignore[union-attr]  # our Collate
        self.thread_keyed.seed = self.thread_collate.seed = seed
        self.loader.generator = _streams.torch_generator(seed, _ENGINE_TAG)
        # persistent workers hold copies keyed by the old seed: let the next iter() start anew
        if getattr(self.loader, "_iterator", None) is not None:
            self.loader._iterator = None

    # --- the Engine protocol --------------------------------------------------------------------

    def iterate(self) -> Iterator[Any]:
        # one cursor, one iterator moving it: a new iter() supersedes the live one, which
        # raises if used again (torchdata's rule, as after load_state_dict)
        self.detach_live()
        it = _LoaderIter(self)  # plans the epoch at its first next()
        self._live = weakref.ref(it)
        return it

    def set_option(self, name: str, value: Any) -> None:
        if name == "worker_method":
            self.worker_method = value
            return
        if name == "worker_init_fn":
            value = WorkerInit(value)
        elif name == "collate_fn":
            self.thread_collate = _thread_collate(value, self.config.batch_transform, self.seed)
            value = Collate(
                value, self.config.batch_transform, self.seed, self.keys.reseed_global_rng
            )
        if name in ("num_workers", "worker_init_fn") and self._pool is not None:
            self._pool.close()  # persistent thread workers of the old setting
            self._pool = None
        setattr(self.loader, name, value)

    def thread_batches(self, planned: Iterator[PlannedBatch]) -> Iterator[Any]:
        """The planned batches fetched and collated by ``num_workers`` threads, in order."""
        loader = self.loader
        num_workers = loader.num_workers
        persistent = bool(loader.persistent_workers)
        pool = self._pool
        if pool is None or not pool.alive:
            # the worker seeds torch's iterator would give (get_worker_info().seed)
            base = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator))
            user_fn = loader.worker_init_fn.user_fn  # type: ignore[union-attr]  # our WorkerInit
            watch = RngWatch(self.keys.reseed)
            pool = Pool(num_workers, self.keyed.dataset, base, user_fn, watch)
            self._pool = pool if persistent else None
        keyed, collate = self.thread_keyed, self.thread_collate
        fetch = keyed.__getitems__ if loader.batch_sampler is not None else keyed.__getitem__

        def fetched(batch: PlannedBatch) -> Any:
            return collate(fetch(batch))

        work: Callable[[Any], Any] = fetched
        if loader.pin_memory and _can_pin():
            work = pinned(fetched)
        depth = (loader.prefetch_factor or 2) * num_workers
        return pool.batches(planned, work, depth, loader.timeout, FailedBatch, not persistent)

    def fields(self, seed: int | None = None) -> dict[str, Any]:
        """The fields that define the stream; ``seed`` replaces ours (a seed to adopt)."""
        seed = self.seed if seed is None else seed
        stream = self.stream_fields()
        if self.config.owns_sampler:  # our default sampler's order is keyed by our seed
            stream[_state.K_SEED] = seed
        return {
            **stream,
            _state.K_BATCH_SIZE: self.config.batch_size or 1,
            _state.K_BATCH_DROP_LAST: self.config.drop_last,
            _state.K_SAMPLE_SEED: seed,
        }

    def state_dict(self) -> dict[str, Any]:
        _state.check_in_order(self.loader.in_order)
        now = self.cursor.snapshot  # one value: a state_dict() from another thread is never torn
        return {
            _state.K_VERSION: _state.VERSION,
            _state.K_KIND: "loader",
            **self.cursor_fields(now),
            _state.K_STEP: now.batch,
            **self.fields(),
            _state.K_WORLD_SIZE: self.world_size(),
            _state.K_ORIGIN: self.cursor.origin_field(now),
            **({_state.K_SKIPS: [list(p) for p in now.skips]} if now.skips else {}),
            **self.grown_field(),
            **_reshape.stream_records(self.keyed.dataset, now.epoch, now.position),
        }

    def load_state_dict(self, state: Any, strict: bool, grow: bool = False) -> None:
        where = "StatefulDataLoader.load_state_dict"
        state = _state.upgrade(state)  # a state of an earlier format, as this release writes it
        config = self.config
        seed = seed_to_adopt(
            state, self.seed, explicit=self.keys.explicit, owns_sampler=config.owns_sampler
        )
        then, growths = self.growths_for(state, grow, where)  # a dataset that grew: as it was
        expected = {_state.K_KIND: "loader", **self.fields(seed), **then}
        if isinstance(state, dict) and state.get(_state.K_KIND) == "sampler":
            stream = {**self.fields(seed), **then}
            expected = {_state.K_KIND: "sampler", **{k: stream[k] for k in self.stream_fields()}}
        if config.owns_sampler and not self.keys.explicit:  # the seed to adopt: one seed
            _state.check_one_seed(state, where)
        # what identifies the data first (its length, its own stream: a Mixture's, a token
        # corpus's, as it was then; the order over it), then how it is cut into batches
        rest = _reshape.check_data(
            state, expected, self.keyed.dataset, then.get(_state.K_N), where, strict
        )
        _state.check_unit(state, self.cursor.unit, where)  # even with strict=False
        if _state.K_BATCH_SIZE in rest:
            rest[_state.K_BATCH_SIZE] = self.elastic_batch(state, where, strict)
        self.check(state, rest, where, strict)
        batch = _state.check_step(state, self.max_step(state), where)
        # everything is valid: only now change the engine
        self.detach_live()
        if seed != self.seed:
            self.adopt_seed(seed)
        self.adopt_growths(growths)
        self.load(state, batch)


class _LoaderIter:
    """Hands out the batches of one plan; each batch handed out moves the cursor by one.

    The epoch is planned at the first ``next()`` (or ``len()``, or a torch iterator attribute),
    not at ``iter()``, so a ``set_epoch`` between the two applies, as with torch's lazily
    iterated samplers (Lightning calls ``iter()`` before ``set_epoch`` when it resumes at an
    epoch's end). Planning moves nothing: the plan is committed to the cursor at the first
    ``next()``, re-planned first if the cursor moved since it was made.
    """

    def __init__(self, engine: MapEngine) -> None:
        self._engine = engine
        self._plan: Plan | None = None
        self._batches: Iterator[Any] | None = None  # torch's iterator over the plan (or ours)
        self._k = 0  # batches handed out
        self._stale = False
        self._done = False  # the plan's batches are all out: StopIteration from now on
        self._step_seed: int | None = None  # step_rng: set_step_rng's seed for the plan's epoch
        self._rank = 0

    def detach(self) -> None:
        """Another iterator, a loaded state or a skip took the cursor: this iterator no longer
        moves it and raises if used (torchdata's rule). Dropping torch's iterator stops its
        workers (not persistent ones, which the loader keeps) in its ``__del__``, where a
        Ctrl-C would be ignored ("Exception ignored in ... __del__") and the script run on:
        Ctrl-C and the notices are held meanwhile and raised here once they are stopped."""
        self._stale = True
        with _workers.stopping_workers():  # Ctrl-C is raised after the block, not lost
            self._batches = iter(())  # the last reference: torch's iterator stops its workers

    def __iter__(self) -> _LoaderIter:
        return self

    def _start(self) -> Iterator[Any]:
        """Plan the epoch and start fetching its batches (torch's iterator: workers start)."""
        engine = self._engine
        plan = self._plan = engine.plan()
        if engine.step_rng:
            self._step_seed = step_seed(engine.seed, plan.epoch)
            self._rank = engine.rank()
        loader = engine.loader
        if loader.num_workers > 0 and engine.worker_method == THREAD:
            batches: Iterator[Any] = engine.thread_batches(engine.batches(plan))
        elif loader.num_workers == 0 and not loader.pin_memory:
            batches = _in_process(engine, engine.batches(plan))
        else:
            engine.planned.hand(engine.batches(plan), plan.num_batches)
            with _workers.starting_workers():
                loader.worker_init_fn.exiting = _workers.exit_flag()  # type: ignore[union-attr]
                batches = iter(loader)
        if engine.lookahead is not None:  # pulled ahead; __next__ counts at hand-out
            batches = engine.lookahead.wrap(batches)
        self._batches = batches
        return batches

    def __next__(self) -> Any:
        if self._stale:
            raise RuntimeError(
                "StatefulDataLoader: this iterator was replaced by a later iter(), "
                "load_state_dict(), skip() or skip_steps() of its loader, which has one cursor "
                "and lets one iterator move it; use the newest iterator, or call iter(loader) "
                "to continue from the loader's cursor"
            )
        if self._done:
            raise StopIteration
        engine = self._engine
        if self._k == 0 and (self._plan is None or engine.cursor.next_start() != self._plan.at):
            self._start()  # not planned yet, or the cursor moved (set_epoch) since the plan
        batches, plan = self._batches, self._plan
        assert batches is not None and plan is not None  # _start set both
        if self._k == 0:
            engine.commit(plan)
        try:
            batch = next(batches)
        except StopIteration:
            self._done = True
            engine.advance_past(plan, self._k, end=True)
            raise
        self._k += 1
        batch_in_epoch = engine.advance_past(plan, self._k)
        if self._step_seed is not None:  # the caller's model-side RNG: a function of the batch
            set_step_rng(self._step_seed, batch_in_epoch, rank=self._rank)
        if type(batch) is FailedBatch:  # consumed, as torch counts it; the next next() goes on
            batch.raise_error()
        place = engine.place
        return batch if place is None else place(batch)

    def __len__(self) -> int:
        """Batches this iterator hands out in all: the plan's (planned now if need be)."""
        return (self._plan or self._engine.plan()).num_batches

    def __getattr__(self, name: str) -> Any:  # torch's iterator attributes (_workers, ...)
        if name.startswith("__") or "_batches" not in self.__dict__:
            raise AttributeError(name)
        batches = self.__dict__["_batches"]
        if batches is None:  # torch's iterator exists from iter(): start it (the cursor stays)
            batches = self._start()
        return getattr(batches, name)


def _in_process(engine: MapEngine, planned: Iterator[PlannedBatch]) -> Iterator[Any]:
    """``num_workers=0`` without pinning: what torch's single-process iterator does for a
    map-style dataset — fetch each planned batch (``__getitems__`` with a batch sampler,
    ``dataset[planned]`` without), then collate — minus its per-batch machinery (a profiler
    range, the index and fetcher indirections: several µs a batch, most of the loader's own
    cost on a cheap sample). With workers or ``pin_memory``, torch's iterator runs as is."""
    loader = engine.loader
    collate: Callable[[Any], Any] = loader.collate_fn  # our Collate: a FailedBatch passes
    keyed = engine.keyed
    fetch = keyed.__getitems__ if loader.batch_sampler is not None else keyed.__getitem__
    for batch in planned:
        yield collate(fetch(batch))


def _can_pin() -> bool:
    """torch's rule: ``pin_memory`` pins when an accelerator is there, else warns and does not."""
    if torch.accelerator.is_available():
        return True
    warnings.warn(
        "'pin_memory' argument is set as true but no accelerator is found, then device pinned "
        "memory won't be used.",
        stacklevel=4,
    )
    return False


def _thread_collate(collate_fn: Any, batch_transform: Any, seed: int) -> Collate:
    """The collate of thread workers: no reseeding of global RNG (every thread shares it), and
    torch's default collate stacking into ordinary memory (:func:`unshared`)."""
    collate = Collate(collate_fn, batch_transform, seed, False)
    collate.collate_fn = unshared(collate_fn)  # after Collate read which function it is
    return collate
