"""An IterableDataset under thread workers: the batches of process workers (each worker its own
part of the stream by ``get_worker_info()``, handed out in turn, a worker skipped once its part
ends) and of ``num_workers=0`` where the dataset splits the same way, torchdata's state in the
same layout, a checkpoint crossing methods both ways at random steps, the global-RNG refusal,
and no thread left behind."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
import torch

import seekdata
from tests.helpers import remote_corpus as corpus
from tests.helpers.threads import (  # noqa: F401  # no_threads_left: an autouse fixture
    check_no_thread_left,
    no_threads_left,
    run_to,
    thread_workers,
)

SEED = 5


def _part() -> tuple[int, int]:
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class Split(torch.utils.data.IterableDataset):
    """Splits itself by worker (uneven parts: workers end at different batches); each item
    draws from a generator keyed by the item, so the values are exact anywhere."""

    def __init__(self, n: int = 23) -> None:
        self.n = n

    def __iter__(self) -> Any:
        w, k = _part()
        for i in range(w, self.n, k):
            noise = int(seekdata.numpy_generator(SEED, i).integers(1 << 30))
            yield torch.tensor([i, noise])


class StatefulOnDataset(Split):
    """Its position lives on the dataset object (torchdata's Stateful dataset): each thread
    needs its own copy, as each process has one."""

    def __init__(self, n: int = 23) -> None:
        super().__init__(n)
        self.pos = 0

    def __iter__(self) -> Any:
        w, k = _part()
        while w + k * self.pos < self.n:
            i = w + k * self.pos
            self.pos += 1
            yield torch.tensor([i, i * i])

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pos = state["pos"]


class _Iter:
    def __init__(self, n: int, w: int, k: int) -> None:
        self.n, self.w, self.k, self.pos = n, w, k, 0

    def __iter__(self) -> _Iter:
        return self

    def __next__(self) -> torch.Tensor:
        i = self.w + self.k * self.pos
        if i >= self.n:
            raise StopIteration
        self.pos += 1
        return torch.tensor([i, -i])

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pos = state["pos"]


class StatefulIterator(torch.utils.data.IterableDataset):
    """Its state lives on the iterator it returns: one dataset serves every thread."""

    def __init__(self, n: int = 23) -> None:
        self.n = n

    def __iter__(self) -> _Iter:
        return _Iter(self.n, *_part())


DATASETS = [Split, StatefulOnDataset, StatefulIterator]


def _loader(ds: Any, method: str, workers: int, **kw: Any) -> seekdata.StatefulDataLoader:
    kw.setdefault("batch_size", 3)
    return seekdata.StatefulDataLoader(
        ds, seed=SEED, num_workers=workers, worker_method=method, **kw
    )


def _digests(loader: Any, epochs: int = 3) -> list[str]:
    return [corpus.digest(b) for _ in range(epochs) for b in loader]


@pytest.mark.parametrize("make", DATASETS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("workers", [2, 3])
def test_threads_give_the_process_workers_batches(make: Any, workers: int) -> None:
    """Several epochs, persistent workers or not (persistent ones keep a dataset's own state
    between epochs, processes and threads alike): the same batches, in the same order."""
    for persistent in (False, True):
        kw = {"persistent_workers": persistent}
        processes = _digests(_loader(make(), "multiprocessing", workers, **kw))
        threads = _digests(_loader(make(), "thread", workers, **kw))
        assert len(processes) > 6
        assert threads == processes, (workers, persistent)


def test_one_thread_worker_gives_the_no_worker_batches() -> None:
    """With one worker the dataset's part is the whole stream, as with num_workers=0."""
    assert _digests(_loader(Split(), "thread", 1)) == _digests(_loader(Split(), "thread", 0))


def test_batch_size_none_and_drop_last_are_the_processthread_workers() -> None:
    for kw in ({"batch_size": None}, {"drop_last": True}):
        processes = _digests(_loader(Split(), "multiprocessing", 2, **kw), 2)
        assert _digests(_loader(Split(), "thread", 2, **kw), 2) == processes, kw


def test_the_step_rng_the_caller_draws_after_each_batch_is_the_same_under_threads() -> None:
    def draws(method: str) -> list[float]:
        return [torch.rand(1).item() for _ in range(2) for _ in _loader(Split(), method, 2)]

    assert draws("thread") == draws("multiprocessing")


@pytest.mark.parametrize("make", DATASETS, ids=lambda c: c.__name__)
def test_the_state_is_torchdatas_state_of_process_workers(make: Any) -> None:
    """Step by step within an epoch, the whole state (torchdata's nested one included) is the
    process workers' state."""
    states: dict[str, list[Any]] = {}
    for method in ("multiprocessing", "thread"):
        loader = _loader(make(), method, 2)
        got = [loader.state_dict()]
        it = iter(loader)
        for _ in range(5):  # before either worker's part ends
            next(it)
            got.append(loader.state_dict())
        states[method] = got
        del it
    assert states["thread"] == states["multiprocessing"]


@pytest.mark.parametrize("trial", range(3))
@pytest.mark.parametrize("make", DATASETS, ids=lambda c: c.__name__)
def test_a_checkpoint_crosses_methods_both_ways_at_random_steps(make: Any, trial: int) -> None:
    pick = random.Random(trial)
    workers = pick.choice([1, 2, 3])
    # persistent workers keep a dataset's own state into the next epoch (processes too)
    persist = make is not StatefulOnDataset
    reference = _digests(_loader(make(), "multiprocessing", workers))
    steps = len(reference)
    for first, second in (("thread", "multiprocessing"), ("multiprocessing", "thread")):
        at = pick.randrange(1, steps - 1)
        a = _loader(make(), first, workers, persistent_workers=persist and pick.random() < 0.5)
        got, state = run_to(a, at)
        del a
        b = _loader(make(), second, workers, persistent_workers=persist and pick.random() < 0.5)
        b.load_state_dict(state)
        got += _digests(b, 4)
        assert got[:steps] == reference, (first, second, workers, at)


def test_a_state_taken_before_iterating_resumes_from_the_start() -> None:
    loader = _loader(StatefulIterator(), "thread", 2)
    state = loader.state_dict()  # starts the workers to read their state, as torchdata does
    assert _digests(loader, 1) == _digests(_loader(StatefulIterator(), "multiprocessing", 2), 1)
    again = _loader(StatefulIterator(), "thread", 2)
    again.load_state_dict(state)
    assert _digests(again, 1) == _digests(loader, 1)


def test_get_worker_info_is_the_threads_own_and_a_stateful_dataset_is_copied() -> None:
    seen: dict[int, tuple[int, int, Any]] = {}

    class Record(StatefulOnDataset):
        def __iter__(self) -> Any:
            info = torch.utils.data.get_worker_info()
            seen[info.id] = (info.num_workers, threading.get_ident(), info.dataset)
            return super().__iter__()

    dataset = Record(12)
    list(_loader(dataset, "thread", 2))
    assert sorted(seen) == [0, 1]
    assert {n for n, _, _ in seen.values()} == {2}
    assert len({ident for _, ident, _ in seen.values()}) == 2
    copies = [ds for _, _, ds in seen.values()]
    assert all(ds is not dataset for ds in copies) and copies[0] is not copies[1]
    assert dataset.pos == 0  # the loader's dataset is not moved by the threads


@pytest.mark.parametrize("which", ["torch", "numpy", "random"])
def test_a_draw_from_a_global_generator_in_a_thread_raises(which: str) -> None:
    import numpy as np

    class Global(Split):
        def __iter__(self) -> Any:
            for x in super().__iter__():
                draws = {"torch": lambda: torch.rand(1), "numpy": np.random.rand}
                draws.get(which, random.random)()
                yield x

    with pytest.raises(RuntimeError, match=rf"{which}'s global RNG.*sample_rng"):
        list(_loader(Global(), "thread", 2))


@pytest.mark.parametrize("persistent", [False, True])
def test_no_thread_is_left_after_the_iterator_ends_or_is_dropped(persistent: bool) -> None:
    check_no_thread_left(
        _loader(Split(), "thread", 2, persistent_workers=persistent), persistent, 2
    )


def test_a_datapipe_is_refused_under_threads() -> None:
    from torch.utils.data.datapipes.iter import IterableWrapper

    with pytest.raises(ValueError, match=r"DataPipe.*worker_method='multiprocessing'"):
        _loader(IterableWrapper(range(4)), "thread", 2)
