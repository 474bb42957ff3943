"""What a torch DataLoader user passes or reads behaves as torch's (issue 12, item 1).

Most tests are differential: the same call on ``torch.utils.data.DataLoader`` and on
``seekdata.StatefulDataLoader`` must succeed on both or raise the same exception type.
"""

from __future__ import annotations

import multiprocessing
import typing
from typing import Any

import pytest
import torch

import seekdata
from tests.helpers.datasets import GlobalRNGAug, batches_equal

Loader = seekdata.StatefulDataLoader


class Squares(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i * i


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(6))


def _sampler() -> torch.utils.data.Sampler[int]:
    return torch.utils.data.SequentialSampler(range(8))


def _batch_sampler() -> torch.utils.data.BatchSampler:
    return torch.utils.data.BatchSampler(_sampler(), 2, False)


def _context() -> Any:
    return multiprocessing.get_context("fork")


# (dataset kind, DataLoader kwargs): every combination torch's DataLoader.__init__ rejects
REJECTED = [
    ("map", {"num_workers": -1}),
    ("map", {"timeout": -1}),
    ("map", {"prefetch_factor": 2}),
    ("map", {"num_workers": 1, "prefetch_factor": -1}),
    ("map", {"persistent_workers": True}),
    ("map", {"sampler": _sampler, "shuffle": True}),
    ("map", {"batch_sampler": _batch_sampler, "batch_size": 2}),
    ("map", {"batch_sampler": _batch_sampler, "shuffle": True}),
    ("map", {"batch_sampler": _batch_sampler, "sampler": _sampler}),
    ("map", {"batch_sampler": _batch_sampler, "drop_last": True}),
    ("map", {"batch_size": None, "drop_last": True}),
    ("map", {"multiprocessing_context": "spawn"}),  # needs num_workers > 0
    ("map", {"num_workers": 1, "multiprocessing_context": "no-such-method"}),
    ("map", {"num_workers": 1, "multiprocessing_context": 3}),
    ("iterable", {"shuffle": True}),
    ("iterable", {"sampler": _sampler}),
    ("iterable", {"batch_sampler": _batch_sampler}),
]

ACCEPTED = [
    ("map", {"sampler": _sampler, "shuffle": False}),
    ("map", {"batch_sampler": _batch_sampler}),
    ("map", {"batch_sampler": _batch_sampler, "batch_size": 1, "shuffle": False}),
    ("map", {"batch_size": None}),
    ("map", {"num_workers": 1, "prefetch_factor": 0}),
    ("map", {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 4}),
    ("map", {"num_workers": 1, "multiprocessing_context": _context}),
    ("iterable", {"shuffle": False}),
    ("iterable", {"batch_size": None}),
]


def _build(cls: Any, kind: str, kwargs: dict[str, Any]) -> Any:
    kw = {k: v() if callable(v) else v for k, v in kwargs.items()}
    return cls(Squares(8) if kind == "map" else Stream(), **kw)


def _outcome(cls: Any, kind: str, kwargs: dict[str, Any]) -> type | None:
    try:
        _build(cls, kind, kwargs)
    except Exception as e:  # the exception's type is what is compared
        return type(e)
    return None


@pytest.mark.parametrize(("kind", "kwargs"), REJECTED)
def test_rejects_what_torch_rejects(kind: str, kwargs: dict[str, Any]) -> None:
    expected = _outcome(torch.utils.data.DataLoader, kind, kwargs)
    assert expected is not None, "the case must be one torch rejects"
    assert _outcome(Loader, kind, kwargs) is expected


@pytest.mark.parametrize(("kind", "kwargs"), ACCEPTED)
def test_accepts_what_torch_accepts(kind: str, kwargs: dict[str, Any]) -> None:
    assert _outcome(torch.utils.data.DataLoader, kind, kwargs) is None
    assert _outcome(Loader, kind, kwargs) is None


def test_reads_what_torch_sets() -> None:
    """torch normalises a few arguments; the attributes read the same."""
    for kind, kwargs in [
        ("map", {"batch_sampler": _batch_sampler}),
        ("map", {"num_workers": 2}),
        ("map", {"num_workers": 2, "multiprocessing_context": "spawn"}),
        ("map", {"batch_size": None}),
    ]:
        ours, theirs = (
            _build(Loader, kind, kwargs),
            _build(torch.utils.data.DataLoader, kind, kwargs),
        )
        for name in ("batch_size", "drop_last", "prefetch_factor", "num_workers", "timeout"):
            assert getattr(ours, name) == getattr(theirs, name), (name, kwargs)
        assert type(ours.multiprocessing_context) is type(theirs.multiprocessing_context)


@pytest.mark.parametrize(
    "attr", ["batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"]
)
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_frozen_attributes_refuse_assignment(attr: str, kind: str) -> None:
    for cls in (torch.utils.data.DataLoader, Loader):
        loader = _build(cls, kind, {})
        before = getattr(loader, attr)
        with pytest.raises(ValueError, match=f"{attr} attribute should not be set"):
            setattr(loader, attr, 4)
        assert getattr(loader, attr) is before


