"""IterableDataset support: torchdata's StatefulDataLoader as the engine, counters for RNG.

An iterable dataset decides its own order, so seekdata cannot seek it. What this adds over
torchdata's loader: each worker's torch/numpy/``random`` global RNG is seeded from the counters
(seed, epoch, rank, worker) — never from the global RNG of the main process — and the state
is wrapped in seekdata's validated schema. What is exact and what is not is listed in
docs/exact-resume.md ("Iterable datasets").
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from seekdata import _dist, preemption, rng
from seekdata import state as S

_WORKER_TAG = 0x574B5252  # "WKRR": worker RNG keys (seed, WORKER, epoch, rank, worker)
K_ENGINE = "engine"  # torchdata's own state, nested (JSON-native for iterable datasets)


@contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        # torchdata 0.11 calls a deprecated torch API on every iter(); not the user's concern
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
        yield


class WorkerSeeder:
    """``worker_init_fn``: seeds a worker's global RNG from (seed, epoch, rank, worker)."""

    def __init__(self, seed: int, rank: int, user_fn: Callable[[int], None] | None) -> None:
        self.seed, self.rank, self.user_fn, self.epoch = seed, rank, user_fn, 0

    def seed_globals(self, worker: int) -> None:
        words = rng.derive_key(self.seed, _WORKER_TAG, self.epoch, self.rank, worker, words=3)
        torch.default_generator.manual_seed(words[0])
        np.random.seed(words[1] >> 32)
        random.seed(words[2])

    def __call__(self, worker_id: int) -> None:
        preemption.worker_signals()  # outlive a preemption notice, as WorkerInit does
        self.seed_globals(worker_id)
        if self.user_fn is not None:
            self.user_fn(worker_id)


class IterableEngine:
    """The iterable-dataset half of :class:`seekdata.StatefulDataLoader`."""

    def __init__(self, dataset: Any, seed: int, kwargs: dict[str, Any]) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

        self.seed = seed
        self.dataset = dataset
        self.batch_size = kwargs.get("batch_size")
        self.drop_last = bool(kwargs.get("drop_last", False))
        self.num_workers = int(kwargs.get("num_workers", 0))
        self.seeder = WorkerSeeder(seed, _dist.rank_or_zero(), kwargs.pop("worker_init_fn", None))
        self.epoch, self.exhausted, self._explicit = 0, False, False
        with _quiet():
            self.engine = TorchdataLoader(
                dataset,
                worker_init_fn=self.seeder,
                generator=rng.torch_generator(seed, _WORKER_TAG),
                **kwargs,
            )

    def __iter__(self) -> Iterator[Any]:
        if self.exhausted and not self._explicit:
            self.epoch += 1
            self._forward_epoch()
        self._explicit = self.exhausted = False
        self.seeder.epoch = self.epoch
        # num_workers=0: the dataset runs in this process. Give its stream a private global-RNG
        # state keyed like worker 0's, swapped in around every step, so the caller's RNG is
        # untouched and a resume (which fast-forwards the dataset) replays the same draws.
        private: tuple[Any, Any, Any] | None = None
        saved: tuple[Any, Any, Any] | None = None
        if self.num_workers == 0:
            saved = rng.capture_globals()
            self.seeder.seed_globals(0)
            private = rng.capture_globals()
            rng.restore_globals(saved)
        inner: Iterator[Any] | None = None
        while True:
            saved = rng.capture_globals() if private is not None else None
            try:
                if private is not None:
                    rng.restore_globals(private)
                with _quiet():
                    if inner is None:
                        inner = iter(self.engine)
                    batch = next(inner)
            except StopIteration:
                self.exhausted = True
                return
            finally:
                if saved is not None:
                    private = rng.capture_globals()
                    rng.restore_globals(saved)
            yield batch

    def _forward_epoch(self) -> None:
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.epoch)

    def set_epoch(self, epoch: int) -> None:
        epoch = rng.check_counter(epoch, "epoch", "StatefulDataLoader.set_epoch")
        if epoch != self.epoch:
            self.epoch, self.exhausted = epoch, False
        self._explicit = True
        self._forward_epoch()

    def fields(self) -> dict[str, Any]:
        return {
            S.K_SAMPLE_SEED: self.seed,
            S.K_BATCH_SIZE: self.batch_size or 1,
            S.K_BATCH_DROP_LAST: self.drop_last,
        }

    def state_dict(self) -> dict[str, Any]:
        engine = self.engine.state_dict()
        return {
            S.K_VERSION: S.VERSION,
            S.K_KIND: "iterable",
            S.K_EPOCH: self.epoch,
            S.K_POSITION: int(_num_yielded(engine)),
            S.K_EXHAUSTED: self.exhausted,
            **self.fields(),
            S.K_WORLD_SIZE: _dist.world_size_or_one(),
            K_ENGINE: engine,
        }

    def load_state_dict(self, state: Any, strict: bool) -> None:
        where = "StatefulDataLoader.load_state_dict"
        expected = {S.K_KIND: "iterable", **self.fields()}
        for message in S.check_state(state, expected, where=where, strict=strict):
            warnings.warn(message + " (strict=False: continuing)", stacklevel=3)
        if K_ENGINE not in state:
            raise S.StateMismatchError(
                f"{where}: state is missing {K_ENGINE!r}; pass an unmodified state_dict()"
            )
        self.epoch, self.exhausted, self._explicit = state[S.K_EPOCH], state[S.K_EXHAUSTED], False
        self._forward_epoch()
        with _quiet():
            try:
                self.engine.load_state_dict(state[K_ENGINE])
            except (AssertionError, KeyError, ValueError) as err:
                raise S.StateMismatchError(
                    f"{where}: torchdata could not restore the iterable dataset's state ({err!r}); "
                    f"for IterableDatasets keep num_workers as in the checkpoint "
                    f"({_engine_workers(state[K_ENGINE])})"
                ) from err


def _num_yielded(engine_state: dict[str, Any]) -> int:
    if "_snapshot" in engine_state:
        return int(engine_state["_snapshot"].get("_snapshot_step", 0))
    return int(engine_state.get("_num_yielded", 0))


def _engine_workers(engine_state: dict[str, Any]) -> int:
    snap = engine_state.get("_snapshot", {}).get("_main_snapshot", {})
    return int(snap.get("_num_workers", 0))
