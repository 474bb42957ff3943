"""A state says what its position counts (``unit``): samples on the seekable paths, batches on
the paths that cannot seek. The core bounds a position by ``n`` only in samples, reading the
state's word for it, never the order's spelling; a state of the first format, which did not
write it, reads as that format meant it."""

from __future__ import annotations

import json
import logging
import warnings
from typing import Any

import pytest
import torch

import seekdata
from seekdata._core import state as _state
from seekdata.tools import inspection
from tests.helpers.datasets import GlobalRNGAug


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        for k in range(8):
            yield torch.tensor(k)


def replacement(batch_size: int = 1) -> seekdata.StatefulDataLoader:
    """A loader over a sampler it cannot seek that draws 12 samples from 4: its position (in
    batches) runs past ``n``."""
    g = torch.Generator().manual_seed(0)
    sampler = torch.utils.data.RandomSampler(range(4), True, num_samples=12, generator=g)
    return seekdata.StatefulDataLoader(list(range(4)), batch_size=batch_size, sampler=sampler)


def consumed(loader: Any, k: int) -> dict[str, Any]:
    it = iter(loader)
    for _ in range(k):
        next(it)
    return json.loads(json.dumps(loader.state_dict()))


def first_format(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as the first format wrote it: no unit, version 1."""
    return {**{k: v for k, v in state.items() if k != "unit"}, "seekdata": 1}


@pytest.fixture
def quiet_fast_forward_logs(caplog):
    caplog.set_level(logging.ERROR)


def test_every_path_says_what_its_position_counts(quiet_fast_forward_logs) -> None:
    sampler = seekdata.DistributedSampler(range(10), 1, 0, seed=1)
    seekable = seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3, seed=5)
    iterable = seekdata.StatefulDataLoader(Stream(), batch_size=2, seed=1)
    units = {
        "sampler": sampler.state_dict()["unit"],
        "seekable": consumed(seekable, 2)["unit"],
        "replay": consumed(replacement(), 2)["unit"],
        "iterable": consumed(iterable, 1)["unit"],
    }
    assert units == {
        "sampler": "samples",
        "seekable": "samples",
        "replay": "batches",
        "iterable": "batches",
    }
    assert seekable.state_dict()["position"] == 6  # samples: 2 batches of 3
    assert sampler.state_dict()["seekdata"] == 2 == _state.VERSION


def test_a_count_of_batches_past_n_is_valid_and_a_count_of_samples_is_not() -> None:
    state = consumed(replacement(), 7)
    assert (state["unit"], state["position"], state["n"]) == ("batches", 7, 4)
    _state.check_state(state, {}, where="here")  # batches: no bound known to the core
    resumed = replacement()
    resumed.load_state_dict(state)
    with pytest.raises(seekdata.StateMismatchError, match=r"past the epoch's end 4"):
        _state.check_state({**state, "unit": "samples"}, {}, where="here")
    with pytest.raises(seekdata.StateMismatchError, match=r"past the epoch's end 4"):
        replacement().load_state_dict({**state, "unit": "samples"})


def test_the_core_reads_the_unit_never_the_order() -> None:
    """A state whose order reads like the replay path's but that says it counts samples is
    bounded as samples; one with a plain order that counts batches is not bounded."""
    state = consumed(replacement(), 7)
    with pytest.raises(seekdata.StateMismatchError, match=r"past the epoch's end 4"):
        _state.check_state({**state, "unit": "samples"}, {}, where="here")
    _state.check_state({**state, "order": "sequential"}, {}, where="here")


@pytest.mark.parametrize(
    ("unit", "match"),
    [
        ("rows", r"state\['unit'\] must be one of 'samples', 'batches'; got 'rows'"),
        (1, r"state\['unit'\] must be str; got int 1"),
    ],
)
def test_a_bad_unit_is_refused(unit: Any, match: str) -> None:
    state = consumed(replacement(), 2)
    with pytest.raises(seekdata.StateMismatchError, match=match):
        replacement().load_state_dict({**state, "unit": unit})


def test_a_state_without_a_unit_counts_samples() -> None:
    sampler = seekdata.DistributedSampler(range(10), 1, 0, seed=1)
    state = {k: v for k, v in sampler.state_dict().items() if k != "unit"}
    seekdata.DistributedSampler(range(10), 1, 0, seed=1).load_state_dict(state)
    with pytest.raises(seekdata.StateMismatchError, match=r"past the epoch's end 10"):
        _state.check_state({**state, "position": 11}, {}, where="here")


@pytest.mark.parametrize("k", [0, 3, 7, 12])
def test_a_first_format_replay_state_counts_batches_and_resumes_the_same(k: int) -> None:
    full = [b.tolist() for b in replacement()]
    first = replacement()
    it = iter(first)
    head = [next(it).tolist() for _ in range(k)]
    old = first_format(json.loads(json.dumps(first.state_dict())))
    assert old["order"] == "replay:RandomSampler" and "unit" not in old
    assert _state.upgrade(old)["unit"] == "batches"
    _state.check_state(old, {}, where="here")  # position 7 of n = 4: batches, as it was meant
    resumed = replacement()
    resumed.load_state_dict(old)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the replay warning
        rest = [b.tolist() for b in resumed]
    assert head + rest == full
    assert resumed.state_dict()["unit"] == "batches"


def test_first_format_states_of_the_other_paths_count_what_they_counted(
    quiet_fast_forward_logs,
) -> None:
    sampler = seekdata.DistributedSampler(range(10), 1, 0, seed=1)
    seekable = seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3, seed=5)
    iterable = seekdata.StatefulDataLoader(Stream(), batch_size=2, seed=1)
    for state, unit in [
        (sampler.state_dict(), "samples"),
        (consumed(seekable, 2), "samples"),
        (consumed(iterable, 1), "batches"),
    ]:
        old = first_format(state)
        assert _state.upgrade(old) == state and _state.upgrade(old)["unit"] == unit
    seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3, seed=5).load_state_dict(
        first_format(
            consumed(seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3, seed=5), 2)
        )
    )
    with pytest.raises(seekdata.StateMismatchError, match=r"past the epoch's end 10"):
        seekable.load_state_dict({**first_format(seekable.state_dict()), "position": 11})


def test_inspect_says_what_the_position_counts_in_either_format() -> None:
    state = consumed(replacement(), 7)
    for shown in (state, first_format(state)):
        d = inspection.describe(("loader",), shown)
        assert (d["position_counts"], d["percent"], d["problem"]) == ("batches", None, None)
        assert d["version"] == shown["seekdata"]  # the version the file holds
        line = inspection.format_state(d).splitlines()[3]
        assert (
            line
            == "  position:    7 batches (the sampler is replayed: the position counts batches)"
        )
    seekable = seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3, seed=5)
    d = inspection.describe((), consumed(seekable, 2))
    assert (d["position_counts"], d["percent"]) == ("samples", 60.0)


def test_a_position_in_another_unit_is_refused_even_with_strict_false() -> None:
    """A replayed sampler's count of batches is never continued as a count of samples, nor
    the reverse: the order's mismatch is a warning with strict=False, the unit's a refusal."""
    batches = consumed(replacement(), 3)
    seekable = seekdata.StatefulDataLoader(list(range(4)), batch_size=1, seed=0)
    samples = consumed(seekable, 3)
    with pytest.raises(seekdata.StateMismatchError, match=r"order is 'replay:RandomSampler'"):
        seekdata.StatefulDataLoader(list(range(4)), batch_size=1, seed=0).load_state_dict(batches)
    for state, loader, here in [
        (batches, seekdata.StatefulDataLoader(list(range(4)), batch_size=1, seed=0), "samples"),
        (samples, replacement(), "batches"),
    ]:
        before = loader.state_dict()
        with (
            pytest.warns(UserWarning, match="strict=False"),
            pytest.raises(seekdata.StateMismatchError) as e,
        ):
            loader.load_state_dict(state, strict=False)
        assert f"unit is {state['unit']!r} in the checkpoint but {here!r} here" in str(e.value)
        assert "not even with strict=False" in str(e.value)
        assert loader.state_dict() == before  # a refusal leaves the loader as it was
    sampler = seekdata.DistributedSampler(range(10), 1, 0, seed=1)
    edited = {**sampler.state_dict(), "unit": "batches"}
    with pytest.raises(seekdata.StateMismatchError, match=r"unit is 'batches' in the checkpoint"):
        seekdata.DistributedSampler(range(10), 1, 0, seed=1).load_state_dict(edited, strict=False)
