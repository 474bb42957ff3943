"""StatefulDataLoader: torch's DataLoader as the engine, a cursor as the state.

The loader plans each epoch from a seekable sampler's cursor, hands the engine
:class:`~seekdata._fetch.BatchKey` objects (indices plus counters), and advances the cursor
only for batches it has handed to the caller. Resume is an O(1) seek: nothing is replayed.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable, Collection, Iterator
from typing import Any, TypeVar

import numpy as np
import torch.utils.data

from seekdata import _globalrng, rng
from seekdata import state as S
from seekdata._fetch import BatchKey, Collate, KeyedDataset, WorkerInit
from seekdata._iterable import IterableEngine
from seekdata._plan import ReplayPlan, SeekPlan
from seekdata._seed import default_seed, seed_to_adopt
from seekdata._torch_api import FORWARDED, FROZEN, check_torch_args
from seekdata.sampler import DistributedSampler, _check_bool, dataset_length

__all__ = ["StatefulDataLoader"]

_ENGINE_TAG = 0x454E474E  # "ENGN": key of the generator handed to torch (worker base seeds)
_T_co = TypeVar("_T_co", covariant=True)


class _KeyBatches(torch.utils.data.Sampler[BatchKey]):
    """The engine's batch sampler: yields the batches the loader planned, as keys."""

    def __init__(self, loader: StatefulDataLoader) -> None:
        self._loader = weakref.proxy(loader)

    def __iter__(self) -> Iterator[BatchKey]:
        return self._loader._plan.batches()

    def __len__(self) -> int:
        return self._loader._plan.num_batches


class _BatchIndices(torch.utils.data.BatchSampler):
    """``loader.batch_sampler`` with torch's meaning: iterating it gives this rank's index lists
    of the current epoch from the cursor, and ``len()`` is the batches of a full epoch.

    It is a view: iterating it never moves the cursor (only batches the loader hands out do).
    Frameworks rebuild loaders from it; the rebuilt loader gets the right indices but fetches
    them without seekdata's per-sample randomness, so accelerate's rebuilds are refused (see
    :mod:`seekdata.integrations.accelerate`).
    """

    def __init__(self, loader: StatefulDataLoader, sampler: DistributedSampler) -> None:
        super().__init__(sampler, loader.batch_size or 1, loader.drop_last)
        self._loader = weakref.proxy(loader)
        self._seeker = sampler

    def __iter__(self) -> Iterator[list[int]]:
        if "accelerate" in sys.modules:  # a rebuild by accelerate would drop the keyed fetch
            from seekdata.integrations.accelerate import _refuse_rebuild

            _refuse_rebuild(sys._getframe(1))
        s = self._seeker
        epoch, start = s.epoch, s.position  # the epoch-end rule of DistributedSampler._begin
        if start >= s.n and s._exhausted and not s._explicit:
            epoch, start = epoch + 1, 0
        plan = SeekPlan(s, self.batch_size, self.drop_last)
        plan.epoch, plan.start = epoch, (start if s._local_len(start) else s.n)
        plan.num_batches = plan._batches_from(plan.start)
        return (list(key.indices) for key in plan.batches())

    def __len__(self) -> int:
        return int(self._loader._plan.full_len())