class WorkerTag(torch.utils.data.Dataset):
    """Which worker loaded each sample (-1: the main process)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        info = torch.utils.data.get_worker_info()
        return -1 if info is None else info.id


def _tagged(batches: list[Any]) -> set[int]:
    return {int(x) for b in batches for x in b}


def _double(batch: list[Any]) -> torch.Tensor:
    return torch.tensor(batch) * 2


def test_assigned_options_take_effect_at_the_next_iter() -> None:
    """torch reads num_workers, collate_fn, ... at iter(): an assignment is not ignored."""
    loader = Loader(WorkerTag(), batch_size=2)
    assert _tagged(list(loader)) == {-1}
    loader.num_workers, loader.prefetch_factor = 2, 2
    assert _tagged(list(loader)) == {0, 1}
    loader.num_workers, loader.prefetch_factor = 0, None
    loader.collate_fn = _double
    assert [b.tolist() for b in loader] == [[-2, -2], [-2, -2]]
    stream = Loader(Stream(), batch_size=3)
    stream.collate_fn = _double
    assert [b.tolist() for b in stream] == [[0, 2, 4], [6, 8, 10]]


def test_multiprocessing_context_setter_is_torchs() -> None:
    loader = Loader(Squares(8), num_workers=1)
    loader.multiprocessing_context = "spawn"
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    with pytest.raises(ValueError, match="start method"):
        loader.multiprocessing_context = "no-such-method"


@pytest.mark.parametrize("method", multiprocessing.get_all_start_methods())
def test_every_start_method_is_accepted(method: str) -> None:
    loader = Loader(Squares(8), batch_size=4, num_workers=1, multiprocessing_context=method)
    assert loader.multiprocessing_context.get_start_method() == method
    assert loader._engine.loader.multiprocessing_context is loader.multiprocessing_context


def test_spawn_is_exact_and_resumes_on_another_worker_count() -> None:
    """Spawned workers unpickle the keyed dataset, collate and worker init; the stream is the
    one of num_workers=0, and a state taken under spawn resumes on another worker count."""

    def make(num_workers: int, context: str | None = None) -> seekdata.StatefulDataLoader:
        return Loader(
            GlobalRNGAug(12), batch_size=3, shuffle=True, seed=4, num_workers=num_workers,
            multiprocessing_context=context,
        )  # fmt: skip

    reference = list(make(0))
    spawned = make(2, "spawn")
    it = iter(spawned)
    head = [next(it) for _ in range(2)]
    state = spawned.state_dict()
    del it
    resumed = make(1, "spawn")
    resumed.load_state_dict(state)
    assert batches_equal(reference, head + list(resumed))


class Bulk(torch.utils.data.Dataset):
    """torch's bulk-loading pattern: __getitem__ takes a list of indices."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, indices: list[int]) -> torch.Tensor:
        return torch.tensor(indices, dtype=torch.float64) + torch.rand(len(indices))


class Chunks(torch.utils.data.Sampler[list[int]]):
    def __iter__(self) -> Any:
        return iter([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])

    def __len__(self) -> int:
        return 3


def test_bulk_loading_sampler_with_batch_size_none() -> None:
    def make(num_workers: int = 0) -> seekdata.StatefulDataLoader:
        return Loader(Bulk(), batch_size=None, sampler=Chunks(), num_workers=num_workers)

    torch.manual_seed(0)
    ours = list(Loader(Bulk(), batch_size=None, sampler=Chunks(), step_rng=False))
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))  # the caller's global RNG is left as it was
    theirs = list(torch.utils.data.DataLoader(Bulk(), batch_size=None, sampler=Chunks()))
    assert [b.floor().tolist() for b in ours] == [b.floor().tolist() for b in theirs]
    assert all(torch.equal(a, b) for a, b in zip(ours, list(make(2)), strict=True))
    interrupted = make()
    it = iter(interrupted)
    next(it)
    state = interrupted.state_dict()
    del it
    resumed = make(1)
    resumed.load_state_dict(state)
    with pytest.warns(UserWarning, match="cannot seek"):  # a plain sampler: indices replayed
        rest = list(resumed)
    assert all(torch.equal(a, b) for a, b in zip(ours[1:], rest, strict=True))


