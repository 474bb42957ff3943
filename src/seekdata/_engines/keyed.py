"""What the seekable and replay paths share: torch's DataLoader over keyed batches.

The engine's batch sampler yields :class:`~seekdata._fetch.BatchKey` objects (indices plus
counters) that a subclass plans from its cursor; torch's DataLoader fetches them (workers,
pinning, prefetch) through :class:`~seekdata._fetch.KeyedDataset`, and :class:`_LoaderIter`
moves the cursor only for batches it has handed to the caller.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from seekdata import preemption, rng
from seekdata import state as S
from seekdata._cursor import Cursor, Now
from seekdata._device import DevicePrefetch
from seekdata._fetch import BatchKey, Collate, FailedBatch, KeyedDataset, WorkerInit
from seekdata._seed import seed_to_adopt
from seekdata.training import set_step_rng

_ENGINE_TAG = 0x454E474E  # "ENGN": key of the generator handed to torch (worker base seeds)
WHERE = "StatefulDataLoader"


class _KeyBatches(torch.utils.data.Sampler[BatchKey]):
    """torch's batch sampler: yields the batches the engine planned, as keys."""

    def __init__(self, engine: KeyedEngine) -> None:
        self._engine = weakref.proxy(engine)

    def __iter__(self) -> Iterator[BatchKey]:
        return self._engine.batches()

    def __len__(self) -> int:
        return self._engine.num_batches


