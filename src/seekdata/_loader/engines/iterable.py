"""The iterable path: torchdata's StatefulDataLoader as the engine, counters for RNG.

An iterable dataset decides its own order, so seekdata cannot seek it. What this adds over
torchdata's loader: each worker's global RNG (the generators ``reseed_global_rng`` names:
torch/numpy/``random`` by default) is seeded from the counters (seed, epoch, rank, worker) —
never from the global RNG of the main process — and the state is wrapped in seekdata's
validated schema. The cursor holds the epoch and the epoch-end flags; the position within the
epoch is torchdata's (its own rank's stream). What is exact and what is not is listed in
docs/exact-resume.md ("Iterable datasets").
"""

from __future__ import annotations

import collections
import copy
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from seekdata._core import dist as _dist
from seekdata._core import globalrng as _globalrng
from seekdata._core import reshape as _reshape
from seekdata._core import state as _state
from seekdata._core import streams as _streams
from seekdata._core.cursor import Cursor
from seekdata._core.rngkeys import step_seed
from seekdata._core.steprng import set_step_rng
from seekdata._loader import workers as _workers
from seekdata._loader.config import LoaderConfig
from seekdata._loader.device import DevicePrefetch
from seekdata._loader.engines.threaded_iterable import ThreadedIterable
from seekdata._loader.seed import seed_to_adopt
from seekdata._loader.threads import THREAD

_WORKER_TAG = 0x574B5252  # "WKRR": worker RNG keys (seed, WORKER, epoch, rank, worker)
_CANNOT_SKIP = (
    "StatefulDataLoader.{what}: an IterableDataset decides its own order, so its cursor cannot "
    "move; got a loader over an IterableDataset; use a map-style dataset to skip batches"
)


@contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        # torchdata 0.11 calls a deprecated torch API on every iter(); not the user's concern
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
        yield


class WorkerSeeder:
    """``worker_init_fn``: seeds a worker's global RNG from (seed, epoch, rank, worker)."""

    def __init__(
        self,
        seed: int,
        rank: int,
        user_fn: Callable[[int], None] | None,
        names: tuple[str, ...] = _globalrng.GENERATORS,
    ) -> None:
        self.seed, self.rank, self.user_fn, self.epoch = seed, rank, user_fn, 0
        self.names = names  # the generators to seed (reseed_global_rng)
        self.exiting: Any = None  # the loader's process's exit flag (worker_signals)

    def seed_globals(self, worker: int) -> None:
        words = _streams.derive_key(self.seed, _WORKER_TAG, self.epoch, self.rank, worker, words=3)
        _streams.seed_globals((words[0], words[1] >> 32, words[2]), self.names)

    def __call__(self, worker_id: int) -> None:
        _workers.worker_signals(self.exiting)  # outlive a preemption notice, as WorkerInit does
        self.seed_globals(worker_id)
        if self.user_fn is not None:
            self.user_fn(worker_id)