class Growing(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.n = 6

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


@pytest.mark.parametrize("drop_last", [False, True])
def test_len_follows_the_dataset(drop_last: bool) -> None:
    data = Growing()
    ours = Loader(data, batch_size=4, drop_last=drop_last)
    theirs = torch.utils.data.DataLoader(data, batch_size=4, drop_last=drop_last)
    assert len(ours) == len(theirs) == (1 if drop_last else 2)
    data.n = 9
    assert len(ours) == len(theirs) == (2 if drop_last else 3)
    flat = [int(i) for b in ours for i in b]
    assert flat == [int(i) for b in theirs for i in b] == list(range(8 if drop_last else 9))


def test_len_change_in_the_middle_of_an_epoch_is_refused() -> None:
    data = Growing()
    loader = Loader(data, batch_size=2)
    it = iter(loader)
    next(it)
    del it
    data.n = 8
    assert len(loader) == 4
    with pytest.raises(ValueError, match="middle of epoch 0"):
        iter(loader)
    loader.set_epoch(1)
    assert [int(i) for b in loader for i in b] == list(range(8))


def test_generic_subscription() -> None:
    alias = Loader[int]
    assert typing.get_origin(alias) is Loader
    assert typing.get_args(alias) == (int,)
    assert isinstance(Loader(Squares(4)), torch.utils.data.DataLoader)


class Configured(torch.utils.data.Dataset):
    """Configured per worker from worker_init_fn through get_worker_info().dataset."""

    value = -1

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        return self.value


def _configure(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    assert info is not None and isinstance(info.dataset, Configured)
    info.dataset.value = 100 + worker_id


def test_worker_info_dataset_is_the_users_dataset() -> None:
    """torch hands worker_init_fn the worker's copy of *the user's* dataset (not a wrapper)."""
    loader = Loader(Configured(), batch_size=2, num_workers=2, worker_init_fn=_configure)
    assert sorted(int(x) for b in loader for x in b) == [100, 100, 101, 101]


def test_iterator_exposes_torchs_iterator_attributes() -> None:
    loader = Loader(Squares(8), batch_size=2, num_workers=2)
    it = iter(loader)
    assert len(it._workers) == 2  # tests and tools reach for the workers, as with torch
    next(it)
    with pytest.raises(AttributeError):
        _ = it.no_such_attribute
    del it


@pytest.mark.parametrize(
    ("kind", "kwargs", "torch_says"),
    [
        ("map", {"num_workers": -1}, "num_workers option should be non-negative"),
        ("map", {"timeout": -1}, "timeout option should be non-negative"),
        ("map", {"batch_size": None, "drop_last": True}, "batch_size=None option disables"),
        ("map", {"sampler": _sampler, "shuffle": True}, "sampler option is mutually exclusive"),
        ("map", {"batch_sampler": _batch_sampler, "batch_size": 3}, "batch_sampler option is"),
        ("iterable", {"shuffle": True}, "IterableDataset: expected unspecified shuffle"),
        ("iterable", {"sampler": _sampler}, "IterableDataset: expected unspecified sampler"),
    ],
)
def test_messages_start_with_torchs(kind: str, kwargs: dict[str, Any], torch_says: str) -> None:
    """Users search for torch's wording: each message keeps it, then says what was given."""
    for cls in (torch.utils.data.DataLoader, Loader):
        with pytest.raises(ValueError, match=torch_says):
            _build(cls, kind, kwargs)


def test_shuffle_reaches_an_iterdatapipe() -> None:
    """torch accepts shuffle= with an IterDataPipe and applies it to the pipe's shufflers."""
    pipe = torch.utils.data.datapipes.iter.IterableWrapper(range(20)).shuffle()
    unshuffled = Loader(pipe, batch_size=None, shuffle=False)
    assert [int(x) for x in unshuffled] == list(range(20))
    shuffled = [int(x) for x in Loader(pipe, batch_size=None, shuffle=True)]
    assert sorted(shuffled) == list(range(20)) and shuffled != list(range(20))


class ShardedNoise(torch.utils.data.IterableDataset):
    """Each worker takes every num_workers-th item and adds global-RNG noise."""

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(worker, 8, workers):
            yield torch.tensor([float(i)]) + torch.rand(1)


def test_spawn_iterable_dataset_matches_fork() -> None:
    """The iterable path under spawn: workers unpickle the seeder, and their global RNG is
    keyed by counters, not by the start method."""
    runs = [
        [b.tolist() for b in Loader(ShardedNoise(), batch_size=2, num_workers=2, seed=4, **kw)]
        for kw in ({"multiprocessing_context": "spawn"}, {"multiprocessing_context": "fork"})
    ]
    assert runs[0] == runs[1] and len(runs[0]) == 4


class Keyed(torch.utils.data.Dataset):
    """A dict-like dataset indexed by string keys."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, key: str) -> int:
        return {"a": 1, "b": 2}[key]


def test_non_integer_keys() -> None:
    """Without batching, whatever the sampler yields reaches the dataset, as in torch; with
    batching, keys must be integers (they key each sample's randomness) and the error says so."""
    assert list(Loader(Keyed(), batch_size=None, sampler=["a", "b"])) == [1, 2]
    with pytest.raises(TypeError, match="must yield integer indices"):
        list(Loader(Keyed(), batch_size=2, sampler=["a", "b"]))
