"""Thread workers (``worker_method="thread"``): the same batches as process workers and as
``num_workers=0`` for every source, the same cursor (a checkpoint crosses methods both ways),
get_worker_info() per thread, the global-RNG refusal, errors with their traceback, and no
thread left behind. Exit paths as real processes are in test_exit_threads.py."""

from __future__ import annotations

import pathlib
import random
import threading
from typing import Any

import numpy as np
import pytest
import torch

import seekdata
from seekdata import transforms
from tests.helpers import remote_corpus as corpus
from tests.helpers.threads import (  # noqa: F401  # no_threads_left: an autouse fixture
    check_no_thread_left,
    no_threads_left,
    run_to,
    thread_workers,
)

SEED = 3


class Keyed(torch.utils.data.Dataset):
    """Each sample draws from its own stream (sample_rng) and records the worker that read it."""

    def __init__(self, n: int = 37) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        noise = int(seekdata.sample_rng().integers(1 << 30))
        return torch.tensor([i, noise])


class Image(torch.utils.data.Dataset):
    """An image pipeline of seekdata.transforms (crop, flip, jitter: all keyed by the sample)."""

    def __init__(self, n: int = 30) -> None:
        self.n = n
        self.pipe = transforms.Compose(
            [
                transforms.RandomResizedCrop(8),
                transforms.RandomHorizontalFlip(),
                transforms.ColorJitter(0.3, 0.3),
            ]
        )

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img = torch.arange(3 * 12 * 12, dtype=torch.float32).reshape(3, 12, 12) / 432 + i
        return self.pipe(img, seekdata.sample_rng()), i % 3


def _loader(ds: Any, method: str, workers: int, **kw: Any) -> seekdata.StatefulDataLoader:
    kw.setdefault("batch_size", 4)
    if "sampler" not in kw:
        kw.setdefault("shuffle", True)
    return seekdata.StatefulDataLoader(
        ds, seed=SEED, num_workers=workers, worker_method=method, **kw
    )


def _digests(loader: Any, epochs: int = 3) -> list[str]:
    """Every batch of ``epochs`` passes (``iter()`` after an epoch's end starts the next)."""
    return [corpus.digest(b) for _ in range(epochs) for b in loader]


METHODS = [("multiprocessing", 0), ("multiprocessing", 2), ("thread", 1), ("thread", 3)]


def _same_everywhere(make: Any, epochs: int = 3, methods: Any = METHODS) -> None:
    runs = {(m, w): _digests(make(m, w), epochs) for m, w in methods}
    reference = runs[methods[0]]
    assert len(reference) > 3
    for key, got in runs.items():
        assert got == reference, f"{key} differs from {methods[0]}"


# --- exactness, for every kind of source --------------------------------------------------------


def test_map_style_batches_are_the_same_under_threads_processes_and_no_workers() -> None:
    _same_everywhere(lambda m, w: _loader(Keyed(), m, w))


def test_a_transform_pipeline_with_a_batch_transform_is_the_same_under_threads() -> None:
    mix = transforms.MixUp(0.4, num_classes=3)
    _same_everywhere(lambda m, w: _loader(Image(), m, w, batch_transform=mix))


def test_a_batched_read_is_the_same_under_threads() -> None:
    class Rows(Keyed):
        def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
            noise = seekdata.sample_rng().integers(1 << 30, size=len(indices))
            return [torch.tensor([i, int(x)]) for i, x in zip(indices, noise, strict=True)]

    _same_everywhere(lambda m, w: _loader(Rows(), m, w))


def test_a_mixture_is_the_same_under_threads() -> None:
    def make(m: str, w: int) -> Any:
        mix = seekdata.Mixture({"a": Keyed(20), "b": Image(15)}, {"a": 0.3, "b": 0.7}, seed=2)
        return _loader(mix, m, w, collate_fn=list, shuffle=False)

    _same_everywhere(make)


def test_batch_size_none_is_the_same_under_threads() -> None:
    _same_everywhere(lambda m, w: _loader(Keyed(9), m, w, batch_size=None))