class IterableEngine:
    """The iterable-dataset path of :class:`seekdata.StatefulDataLoader`."""

    sampler = None  # torch's attributes for an IterableDataset
    batch_sampler = None

    def __init__(self, dataset: Any, config: LoaderConfig) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

        self.config = config
        self.keys = config.keys  # the seed, shared with the loader and the config
        seed = self.seed
        self.dataset = dataset
        self.num_workers = config.torch.num_workers  # loader.num_workers = sets it
        kwargs = dict(  # torchdata's loader takes torch's arguments
            batch_size=config.batch_size,
            collate_fn=config.collate_fn,
            drop_last=config.drop_last,
            snapshot_every_n_steps=config.snapshot_every_n_steps or 1,
            **config.torch.kwargs(),
        )
        self.seeder = WorkerSeeder(
            seed, _dist.rank_or_zero(), config.worker_init_fn, self.keys.reseed
        )
        # the stream's end is torchdata's to find: only the epoch and its end flags live here
        self.cursor = Cursor(0, unit=_state.UNITS[1])  # its position: torchdata's batches
        self._generation = 0  # bumped by iter() and load_state_dict: older iterators are stale
        self.step_rng = config.step_rng  # key the caller's global RNG by each batch's number
        self.batch = 0  # batches of the current epoch handed out (the step RNG's counter)
        self.lookahead: DevicePrefetch | None = None  # device=: set by the loader
        self.place: Callable[[Any], Any] | None = None  # batch -> device (loader.place)
        # device=: torchdata's state after the last batch handed out, while its iterator has
        # pulled further ahead (None: torchdata's live state is the one handed out)
        self._held: dict[str, Any] | None = None
        # num_workers=0: the global-RNG state of the dataset's stream, kept apart from the caller's
        self._private: tuple[Any, Any, Any] | None = None
        with _quiet():
            self.engine = TorchdataLoader(
                dataset,
                worker_init_fn=self.seeder,
                generator=_streams.torch_generator(seed, _WORKER_TAG),
                **kwargs,
            )
        # worker_method="thread": torchdata's per-worker iteration and state, in threads of this
        # process that never reseed global RNG (a draw from it raises, as for map-style)
        self.worker_method = config.worker_method
        self.threaded = ThreadedIterable(self.engine, self.keys.reseed, config.worker_init_fn)

    @property
    def threads(self) -> bool:
        """Whether the workers are threads (``worker_method="thread"`` with workers)."""
        return self.worker_method == THREAD and self.num_workers > 0

    def _engine_state(self) -> dict[str, Any]:
        """torchdata's state (the same layout under threads: :mod:`.threaded_iterable`)."""
        return self.threaded.state_dict() if self.threads else self.engine.state_dict()

    @property
    def seed(self) -> int:
        """The seed now (:class:`~seekdata._loader.config.Keys`, shared with the loader)."""
        return self.keys.seed

    def iterate(self) -> Iterator[Any]:
        if self.cursor.begin():
            self.batch = 0
            self._forward_epoch()
        self.seeder.epoch = self.cursor.epoch
        self._generation += 1
        self._private = self._fresh_private()
        return self._stream(self._generation, self.place)

    def full_len(self) -> int:
        return len(self.engine)

    def assign_rank(self, num_replicas: int, rank: int) -> None:
        if (num_replicas, rank) != (1, 0):
            raise ValueError(
                f"StatefulDataLoader.assign_rank: an IterableDataset shards its stream itself "
                f"(each rank's is its own), so seekdata cannot shard it across {num_replicas} "
                f"processes; got an IterableDataset; shard it in the dataset (by rank), or use "
                f"a map-style dataset"
            )

    def set_option(self, name: str, value: Any) -> None:
        self.threaded.close()  # persistent thread workers of the old setting
        if name == "worker_method":
            self.worker_method = value
            return
        if name == "worker_init_fn":
            self.seeder.user_fn = self.threaded.user_fn = value
            return
        if name == "num_workers":
            self.num_workers = value
        setattr(self.engine, name, value)

    def _capture(self) -> tuple[Any, Any, Any]:
        saved = _globalrng.save(self.keys.reseed)
        _globalrng.restore(saved)  # saving may leave a generator moved; capturing must not
        return saved

    def _fresh_private(self) -> tuple[Any, Any, Any] | None:
        """num_workers=0: the dataset runs in this process. Its stream gets a private global-RNG
        state keyed like worker 0's, swapped in around every step (and around ``state_dict``,
        so a dataset that saves global RNG in its state saves its own), so the caller's RNG is
        untouched and a resume replays the same draws. Only for the generators
        ``reseed_global_rng`` names: the others the dataset shares with the caller."""
        if self.num_workers or not self.keys.reseed:
            return None
        saved = self._capture()
        self.seeder.seed_globals(0)
        private = self._capture()
        _globalrng.restore(saved)
        return private

    @contextmanager
    def _scope(self) -> Iterator[None]:
        if self._private is None:
            with _quiet():
                yield
            return
        saved = self._capture()
        _globalrng.restore(self._private)
        try:
            with _quiet():
                yield
        finally:
            self._private = self._capture()
            _globalrng.restore(saved)

    def _stream(self, generation: int, place: Callable[[Any], Any] | None) -> Iterator[Any]:
        end = object()
        epoch_seed = step_seed(self.seed, self.cursor.epoch) if self.step_rng else None
        rank = _dist.rank_or_zero()
        # device=: batches are pulled ahead; torchdata's state after each waits in `held` until
        # the batch is handed out (in_order=False: torchdata's state is not exact anyway)
        lookahead = self.lookahead
        held: collections.deque[dict[str, Any]] | None = (
            collections.deque() if lookahead is not None and self.engine.in_order else None
        )
        batches = self._pull(held)
        if lookahead is not None:
            batches = lookahead.wrap(batches)
        while True:
            if generation != self._generation:
                raise RuntimeError(
                    "StatefulDataLoader: this iterator was replaced by a later iter() or "
                    "load_state_dict(); call iter(loader) to continue from the loader's state"
                )
            batch = next(batches, end)
            if batch is end:
                self._held = None
                self.cursor.finish()
                return
            if held is not None:
                self._held = held.popleft()
            self.batch += 1
            if epoch_seed is not None:  # the caller's model-side RNG: a function of the batch
                set_step_rng(epoch_seed, self.batch - 1, rank=rank)
            yield batch if place is None else place(batch)

    def _pull(self, held: collections.deque[dict[str, Any]] | None) -> Iterator[Any]:
        """torchdata's batches, each pulled under the stream's RNG scope; with ``held``, a copy
        of torchdata's state after each batch goes there."""
        inner: Iterator[Any] | None = None
        end = object()
        while True:
            with self._scope():
                if inner is None:
                    if self.threads:
                        inner = self.threaded.iterate()
                    else:
                        with _workers.starting_workers():
                            self.seeder.exiting = _workers.exit_flag()
                            inner = iter(self.engine)
                    self._held = None  # a new torchdata iterator: its state is the live one
                batch = next(inner, end)
                if held is not None and batch is not end:
                    held.append(copy.deepcopy(self._engine_state()))
            if batch is end:
                return
            yield batch

    def _forward_epoch(self) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.cursor.epoch)

    def set_epoch(self, epoch: int) -> None:
        if self.cursor.set_epoch(epoch, "StatefulDataLoader.set_epoch", stacklevel=3):
            self.batch = 0
        self._forward_epoch()

    def skip(self, batches: int) -> None:
        raise ValueError(_CANNOT_SKIP.format(what="skip"))

    def seek_batch(self, batch: int) -> None:
        raise ValueError(_CANNOT_SKIP.format(what="skip_to"))

    def skip_steps(self, start: int, stop: int) -> None:
        raise ValueError(_CANNOT_SKIP.format(what="skip_steps"))

    def fields(self, seed: int | None = None) -> dict[str, Any]:
        return {
            _state.K_SAMPLE_SEED: self.seed if seed is None else seed,
            _state.K_BATCH_SIZE: self.config.batch_size or 1,
            _state.K_BATCH_DROP_LAST: self.config.drop_last,
        }

    def state_dict(self) -> dict[str, Any]:
        now = self.cursor.snapshot  # one value of the cursor (state_dict from another thread)
        if self._held is not None:  # device=: torchdata pulled ahead of what was handed out
            engine = copy.deepcopy(self._held)
        else:
            if self._private is None:  # the state of the stream iter() would start
                self._private = self._fresh_private()
            with self._scope():
                engine = self._engine_state()
        return {
            _state.K_VERSION: _state.VERSION,
            _state.K_KIND: "iterable",
            _state.K_EPOCH: now.epoch,
            _state.K_POSITION: int(_num_yielded(engine)),
            _state.K_UNIT: self.cursor.unit,
            _state.K_EXHAUSTED: now.exhausted,
            **self.fields(),
            _state.K_WORLD_SIZE: _dist.world_size_or_one(),
            _state.K_ENGINE: engine,
        }

    def load_state_dict(self, state: Any, strict: bool, grow: bool = False) -> None:
        """Validate the whole state (seekdata's fields, then torchdata's nested state against
        this loader's ``num_workers`` and world size), then restore it."""
        where = "StatefulDataLoader.load_state_dict"
        state = _state.upgrade(state)  # a state of an earlier format, as this release writes it
        if grow:
            raise ValueError(
                f"{where}: grow=True re-cuts a seekable sampler's epoch; an IterableDataset's "
                f"stream is its own; declare the growth in the dataset (e.g. a Mixture source: "
                f"Mixture.changed(..., grown=...))"
            )
        seed = seed_to_adopt(state, self.seed, explicit=self.keys.explicit, owns_sampler=False)
        expected = {_state.K_KIND: "iterable", **self.fields(seed)}
        _state.check_state(state, expected, where=where, strict=strict)
        _state.check_unit(state, self.cursor.unit, where)  # an edited state: even strict=False
        _reshape.check_iterable(state, self.num_workers, _dist.world_size_or_one(), where)
        # everything is valid: only now change the loader
        if seed != self.seed:
            self.keys.seed = self.seeder.seed = seed
            self.engine.generator = _streams.torch_generator(seed, _WORKER_TAG)
        self.cursor.restore(state[_state.K_EPOCH], 0, state[_state.K_EXHAUSTED])
        self.batch = state[_state.K_POSITION]
        self._generation += 1  # an iterator from before the load stops
        self._private = None
        self._held = None
        self._forward_epoch()
        with _quiet():
            self.engine.load_state_dict(state[_state.K_ENGINE])
        self.threaded.load_state_dict(state[_state.K_ENGINE])


def _num_yielded(engine_state: dict[str, Any]) -> int:
    if "_snapshot" in engine_state:
        return int(engine_state["_snapshot"].get("_snapshot_step", 0))
    return int(engine_state.get("_num_yielded", 0))