class KeyedEngine:
    """A map-style path. Subclasses plan the epoch from the cursor (``begin``, ``batches``,
    ``consumed``) and say how a state is checked and loaded (``check``, ``load``, ...)."""

    cursor: Cursor
    sampler: Any
    batch_sampler: Any

    def __init__(
        self,
        dataset: Any,
        seed: int,
        *,
        seed_explicit: bool,
        owns_sampler: bool,
        reseed: bool | tuple[str, ...],
        batch_size: int | None,
        drop_last: bool,
        per_sample: bool,
        collate_fn: Callable[[list[Any]], Any],
        batch_transform: Callable[..., Any] | None,
        worker_init_fn: Callable[[int], None] | None,
        options: dict[str, Any],
        step_rng: bool = True,
        batched_fetch: bool = True,
    ) -> None:
        self.seed = seed
        self.step_rng = step_rng  # key the caller's global RNG by each batch's step
        self.lookahead: DevicePrefetch | None = None  # device=: set by the loader
        self.seed_explicit, self.owns_sampler = seed_explicit, owns_sampler
        self.batch_size, self.drop_last = batch_size, drop_last
        self.reseed, self.batch_transform = reseed, batch_transform
        self.num_batches = 0  # batches of the epoch planned by begin()
        self._live: weakref.ReferenceType[_LoaderIter] | None = None
        self.keyed = KeyedDataset(dataset, seed, reseed, batched_fetch)
        keys = _KeyBatches(self)
        # batch_size=None: one sample per step without collation, as torch does
        self.loader = torch.utils.data.DataLoader(
            self.keyed,
            batch_size=None if per_sample else 1,  # torch's rule for batch_sampler=
            sampler=keys if per_sample else None,
            batch_sampler=None if per_sample else keys,  # type: ignore[arg-type]  # keys, not lists
            collate_fn=Collate(collate_fn, batch_transform, seed, reseed),
            worker_init_fn=WorkerInit(worker_init_fn),
            generator=rng.torch_generator(seed, _ENGINE_TAG),
            **options,
        )

    # --- what a subclass provides ---------------------------------------------------------------

    def begin(self) -> None:
        """Apply the epoch-end rules and plan the epoch from the cursor (sets num_batches)."""
        raise NotImplementedError

    def batches(self) -> Iterator[BatchKey]:
        raise NotImplementedError

    def consumed(self, k: int, end: bool = False) -> None:
        """``k`` batches of the planned epoch were handed out; ``end``: the iterator finished."""
        raise NotImplementedError

    def full_len(self) -> int:
        raise NotImplementedError

    def rank(self) -> int:
        """This rank, for the model-side step RNG (``step_rng``)."""
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

    def load(self, state: Any, step: int) -> None:
        raise NotImplementedError

    def cursor_fields(self, now: Now) -> dict[str, Any]:
        """The cursor's part of the state, from one value of the cursor."""
        return self.cursor.fields(now)

    def skip(self, batches: int) -> None:
        raise ValueError(self._cannot_skip("skip"))

    def skip_steps(self, start: int, stop: int) -> None:
        raise ValueError(self._cannot_skip("skip_steps"))

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
        return self.batch_size or 1

    def adopt_seed(self, seed: int) -> None:
        """A checkpoint's seed replaces ours (``seed=None``): key the samples with it."""
        self.seed = seed
        self.keyed.seed = seed
        self.loader.collate_fn.seed = seed  # type: ignore[union-attr]  # our Collate
        self.loader.generator = rng.torch_generator(seed, _ENGINE_TAG)
        # persistent workers hold copies keyed by the old seed: let the next iter() start anew
        if getattr(self.loader, "_iterator", None) is not None:
            self.loader._iterator = None

    # --- the Engine protocol --------------------------------------------------------------------

    def iterate(self, place: Callable[[Any], Any] | None) -> Iterator[Any]:
        # one cursor, one iterator moving it: a new iter() supersedes the live one, which
        # raises if used again (torchdata's rule, as after load_state_dict)
        self.detach_live()
        it = _LoaderIter(self, place)  # plans the epoch at its first next()
        self._live = weakref.ref(it)
        return it

    def set_option(self, name: str, value: Any) -> None:
        if name == "worker_init_fn":
            value = WorkerInit(value)
        elif name == "collate_fn":
            value = Collate(value, self.batch_transform, self.seed, self.reseed)
        setattr(self.loader, name, value)

    def fields(self, seed: int | None = None) -> dict[str, Any]:
        """The fields that define the stream; ``seed`` replaces ours (a seed to adopt)."""
        seed = self.seed if seed is None else seed
        stream = self.stream_fields()
        if self.owns_sampler:  # our default sampler's order is keyed by our seed
            stream[S.K_SEED] = seed
        return {
            **stream,
            S.K_BATCH_SIZE: self.batch_size or 1,
            S.K_BATCH_DROP_LAST: self.drop_last,
            S.K_SAMPLE_SEED: seed,
        }

    def signature(self) -> str | None:
        """The dataset's ``stream_signature`` (a :class:`seekdata.Mixture`'s), if it has one."""
        sig = getattr(self.keyed.dataset, "stream_signature", None)
        return sig if isinstance(sig, str) else None

    def state_dict(self) -> dict[str, Any]:
        if not self.loader.in_order:
            raise ValueError(
                "StatefulDataLoader.state_dict: exact resume needs in_order=True; with "
                "in_order=False batches reach you out of order, so no cursor says which were "
                "consumed; pass in_order=True to checkpoint"
            )
        now = self.cursor.now  # one value: a state_dict() from another thread is never torn
        return {
            S.K_VERSION: S.VERSION,
            S.K_KIND: "loader",
            **self.cursor_fields(now),
            S.K_STEP: now.step,
            **self.fields(),
            S.K_WORLD_SIZE: self.world_size(),
            S.K_ORIGIN: self.cursor.origin_field(now),
            **({S.K_SKIPS: [list(p) for p in now.skips]} if now.skips else {}),
            **({S.K_DATASET: sig} if (sig := self.signature()) is not None else {}),
        }

    def load_state_dict(self, state: Any, strict: bool) -> None:
        where = "StatefulDataLoader.load_state_dict"
        seed = seed_to_adopt(
            state, self.seed, explicit=self.seed_explicit, owns_sampler=self.owns_sampler
        )
        expected = {S.K_KIND: "loader", **self.fields(seed)}
        expected[S.K_BATCH_SIZE] = self.elastic_batch(state, where, strict)
        if isinstance(state, dict) and state.get(S.K_KIND) == "sampler":
            stream = self.fields(seed)
            expected = {S.K_KIND: "sampler", **{k: stream[k] for k in self.stream_fields()}}
        if self.owns_sampler and not self.seed_explicit:  # the seed to adopt must be one seed
            S.check_one_seed(state, where)
        self.check(state, expected, where, strict)
        if state[S.K_KIND] == "loader":  # a Mixture's (or token corpus's) own stream: the same?
            S.check_dataset(state, self.signature(), type(self.keyed.dataset), where, strict)
        step, limit = state.get(S.K_STEP, 0), self.max_step(state)
        if step > limit:  # the type and the sign were checked with the rest
            raise S.StateMismatchError(
                f"{where}: state['step'] must be in [0, {limit}] at position "
                f"{state[S.K_POSITION]} (a step consumes at least one position); got {step}; "
                f"pass an unmodified state_dict()"
            )
        # everything is valid: only now change the engine
        self.detach_live()
        if seed != self.seed:
            self.adopt_seed(seed)
        self.load(state, step)


