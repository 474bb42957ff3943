"""Wrappers carry the source protocol: every seekdata wrapper of a dataset answers every member
of :mod:`seekdata._core.source` for the source it wraps, so a resume over other data is refused
through the wrapper exactly as it is without it."""

from __future__ import annotations

import inspect
import json
import pathlib
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

import seekdata
from seekdata._core import source as _source
from seekdata.transforms import TransformedDataset
from tests.helpers.mixtures import Source


def _identity(sample: Any, rng: Any) -> Any:
    return sample


#: Every seekdata class that wraps a dataset, as a function of the dataset. A new wrapper goes
#: here (and forwards the protocol: subclass seekdata._core.source.WrapsSource).
WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "TransformedDataset": lambda ds: TransformedDataset(ds, _identity),
}


class Declares(torch.utils.data.Dataset):
    """A source that declares every member of the protocol, each with a value of its own."""

    stream_signature = "Declares(n=6, sig)"
    append_stable = False
    grow_instead = "rebuild it"
    shard_sizes = (2, 4)
    shuffles_itself = True
    reseeds_global_rng_itself = True
    reads_batches = True

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> Any:
        return (index,)

    def signature_of_first(self, n: int) -> str:
        return f"first {n}"

    def accepts_signature(self, signature: str, n: int) -> bool:
        return signature == f"old first {n}"

    def shard_sizes_of_first(self, n: int) -> tuple[int, ...]:
        return (2, n - 2)

    def stream_records(self, epoch: int, position: int, always: bool = False) -> dict[str, Any]:
        return {"records": [epoch, position, always]}

    def check_records(self, state: Any, where: str, strict: bool) -> None:
        if state.get("records") is None:  # accepts its own records only
            raise seekdata.StateMismatchError(f"{where}: no records")

    def source_signatures(self) -> list[list[Any]]:
        return [[0, 6, "Declares(n=6, sig)"]]

    def source_with_id(self, source_id: int) -> tuple[str, Any] | None:
        return ("only", self) if source_id == 0 else None

    def prefetch(self, indices: list[int]) -> None:
        self.prefetched = list(indices)


class Plain(torch.utils.data.Dataset):
    """A map-style dataset that declares nothing."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> Any:
        return (index,)


#: How each member is compared: what to call a callable member with.
CALLS: dict[str, tuple[Any, ...]] = {
    "signature_of_first": (3,),
    "accepts_signature": ("old first 3", 3),
    "shard_sizes_of_first": (5,),
    "stream_records": (2, 7, True),
    "check_records": ({"records": [2, 7, True]}, "here", True),
    "source_signatures": (),
    "source_with_id": (0,),
    "prefetch": ([1, 2],),
}


def _documented_members() -> list[str]:
    """The members SeekableSource's docstring documents (each a line ````name...````)."""
    doc = inspect.getdoc(_source.SeekableSource) or ""
    return re.findall(r"^``([a-z_]+)[:( ]", doc, flags=re.MULTILINE)


def _seen(dataset: Any, name: str) -> Any:
    value = _source.declared(dataset, name)
    if value is _source.ABSENT:
        return "<absent>"
    if callable(value):
        out = value(*CALLS[name])
        return (out[0], type(out[1]).__name__) if name == "source_with_id" else out
    return value


def test_the_protocol_members_are_listed_once() -> None:
    """``MEMBERS`` is what the protocol documents, and each accessor reads one of them through
    ``declared`` (never a getattr of its own), so a new member shows up here and below."""
    assert list(_source.MEMBERS) == _documented_members()
    read: set[str] = set()
    for name in _source.__all__:
        accessor = getattr(_source, name)
        if not inspect.isfunction(accessor) or name == "declared":
            continue
        body = inspect.getsource(accessor)
        assert "getattr(" not in body, name
        names = re.findall(r'declared\(dataset, "([a-z_]+)"\)', body)
        assert len(names) == 1 and names[0] in _source.MEMBERS, (name, names)
        read.add(names[0])
    assert read == set(_source.MEMBERS)


@pytest.mark.parametrize("wrap", list(WRAPPERS.values()), ids=list(WRAPPERS))
@pytest.mark.parametrize("member", _source.MEMBERS)
def test_every_wrapper_forwards_every_member(wrap: Callable[[Any], Any], member: str) -> None:
    """Through each wrapper, each member is what the wrapped dataset declares, and absent
    where it declares nothing (the accessors then give their defaults)."""
    assert member in CALLS or not callable(getattr(Declares, member))
    assert _seen(wrap(Declares()), member) == _seen(Declares(), member) != "<absent>"
    assert _seen(wrap(Plain()), member) == "<absent>"
    # and nested: a wrapper of a wrapper
    assert _seen(wrap(wrap(Declares())), member) == _seen(Declares(), member)


