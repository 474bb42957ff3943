"""IterableDataset through torchdata's engine: counter-seeded worker RNG, validated state."""

from __future__ import annotations

import json
import logging
import random

import numpy as np
import pytest
import torch

import seekdata
from tests.helpers.datasets import Stream


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        all(torch.equal(x[key], y[key]) for key in x) for x, y in zip(a, b, strict=True)
    )


@pytest.fixture(autouse=True)
def quiet_fast_forward_logs(caplog):
    caplog.set_level(logging.ERROR)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_is_exact_with_the_same_worker_count(workers) -> None:
    def make():
        return seekdata.StatefulDataLoader(Stream(), batch_size=2, num_workers=workers, seed=1)

    full = list(make())
    for stop in range(len(full) + 1):
        first = make()
        it = iter(first)
        head = [next(it) for _ in range(stop)]
        state = json.loads(json.dumps(first.state_dict()))
        del it
        torch.manual_seed(123)  # the caller's global RNG must not matter
        resumed = make()
        resumed.load_state_dict(state)
        assert same(full, head + list(resumed)), stop


def test_worker_rng_comes_from_counters_not_the_callers_rng() -> None:
    def run():
        return list(seekdata.StatefulDataLoader(Stream(), batch_size=2, num_workers=2, seed=3))

    torch.manual_seed(0)
    a = run()
    torch.manual_seed(1)
    b = run()
    assert same(a, b)
    loader = seekdata.StatefulDataLoader(Stream(), batch_size=2, num_workers=2, seed=3)
    e0, e1 = list(loader), list(loader)
    assert not same(e0, e1)  # a new epoch, new worker streams
    assert not same(
        a, list(seekdata.StatefulDataLoader(Stream(), batch_size=2, num_workers=2, seed=4))
    )


def test_num_workers_zero_leaves_global_rng_alone() -> None:
    torch.manual_seed(5)
    list(seekdata.StatefulDataLoader(Stream(), batch_size=2, seed=1, step_rng=False))
    after = torch.rand(1)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(1))


def test_iterable_state_is_validated() -> None:
    loader = seekdata.StatefulDataLoader(Stream(), batch_size=2, seed=1)
    state = loader.state_dict()
    assert state["kind"] == "iterable" and json.loads(json.dumps(state)) == state
    state["sample_seed"] = 2
    with pytest.raises(seekdata.StateMismatchError, match="sample_seed is 2"):
        loader.load_state_dict(state)
    with pytest.raises(ValueError, match="decides its own order"):
        seekdata.StatefulDataLoader(Stream(), shuffle=True)


class _RNGIter:
    """An iterator that saves and restores global torch RNG in its own state (torchdata's
    Stateful protocol): torchdata resumes it exactly at num_workers=0, so must seekdata."""

    def __init__(self, n: int) -> None:
        self.k, self.n = 0, n

    def __iter__(self):
        return self

    def __next__(self):
        if self.k >= self.n:
            raise StopIteration
        self.k += 1
        return torch.tensor(self.k - 1), torch.rand(1)

    def state_dict(self) -> dict:
        return {"k": self.k, "rng": torch.get_rng_state()}

    def load_state_dict(self, state: dict) -> None:
        self.k = state["k"]
        torch.set_rng_state(state["rng"])


class SavesGlobalRNG(torch.utils.data.IterableDataset):
    def __iter__(self):
        return _RNGIter(9)


def test_a_dataset_that_saves_global_rng_resumes_exactly_at_num_workers_0() -> None:
    def make():
        return seekdata.StatefulDataLoader(SavesGlobalRNG(), batch_size=2, seed=4)

    full = list(make())
    for stop in range(len(full) + 1):
        first = make()
        it = iter(first)
        head = [next(it) for _ in range(stop)]
        torch.rand(5)  # the caller's RNG moves between steps: the dataset must not see it
        state = first.state_dict()
        del it
        torch.manual_seed(stop)
        resumed = make()
        resumed.load_state_dict(state)
        rest = list(resumed)
        assert all(torch.equal(a[1], b[1]) for a, b in zip(full, head + rest, strict=True)), stop


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_load_while_an_iterator_is_live_follows_torchdata(workers) -> None:
    def make():
        return seekdata.StatefulDataLoader(Stream(), batch_size=2, num_workers=workers, seed=1)

    full = list(make())
    donor = make()
    donor_it = iter(donor)
    next(donor_it)
    state = donor.state_dict()
    del donor_it
    loader = make()
    it = iter(loader)
    next(it)
    next(it)
    loader.load_state_dict(state)  # raised nothing before either, but the old iterator ran on
    with pytest.raises(RuntimeError, match="call iter\\(loader\\)"):
        next(it)
    assert same(full[1:], list(loader))


def test_snapshot_every_n_steps_is_torchdatas_and_keeps_resume_exact() -> None:
    def make(**kw):
        return seekdata.StatefulDataLoader(Stream(), batch_size=2, num_workers=2, seed=1, **kw)

    loader = make(snapshot_every_n_steps=3)
    assert loader.snapshot_every_n_steps == 3
    assert loader._engine.engine.snapshot_every_n_steps == 3  # handed to torchdata's engine
    full = list(make())
    it = iter(loader)
    head = [next(it) for _ in range(4)]  # past a snapshot, between two
    state = loader.state_dict()
    del it
    resumed = make(snapshot_every_n_steps=3)
    resumed.load_state_dict(state)
    assert same(full, head + list(resumed))
    with pytest.raises(ValueError, match="snapshot_every_n_steps must be an int >= 0"):
        make(snapshot_every_n_steps=-1)


def _draws(reseed, caller_seed: int) -> list:
    random.seed(caller_seed)
    np.random.seed(caller_seed)
    torch.manual_seed(caller_seed)
    loader = seekdata.StatefulDataLoader(Stream(4), batch_size=2, seed=1, reseed_global_rng=reseed)
    return list(loader)


@pytest.mark.parametrize(
    ("reseed", "keyed"),
    [
        (("numpy",), {"np"}),
        (("torch", "random"), {"t", "py"}),
        (False, set()),
        (True, {"t", "np", "py"}),
    ],
)
def test_iterable_seeds_exactly_the_generators_reseed_global_rng_names(reseed, keyed) -> None:
    """Was ignored on this path: every generator was seeded whatever the option said."""
    a, b = _draws(reseed, caller_seed=1), _draws(reseed, caller_seed=2)
    for key in ("t", "np", "py"):
        equal = all(torch.equal(x[key], y[key]) for x, y in zip(a, b, strict=True))
        assert equal == (key in keyed), key  # keyed: the caller's RNG does not matter


def test_iterable_rejects_batch_transform() -> None:
    """Was ignored on this path: batches came out untransformed, silently."""
    with pytest.raises(ValueError, match="batch_transform needs a map-style dataset"):
        seekdata.StatefulDataLoader(Stream(), batch_size=2, batch_transform=lambda b, g: b)


def test_iterable_batches_are_placed_as_accelerate_asks() -> None:
    """accelerate's prepare sets the loader's placement; it was skipped for iterable datasets."""
    loader = seekdata.StatefulDataLoader(Stream(4), batch_size=2, seed=1)
    loader.place(lambda batch: ("placed", batch))  # what the accelerate hook calls
    assert [tag for tag, _ in loader] == ["placed", "placed"]