class _LoaderIter:
    """Wraps torch's iterator; each batch handed out moves the cursor by one batch.

    The epoch is planned at the first ``next()``, not at ``iter()``: a ``set_epoch`` between
    the two applies, as with torch's lazily iterated samplers (Lightning calls ``iter()`` before
    ``set_epoch`` when it resumes at an epoch's end).
    """

    def __init__(self, engine: KeyedEngine, place: Callable[[Any], Any] | None) -> None:
        self._engine = engine
        self._place = place
        self._engine_iter: Iterator[Any] | None = None
        self._k = 0
        self._stale = False
        self._step_seed: int | None = None  # step_rng: set_step_rng's seed for this epoch
        self._rank = 0

    def detach(self) -> None:
        """Another iterator, a loaded state or a skip took the cursor: this iterator no longer
        moves it and raises if used (torchdata's rule)."""
        self._stale = True
        self._engine_iter = iter(())  # drop torch's iterator (its workers shut down)

    def __iter__(self) -> _LoaderIter:
        return self

    def _start(self) -> Iterator[Any]:
        self._engine.begin()
        if self._engine.step_rng:
            self._step_seed = rng.step_seed(self._engine.seed, self._engine.cursor.epoch)
            self._rank = self._engine.rank()
        loader = self._engine.loader
        if loader.num_workers == 0 and not loader.pin_memory:
            self._engine_iter = _in_process(self._engine)
        else:
            with preemption.starting_workers():
                loader.worker_init_fn.exiting = preemption.exit_flag()  # type: ignore[union-attr]
                self._engine_iter = iter(loader)
        if self._engine.lookahead is not None:  # pulled ahead; __next__ counts at hand-out
            self._engine_iter = self._engine.lookahead.wrap(self._engine_iter)
        return self._engine_iter

    def __next__(self) -> Any:
        if self._stale:
            raise RuntimeError(
                "StatefulDataLoader: this iterator was replaced by a later iter(), "
                "load_state_dict(), skip() or skip_steps() of its loader, which has one cursor "
                "and lets one iterator move it; use the newest iterator, or call iter(loader) "
                "to continue from the loader's cursor"
            )
        engine_iter = self._engine_iter if self._engine_iter is not None else self._start()
        try:
            batch = next(engine_iter)
        except StopIteration:
            self._engine.consumed(self._k, end=True)
            raise
        self._k += 1
        self._engine.consumed(self._k)
        if self._step_seed is not None:  # the caller's model-side RNG: a function of the step
            set_step_rng(self._step_seed, self._engine.cursor.step - 1, rank=self._rank)
        if type(batch) is FailedBatch:  # consumed, as torch counts it; the next next() goes on
            batch.raise_error()
        place = self._place
        return batch if place is None else place(batch)

    def __len__(self) -> int:
        if self._engine_iter is None:
            self._start()
        return int(self._engine.num_batches)

    def __getattr__(self, name: str) -> Any:  # torch's iterator attributes (_workers, ...)
        if name.startswith("__") or "_engine_iter" not in self.__dict__:
            raise AttributeError(name)
        engine_iter = self.__dict__["_engine_iter"]
        if engine_iter is None:  # torch's iterator exists from iter(): start ours to answer
            engine_iter = self._start()
        return getattr(engine_iter, name)


def _in_process(engine: KeyedEngine) -> Iterator[Any]:
    """``num_workers=0`` without pinning: what torch's single-process iterator does for a
    map-style dataset — fetch each planned batch (``__getitems__`` with a batch sampler,
    ``dataset[key]`` without), then collate — minus its per-batch machinery (a profiler range,
    the index and fetcher indirections: several µs a batch, most of the loader's own cost on
    a cheap sample). With workers or ``pin_memory``, torch's iterator runs as is."""
    loader = engine.loader
    collate: Callable[[Any], Any] = loader.collate_fn  # our Collate: a FailedBatch passes
    keyed = engine.keyed
    fetch = keyed.__getitems__ if loader.batch_sampler is not None else keyed.__getitem__
    for key in engine.batches():
        yield collate(fetch(key))