@pytest.mark.parametrize("wrap", list(WRAPPERS.values()), ids=list(WRAPPERS))
def test_every_accessor_answers_through_every_wrapper(wrap: Callable[[Any], Any]) -> None:
    """The loader's view: each public accessor gives the same answer through the wrapper."""
    for source in (Declares(), Plain()):
        wrapped = wrap(source)
        for name in _source.__all__:
            accessor = getattr(_source, name)
            if not inspect.isfunction(accessor) or name == "declared":
                continue
            args = {
                "stream_records": (2, 7, True),
                "check_records": ({"records": [2, 7, True]}, "here", True),
                "source_with_id": (0,),
                "accepts_signature": ("old first 3", 3),
            }.get(name, ())
            mine, theirs = accessor(wrapped, *args), accessor(source, *args)
            if callable(theirs):
                mine, theirs = mine(*CALLS[name]), theirs(*CALLS[name])
            if name == "source_with_id" and theirs is not None:
                mine, theirs = mine[0], theirs[0]
            assert mine == theirs, (name, type(source).__name__)


def _shards(tmp_path: pathlib.Path) -> list[str]:
    from tests.helpers.shards import write_shards

    write_shards(tmp_path, n=40, per_shard=10)
    return sorted(str(p) for p in tmp_path.glob("shard-*.tar"))


@pytest.mark.parametrize("wrap", list(WRAPPERS.values()), ids=list(WRAPPERS))
def test_a_resume_over_shards_in_another_order_is_refused_through_the_wrapper(
    tmp_path: pathlib.Path, wrap: Callable[[Any], Any]
) -> None:
    """The issue's case: a checkpoint saved over shards in one order, resumed over the same
    shards listed in another (equal sizes: the length and shard sizes agree), through the
    wrapper the augmentation docs recommend. Without the wrapper it is refused; so it must be
    with it, leaving the loader as it was. The same shards elsewhere still resume."""
    from seekdata.wds import TarShards

    names = _shards(tmp_path)

    def make(files: list[str]) -> seekdata.StatefulDataLoader:
        return seekdata.StatefulDataLoader(
            wrap(TarShards(files)), batch_size=4, shuffle=True, seed=3, collate_fn=list
        )

    loader = make(names)
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["dataset"] == TarShards(names).stream_signature
    make(list(names)).load_state_dict(state)  # the same shards: accepted
    for other in ([names[1], names[0], *names[2:]], names[::-1]):
        for again in (make(other), seekdata.StatefulDataLoader(TarShards(other), batch_size=4,
                                                               shuffle=True, seed=3)):  # fmt: skip
            before = again.state_dict()
            with pytest.raises(seekdata.StateMismatchError, match="dataset"):
                again.load_state_dict(state)
            assert again.state_dict() == before


def test_order_shards_and_growth_go_through_the_wrapper(tmp_path: pathlib.Path) -> None:
    """A sharded source that grew by a shard resumes through the wrapper (``grow=True`` reads
    signature_of_first and shard_sizes through it); one whose old shards were reordered
    is refused, leaving the sampler as it was."""
    from seekdata.wds import TarShards

    names = _shards(tmp_path)

    def make(files: list[str]) -> seekdata.DistributedSampler:
        wrapped = TransformedDataset(TarShards(files), _identity)
        return seekdata.DistributedSampler(wrapped, 1, 0, order="shards", seed=3)

    sampler = make(names[:3])
    sampler.set_epoch(0)
    state = sampler.state_dict()
    make(names).load_state_dict(state, grow=True)
    reordered = make([names[1], names[0], names[2], names[3]])
    before = reordered.state_dict()
    with pytest.raises(seekdata.StateMismatchError, match="dataset is"):
        reordered.load_state_dict(state, grow=True)
    assert reordered.state_dict() == before


def _noisy(sample: dict[str, Any], rng: Any) -> dict[str, Any]:
    """A transform that draws from both its stream and global RNG."""
    return {**sample, "t": torch.tensor(rng.random()), "g": torch.rand(1)}


def test_a_wrapped_mixture_gives_the_stream_it_gave_before() -> None:
    """Forwarding ``reseeds_global_rng_itself`` lets the loader skip reseeding before a wrapped
    Mixture, which reseeds each sample itself: unobservable, because the wrapper draws nothing
    from global RNG before the mixture does. Every sample equals ``get`` (global RNG seeded
    from the position's key first, as the loader did before the wrapper forwarded it), on
    every path of the fetch; the mixture's records reach the state."""
    mix = seekdata.Mixture([Source(0, 5), Source(1, 7)], [1, 2], seed=4)
    wrapped = TransformedDataset(mix, _noisy)
    assert _source.reseeds_global_rng_itself(wrapped) and _source.shuffles_itself(wrapped)
    expected = [wrapped.get(i, seed=9, epoch=1) for i in range(len(mix))]
    for workers in (0, 2):
        loader = seekdata.StatefulDataLoader(
            wrapped, batch_size=3, shuffle=False, seed=9, num_workers=workers, collate_fn=list
        )
        loader.set_epoch(1)
        got = [s for batch in loader for s in batch]
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert a.keys() == b.keys()
            assert all(torch.equal(a[k], b[k]) for k in a)
        assert "dataset" in loader.state_dict()
    with pytest.raises(ValueError, match="shuffle must be False"):
        seekdata.StatefulDataLoader(wrapped, batch_size=3, shuffle=True, seed=9)