class StatefulDataLoader(torch.utils.data.DataLoader[_T_co]):
    """A drop-in for ``torch.utils.data.DataLoader`` and torchdata's ``StatefulDataLoader``.

    It is a ``DataLoader`` subclass, so frameworks' ``isinstance`` checks pass, and it keeps
    the attributes they read (``dataset``, ``batch_size``, ``sampler``, ``num_workers``, ...),
    but it never runs ``DataLoader.__init__`` or its iterator: the engine is a separate
    ``DataLoader`` over keyed batches, and iteration goes through the cursor.

    Adds ``seed`` (keys every sample's and batch's randomness; None: derived from torch's seed
    and replaced by the checkpoint's at ``load_state_dict``), ``reseed_global_rng`` (seed
    torch/numpy/``random`` global RNG per sample; ``False`` when the dataset only uses
    :func:`seekdata.sample_rng`, or the names of the generators it uses, e.g.
    ``("torch", "numpy")``) and ``batch_transform`` (a ``(batch, rng) -> batch`` callable
    applied after collation, e.g. MixUp). ``state_dict()`` is a cursor; ``load_state_dict()``
    is O(1) and accepts another ``num_workers`` or world size. ``snapshot_every_n_steps`` is
    torchdata's: accepted and stored; a cursor is exact at every step whatever its value (it is
    passed on to torchdata for iterable datasets).
    """

    def __init__(
        self,
        dataset: torch.utils.data.Dataset[_T_co],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: int | None = None,
        reseed_global_rng: bool | Collection[str] = True,
        batch_transform: Callable[[Any, np.random.Generator], Any] | None = None,
        snapshot_every_n_steps: int | None = 1,
    ) -> None:
        where = "StatefulDataLoader"
        prefetch_factor = check_torch_args(
            dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, drop_last,
            timeout, prefetch_factor, persistent_workers,
        )  # fmt: skip
        if batch_sampler is not None:
            batch_size, drop_last = None, False  # torch's rule: the batch sampler decides both
        self._iterable: IterableEngine | None = None
        self.dataset = dataset
        self._seed_explicit = seed is not None  # else the checkpoint's seed wins at load
        self._owns_sampler = sampler is None and batch_sampler is None
        if seed is None:
            self.seed = default_seed(generator, where)
            generator = None  # used: it decided the seed
        else:
            self.seed = rng.check_counter(seed, "seed", where)
        if snapshot_every_n_steps is not None and (
            isinstance(snapshot_every_n_steps, bool)
            or not isinstance(snapshot_every_n_steps, int)
            or snapshot_every_n_steps < 1
        ):
            raise ValueError(
                f"{where}: snapshot_every_n_steps must be a positive int or None; got "
                f"{snapshot_every_n_steps!r}; leave it at 1 (a cursor is exact at every step)"
            )
        self.snapshot_every_n_steps = snapshot_every_n_steps
        reseed = _globalrng.reseed_set(reseed_global_rng, where)  # bool or generator names
        self.reseed_global_rng: bool | tuple[str, ...] = (
            bool(reseed_global_rng) if isinstance(reseed_global_rng, bool | np.bool_) else reseed
        )
        self.drop_last = _check_bool(drop_last, "drop_last", where)
        self.in_order = _check_bool(in_order, "in_order", where)
        if batch_transform is not None and not callable(batch_transform):
            raise TypeError(
                f"{where}: batch_transform must be a callable (batch, rng) -> batch; got "
                f"{type(batch_transform).__name__}; pass e.g. seekdata.transforms.MixUp(0.2)"
            )
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(
                f"{where}: batch_size must be a positive int or None; got {batch_size!r}; "
                f"pass e.g. batch_size=32, or None to load single samples"
            )
        if generator is not None:
            warnings.warn(
                f"{where}: generator= is ignored: order and worker seeds derive from seed="
                f"{self.seed}; pass seed= to change the stream",
                stacklevel=2,
            )
        self.batch_size = batch_size
        self.generator = None
        self.num_workers = num_workers  # before multiprocessing_context: torch's setter reads it
        self.multiprocessing_context = multiprocessing_context  # torch's setter: str -> context
        self.pin_memory_device = pin_memory_device
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.batch_transform = batch_transform
        self._live: weakref.ReferenceType[_LoaderIter] | None = None
        self._step = 0  # batches consumed in the current epoch on this rank
        engine_options = dict(  # what both engines take from us unchanged
            num_workers=num_workers,
            pin_memory=pin_memory,
            timeout=timeout,
            multiprocessing_context=self.multiprocessing_context,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        if isinstance(dataset, torch.utils.data.IterableDataset):
            if isinstance(dataset, torch.utils.data.IterDataPipe) and shuffle is not None:
                torch.utils.data.graph_settings.apply_shuffle_settings(dataset, shuffle=shuffle)
            self.sampler: Any = None
            self._batch_sampler: Any = None
            self.collate_fn = collate_fn or torch.utils.data.default_collate
            self._iterable = IterableEngine(
                dataset,
                self.seed,
                dict(
                    batch_size=batch_size,
                    collate_fn=collate_fn,
                    drop_last=drop_last,
                    worker_init_fn=worker_init_fn,
                    snapshot_every_n_steps=snapshot_every_n_steps or 1,
                    **engine_options,
                ),
            )
            self._initialized = True
            return
        n = dataset_length(dataset, where)
        self._plan: Any
        if shuffle and (sampler is not None or batch_sampler is not None):  # torch's rule
            which = "sampler" if sampler is not None else "batch_sampler"
            other = (
                "shuffle" if sampler is not None else "batch_size, shuffle, sampler and drop_last"
            )
            raise ValueError(
                f"{where}: {which} option is mutually exclusive with {other}; got shuffle="
                f"{shuffle!r} and a {which}; shuffle in the sampler (e.g. "
                f"seekdata.DistributedSampler(..., shuffle=True)) and leave shuffle unset here"
            )
        if isinstance(sampler, DistributedSampler) and batch_sampler is None:
            self.sampler = sampler
        elif sampler is None and batch_sampler is None:
            shuffle = bool(shuffle)
            self.sampler = DistributedSampler(dataset, 1, 0, shuffle=shuffle, seed=self.seed)
        else:
            self.sampler = sampler
        if isinstance(self.sampler, DistributedSampler) and batch_sampler is None:
            if self.sampler.n != n:
                raise ValueError(
                    f"{where}: the sampler must cover the dataset; it covers {self.sampler.n} "
                    f"samples but len(dataset) is {n}; build the sampler on this dataset"
                )
            self._plan = SeekPlan(self.sampler, batch_size or 1, self.drop_last)
            # torch's rule: batch_size=None means no batch sampler
            self._batch_sampler = None if batch_size is None else _BatchIndices(self, self.sampler)
        else:
            self._plan = ReplayPlan(sampler, batch_sampler, batch_size, self.drop_last, n, where)
            # the user's batch sampler, or the torch BatchSampler over the user's sampler
            self._batch_sampler = (
                batch_sampler
                if batch_sampler is not None
                else (None if batch_size is None else self._plan.batches_of)
            )
        self._keyed = KeyedDataset(dataset, self.seed, self.reseed_global_rng)
        collate = collate_fn
        if collate is None:
            collate = (
                torch.utils.data.default_collate
                if batch_size is not None or batch_sampler is not None
                else torch.utils.data.default_convert
            )
        self.collate_fn = collate
        engine_generator = rng.torch_generator(self.seed, _ENGINE_TAG)
        # batch_size=None: one sample per step without collation, as torch does
        keys = _KeyBatches(self)
        per_sample = batch_size is None and batch_sampler is None
        self._engine = torch.utils.data.DataLoader(
            self._keyed,
            batch_size=None if per_sample else 1,  # torch's rule for batch_sampler=
            sampler=keys if per_sample else None,
            batch_sampler=None if per_sample else keys,  # type: ignore[arg-type]  # keys, not lists
            collate_fn=Collate(collate, batch_transform, self.seed, self.reseed_global_rng),
            worker_init_fn=WorkerInit(worker_init_fn),
            generator=engine_generator,
            **engine_options,
        )
        self._initialized = True

    # --- torch's attribute rules ----------------------------------------------------------------

    def __setattr__(self, attr: str, val: Any) -> None:
        if not self.__dict__.get("_initialized", False):
            super().__setattr__(attr, val)
            return
        if attr in FROZEN:
            raise ValueError(
                f"{attr} attribute should not be set after {type(self).__name__} is "
                f"initialized: it defines the stream (torch refuses it too); got {attr}="
                f"{val!r}; build a new loader with it"
            )
        super().__setattr__(attr, val)  # multiprocessing_context: torch's validating setter
        if attr in FORWARDED:  # torch reads these at iter(): so does the engine
            value = getattr(self, attr)
            if self._iterable is not None:
                if attr == "worker_init_fn":
                    self._iterable.seeder.user_fn = value
                    return
                if attr == "num_workers":
                    self._iterable.num_workers = value
                setattr(self._iterable.engine, attr, value)
                return
            if attr == "worker_init_fn":
                value = WorkerInit(value)
            elif attr == "collate_fn":
                value = Collate(value, self.batch_transform, self.seed, self.reseed_global_rng)
            setattr(self._engine, attr, value)

    def _resized_sampler(self) -> DistributedSampler | None:
        """torch's default samplers read len(dataset) at every iter() and len(); the loader's
        own sampler does too: rebuilt (same seed, epoch and epoch-end flags) when it changed."""
        old = self._plan.sampler if self._owns_sampler else None
        if old is None or dataset_length(self.dataset, "StatefulDataLoader") == old.n:
            return None
        new = DistributedSampler(self.dataset, 1, 0, shuffle=old.shuffle, seed=old.seed)
        new.epoch, new._explicit, new._exhausted = old.epoch, old._explicit, old._exhausted
        new.position = new.n if old.position >= old.n else 0
        return new

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # not torch's iterator class
        if self._iterable is not None:
            return iter(self._iterable)
        resized = self._resized_sampler()
        if resized is not None:
            old = self._plan.sampler
            if 0 < old.position < old.n:
                raise ValueError(
                    f"StatefulDataLoader: len(dataset) changed from {old.n} to {resized.n} in "
                    f"the middle of epoch {old.epoch} (at position {old.position}), where the "
                    f"cursor counts the old length; finish the epoch, or call "
                    f"set_epoch({old.epoch + 1}), before iterating"
                )
            if self.sampler is old:
                super().__setattr__("sampler", resized)
            self._plan = SeekPlan(resized, self._plan.batch_size, self.drop_last)
            if self._batch_sampler is not None:
                self._batch_sampler = _BatchIndices(self, resized)
        it = _LoaderIter(self)  # plans the epoch at its first next(), as torch reads the sampler
        self._live = weakref.ref(it)
        return it

    def __len__(self) -> int:
        """Batches in a full epoch on this rank, as torch's DataLoader counts them."""
        if self._iterable is not None:
            return len(self._iterable.engine)
        resized = self._resized_sampler()
        if resized is None:
            return int(self._plan.full_len())
        return SeekPlan(resized, self._plan.batch_size, self.drop_last).full_len()

    def set_epoch(self, epoch: int) -> None:
        """Same rules as ``DistributedSampler.set_epoch``: keeps the position of a restored
        epoch; an epoch below the restored one is obeyed, with a warning naming both."""
        if self._iterable is not None:
            self._iterable.set_epoch(epoch)
            return
        self._plan.set_epoch(epoch)

    # --- what frameworks read -------------------------------------------------------------------

    @property
    def batch_sampler(self) -> Any:  # type: ignore[override]  # read-only, as torch guards it
        """torch's meaning: the batches of indices (None for ``batch_size=None``); read-only."""
        return self._batch_sampler

    @property
    def _is_accelerate_prepared(self) -> bool:
        """Read by ``Accelerator.prepare``; True hands this loader back unrebuilt (see
        :mod:`seekdata.integrations.accelerate`, which also shards it across processes)."""
        if self._prepared or "accelerate" not in sys.modules:
            return self._prepared
        from seekdata.integrations.accelerate import _adopt

        return _adopt(self, sys._getframe(1))

    @_is_accelerate_prepared.setter
    def _is_accelerate_prepared(self, value: bool) -> None:  # accelerate marks what it prepared
        self._prepared = bool(value)

    # accelerate's save_state / load_state save a prepared loader's state_dict() when this is set
    use_stateful_dataloader = True
    _place: Callable[[Any], Any] | None = None  # set by accelerate's prepare: batch -> device
    _prepared = False

    # --- state ----------------------------------------------------------------------------------

    def _fields(self, seed: int | None = None) -> dict[str, Any]:
        """The fields that define the stream; ``seed`` replaces ours (a seed to adopt)."""
        seed = self.seed if seed is None else seed
        stream = self._plan.stream_fields()
        if self._owns_sampler:  # our default sampler's order is keyed by our seed
            stream[S.K_SEED] = seed
        return {
            **stream,
            S.K_BATCH_SIZE: self.batch_size or 1,
            S.K_BATCH_DROP_LAST: self.drop_last,
            S.K_SAMPLE_SEED: seed,
        }

    def _apply_seed(self, seed: int) -> None:
        self.seed = seed
        if self._owns_sampler:
            self._plan.sampler._reseed(seed)
        self._keyed.seed = seed
        self._engine.collate_fn.seed = seed  # type: ignore[union-attr]  # our Collate
        self._engine.generator = rng.torch_generator(seed, _ENGINE_TAG)
        # persistent workers hold copies keyed by the old seed: let the next iter() start anew
        if getattr(self._engine, "_iterator", None) is not None:
            self._engine._iterator = None

    def state_dict(self) -> dict[str, Any]:
        """The cursor: JSON-native, a few hundred bytes, identical on every rank. Counts only
        batches already handed to the caller, never prefetched ones. No IPC."""
        if self._iterable is not None:
            return self._iterable.state_dict()
        if not self.in_order:
            raise ValueError(
                "StatefulDataLoader.state_dict: exact resume needs in_order=True; with "
                "in_order=False batches reach you out of order, so no cursor says which were "
                "consumed; pass in_order=True to checkpoint"
            )
        return {
            S.K_VERSION: S.VERSION,
            S.K_KIND: "loader",
            **self._plan.cursor(),
            S.K_STEP: self._step,
            **self._fields(),
            S.K_WORLD_SIZE: self._plan.world_size(),
            S.K_ORIGIN: self._plan.origin(),
        }

    def load_state_dict(self, state: Any, strict: bool = True) -> None:
        """Restore the cursor in O(1), validating the whole state before changing anything.

        Any ``num_workers``; any world size with a seekable sampler. As in torchdata, it may be
        called while an iterator exists: the next ``iter()`` starts from the loaded state (the
        old iterator stops counting and raises if used). With ``seed=None`` the checkpoint's
        seed is adopted."""
        where = "StatefulDataLoader.load_state_dict"
        if self._iterable is not None:
            self._iterable.load_state_dict(state, strict, adopt_seed=not self._seed_explicit)
            self.seed = self._iterable.seed
            return
        seed = seed_to_adopt(
            state, self.seed, explicit=self._seed_explicit, owns_sampler=self._owns_sampler
        )
        expected = {S.K_KIND: "loader", **self._fields(seed)}
        if isinstance(state, dict) and state.get(S.K_KIND) == "sampler":
            stream = self._fields(seed)
            expected = {S.K_KIND: "sampler", **{k: stream[k] for k in self._plan.stream_fields()}}
        self._plan.check(state, expected, where, strict)
        step, limit = state.get(S.K_STEP, 0), self._plan.max_step(state)
        if step > limit:  # the type and the sign were checked with the rest
            raise S.StateMismatchError(
                f"{where}: state['step'] must be in [0, {limit}] at position "
                f"{state[S.K_POSITION]} (a step consumes at least one position); got {step}; "
                f"pass an unmodified state_dict()"
            )
        # everything is valid: only now change the loader
        live = self._live() if self._live is not None else None
        if live is not None:
            live._detach()
        self._live = None
        if seed != self.seed:
            self._apply_seed(seed)
        self._plan.load(state)
        self._step = step


class _LoaderIter:
    """Wraps the engine's iterator; each batch handed out moves the cursor by one batch.

    The epoch is planned at the first ``next()``, not at ``iter()``: a ``set_epoch`` between
    the two applies, as with torch's lazily iterated samplers (Lightning calls ``iter()`` before
    ``set_epoch`` when it resumes at an epoch's end).
    """

    def __init__(self, loader: StatefulDataLoader) -> None:
        self._loader = loader
        self._engine_iter: Iterator[Any] | None = None
        self._k = 0
        self._done = False
        self._stale = False

    def _detach(self) -> None:
        """A state was loaded: this iterator no longer moves the cursor (torchdata's rule)."""
        self._stale = True
        self._engine_iter = iter(())  # drop the engine's iterator (its workers shut down)

    def __iter__(self) -> _LoaderIter:
        return self

    def _start(self) -> Iterator[Any]:
        loader = self._loader
        loader._plan.begin(loader._step)
        loader._step = loader._plan.step0
        self._engine_iter = iter(loader._engine)
        return self._engine_iter

    def __next__(self) -> Any:
        if self._stale:
            raise RuntimeError(
                "StatefulDataLoader: this iterator was created before load_state_dict(), which "
                "moved the loader to the loaded state; call iter(loader) to continue from it"
            )
        engine_iter = self._engine_iter if self._engine_iter is not None else self._start()
        try:
            batch = next(engine_iter)
        except StopIteration:
            self._done = True
            self._loader._plan.consumed(self._k, end=True)
            raise
        self._k += 1
        self._loader._step += 1
        self._loader._plan.consumed(self._k)
        place = self._loader._place
        return batch if place is None else place(batch)

    def __len__(self) -> int:
        if self._engine_iter is None:
            self._start()
        return int(self._loader._plan.num_batches)

    def __getattr__(self, name: str) -> Any:  # torch's iterator attributes (_workers, ...)
        if name.startswith("__") or "_engine_iter" not in self.__dict__:
            raise AttributeError(name)
        engine_iter = self.__dict__["_engine_iter"]
        if engine_iter is None:  # torch's iterator exists from iter(): start ours to answer
            engine_iter = self._start()
        return getattr(engine_iter, name)