@pytest.mark.parametrize("kind", corpus.KINDS)  # tar shards, token windows, packing, Parquet
def test_file_backed_sources_are_the_same_under_threads(tmp_path: pathlib.Path, kind: str) -> None:
    corpus.write(kind, tmp_path)
    urls = corpus.pattern(kind, str(tmp_path))

    def make(m: str, w: int) -> Any:
        loader = corpus.make_loader(kind, corpus.dataset(kind, urls), num_workers=w)
        loader.worker_method = m
        return loader

    _same_everywhere(make, epochs=2)


def test_the_step_rng_the_caller_draws_after_each_batch_is_the_same_under_threads() -> None:
    """set_step_rng keys the caller's global RNG by each batch handed out (Dropout in the step):
    the same draws under threads, processes and no workers, over epochs."""

    def draws(method: str, workers: int) -> list[float]:
        loader = _loader(Keyed(), method, workers)
        return [torch.rand(1).item() for _ in range(2) for _ in loader]

    reference = draws("multiprocessing", 0)
    assert draws("thread", 2) == reference and draws("multiprocessing", 2) == reference


# --- the cursor crosses methods -----------------------------------------------------------------


@pytest.mark.parametrize("trial", range(4))
def test_a_checkpoint_crosses_methods_both_ways_at_random_steps(trial: int) -> None:
    """Threads -> processes and processes -> threads, at a random step and worker counts."""
    pick = random.Random(trial)
    steps = 3 * (len(Keyed()) // 4 + 1)  # three epochs
    reference = _digests(_loader(Keyed(), "multiprocessing", 0))
    for first, second in (("thread", "multiprocessing"), ("multiprocessing", "thread")):
        at = pick.randrange(1, steps - 1)
        w1, w2 = pick.choice([0, 1, 2]), pick.choice([1, 2, 3])
        w1 = w1 if first == "multiprocessing" else max(w1, 1)
        a = _loader(Keyed(), first, w1, persistent_workers=bool(w1) and pick.random() < 0.5)
        got, state = run_to(a, at)
        del a
        b = _loader(Keyed(), second, w2)
        b.load_state_dict(state)
        got += _digests(b, 4)
        got = got[: len(reference)]
        assert got == reference, (first, w1, second, w2, at)


# --- what a worker thread sees ------------------------------------------------------------------


def test_get_worker_info_in_a_thread_is_its_own_and_worker_init_fn_runs_once_each() -> None:
    seen: dict[int, Any] = {}
    inits: list[int] = []

    class Info(Keyed):
        def __getitem__(self, i: int) -> torch.Tensor:
            info = torch.utils.data.get_worker_info()
            seen[i] = info
            return torch.tensor([i, info.id])

    ds = Info(24)
    loader = _loader(ds, "thread", 3, worker_init_fn=inits.append, shuffle=False)
    batches = list(loader)
    assert torch.utils.data.get_worker_info() is None  # the main thread
    assert sorted(inits) == [0, 1, 2]
    infos = list(seen.values())
    assert {i.worker_method for i in infos} == {"thread"}
    assert {i.num_workers for i in infos} == {3}
    assert all(i.dataset is ds for i in infos)  # no copy: the one dataset
    # torch's round robin: batch k is read by worker k % num_workers
    assert [int(b[0, 1]) for b in batches] == [k % 3 for k in range(len(batches))]


# --- global RNG: refused, never served ----------------------------------------------------------


class GlobalDraw(torch.utils.data.Dataset):
    def __init__(self, which: str) -> None:
        self.which = which

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        {"torch": lambda: torch.rand(1), "numpy": np.random.rand, "random": random.random}[
            self.which
        ]()
        return i


@pytest.mark.parametrize("which", ["torch", "numpy", "random"])
def test_a_draw_from_a_global_generator_in_a_thread_raises(which: str) -> None:
    loader = _loader(GlobalDraw(which), "thread", 2)
    it = iter(loader)
    with pytest.raises(RuntimeError, match=rf"{which}'s global RNG") as info:
        next(it)
    message = str(info.value)
    assert "seekdata.sample_rng()" in message and "worker_method='multiprocessing'" in message
    del it


@pytest.mark.parametrize("which", ["torch", "numpy", "random"])
def test_reseed_global_rng_false_stops_the_check_and_names_only_are_watched(which: str) -> None:
    assert len(list(_loader(GlobalDraw(which), "thread", 2, reseed_global_rng=False))) == 4
    others = tuple(g for g in ("torch", "numpy", "random") if g != which)
    assert len(list(_loader(GlobalDraw(which), "thread", 2, reseed_global_rng=others))) == 4


def test_a_mixture_source_drawing_global_rng_is_refused_in_threads() -> None:
    """A Mixture reseeds global RNG per sample in a process; in a thread it must not (shared)."""
    mix = seekdata.Mixture([GlobalDraw("numpy"), Keyed(10)], [0.5, 0.5], seed=1)
    with pytest.raises(RuntimeError, match="numpy's global RNG"):
        list(_loader(mix, "thread", 2, collate_fn=list, shuffle=False))
    assert len(list(_loader(mix, "multiprocessing", 0, collate_fn=list, shuffle=False))) > 0


# --- errors -------------------------------------------------------------------------------------


class Fails(Keyed):
    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 5:
            raise KeyError(f"sample {i} is missing")
        return super().__getitem__(i)


def test_a_worker_error_is_raised_with_its_traceback_and_the_next_batch_follows() -> None:
    loader = _loader(Fails(12), "thread", 2, shuffle=False)
    it = iter(loader)
    next(it)
    with pytest.raises(KeyError, match="sample 5 is missing") as info:
        next(it)
    frames = [f.name for f in __import__("traceback").extract_tb(info.value.__traceback__)]
    assert "__getitem__" in frames  # the worker's frames, not only the loader's
    assert "in DataLoader worker thread 1" in getattr(info.value, "__notes__", [])
    assert int(next(it)[0, 0]) == 8  # counted as consumed, as torch does
    assert loader.state_dict()["step"] == 3
    del it


def test_a_worker_init_fn_error_is_raised() -> None:
    def init(worker_id: int) -> None:
        raise OSError("no such device")

    with pytest.raises(RuntimeError, match="worker_init_fn raised") as info:
        list(_loader(Keyed(), "thread", 2, worker_init_fn=init))
    assert isinstance(info.value.__cause__, OSError)


def test_timeout_bounds_the_wait_for_a_batch() -> None:
    release = threading.Event()

    class Slow(Keyed):
        def __getitem__(self, i: int) -> torch.Tensor:
            release.wait(30)
            return super().__getitem__(i)

    loader = _loader(Slow(8), "thread", 1, timeout=0.05)
    it = iter(loader)
    try:
        with pytest.raises(RuntimeError, match=r"timed out after 0\.05 seconds"):
            next(it)
    finally:
        release.set()
        del it


# --- threads end --------------------------------------------------------------------------------


@pytest.mark.parametrize("persistent", [False, True])
def test_no_thread_is_left_after_the_iterator_ends_or_is_dropped(persistent: bool) -> None:
    check_no_thread_left(
        _loader(Keyed(), "thread", 2, persistent_workers=persistent), persistent, 2
    )


# --- arguments ----------------------------------------------------------------------------------


def test_worker_method_is_checked() -> None:
    with pytest.raises(ValueError, match="worker_method must be one of"):
        _loader(Keyed(), "threads", 2)
    with pytest.raises(TypeError, match="worker_method must be a str"):
        _loader(Keyed(), None, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multiprocessing_context"):
        _loader(Keyed(), "thread", 2, multiprocessing_context="spawn")

    from torch.utils.data.datapipes.iter import IterableWrapper  # reseeded per process

    with pytest.raises(ValueError, match="DataPipe"):
        seekdata.StatefulDataLoader(IterableWrapper(range(4)), worker_method="thread")
    pipe = seekdata.StatefulDataLoader(IterableWrapper(range(4)))
    with pytest.raises(ValueError, match="DataPipe"):
        pipe.worker_method = "thread"
    assert pipe.worker_method == "multiprocessing"
    loader = _loader(Keyed(), "multiprocessing", 2)
    with pytest.raises(ValueError, match="worker_method must be one of"):
        loader.worker_method = "fork"
    assert loader.worker_method == "multiprocessing"
    loader.worker_method = "thread"  # read at the next iter(), as torch's num_workers
    assert _digests(loader, 1) == _digests(_loader(Keyed(), "multiprocessing", 0), 1)
