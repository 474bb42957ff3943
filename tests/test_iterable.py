"""IterableDataset through torchdata's engine: counter-seeded worker RNG, validated state."""

from __future__ import annotations

import json
import logging
import random

import numpy as np
import pytest
import torch

import seekdata


class Stream(torch.utils.data.IterableDataset):
    """Shards its range over workers and augments through all three global RNGs."""

    def __init__(self, n: int = 12) -> None:
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        for k in range(wid, self.n, nw):
            yield {
                "k": torch.tensor(k),
                "t": torch.rand(1),
                "np": torch.tensor(np.random.rand()),
                "py": torch.tensor(random.random()),
            }


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
    list(seekdata.StatefulDataLoader(Stream(), batch_size=2, seed=1))
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
