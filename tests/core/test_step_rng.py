"""Exact by default: each batch the loader hands out keys the caller's global RNG by the
loader's (seed, epoch, step, rank), so Dropout and any other model-side draw in the step that
follows resumes exactly — with no call the user has to know about."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

import seekdata
from seekdata._core.rngkeys import step_seed


class Noisy(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((8,), float(i)) + torch.rand(8)  # augmentation from global RNG


class NoisyStream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return (torch.full((8,), float(i)) for i in range(start, 40, step))


def make(workers: int = 0, iterable: bool = False, **kw: Any) -> seekdata.StatefulDataLoader:
    if iterable:
        return seekdata.StatefulDataLoader(
            NoisyStream(), batch_size=4, num_workers=workers, seed=3, **kw
        )
    return seekdata.StatefulDataLoader(
        Noisy(), batch_size=4, shuffle=True, num_workers=workers, seed=3, **kw
    )


def test_each_batch_keys_global_rng_as_the_table_says() -> None:
    loader = make()
    for epoch in (0, 1):
        for step, _ in enumerate(loader):
            drawn = torch.rand(3), np.random.rand(), __import__("random").random()
            seekdata.set_step_rng(step_seed(3, epoch), step, rank=0)
            assert torch.equal(drawn[0], torch.rand(3))
            assert drawn[1:] == (np.random.rand(), __import__("random").random())


def train(loader: seekdata.StatefulDataLoader, steps: int) -> list[torch.Tensor]:
    """A model with Dropout and noise, as a newcomer writes it: no RNG calls of its own."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    outs: list[torch.Tensor] = []
    while len(outs) < steps:
        for batch in loader:
            outs.append(model(batch).detach() + 0.01 * torch.randn(4, 8))
            if len(outs) == steps:
                break
    return outs


@pytest.mark.parametrize("iterable", [False, True])
@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 2)])
def test_a_dropout_model_resumes_exactly_without_set_step_rng(
    before: int, after: int, iterable: bool
) -> None:
    total, stop = 16, 7  # past an epoch end (10 batches an epoch)
    full = train(make(before, iterable), total)
    loader = make(before, iterable)
    head = train(loader, stop)
    state = json.loads(json.dumps(loader.state_dict()))
    torch.manual_seed(12345)  # a fresh process: whatever global RNG it starts with
    _ = torch.rand(100), np.random.rand(7)
    resumed = make(after if not iterable else before, iterable)  # iterable: same workers
    resumed.load_state_dict(state)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))  # same weights
    rest: list[torch.Tensor] = []
    while len(head) + len(rest) < total:
        for batch in resumed:
            rest.append(model(batch).detach() + 0.01 * torch.randn(4, 8))
            if len(head) + len(rest) == total:
                break
    assert all(torch.equal(a, b) for a, b in zip(full, head + rest, strict=True))


def test_without_step_rng_the_same_model_does_not_resume() -> None:
    """The control: the test above would fail without the loader's keying."""
    full = train(make(step_rng=False), 8)
    loader = make(step_rng=False)
    head = train(loader, 3)
    state = loader.state_dict()
    torch.manual_seed(12345)
    resumed = make(step_rng=False)
    resumed.load_state_dict(state)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    torch.manual_seed(12345)
    rest = [
        model(b).detach() + 0.01 * torch.randn(4, 8)
        for _, b in zip(range(5), resumed, strict=False)
    ]
    assert not all(torch.equal(a, b) for a, b in zip(full, head + rest, strict=True))


def test_step_rng_can_be_switched_at_the_next_iter() -> None:
    loader = make()
    loader.step_rng = False
    torch.manual_seed(4)
    list(loader)
    after = torch.rand(2)
    torch.manual_seed(4)
    assert torch.equal(after, torch.rand(2))
    with pytest.raises(TypeError, match="step_rng must be a bool"):
        loader.step_rng = 1  # type: ignore[assignment]


def test_a_loader_built_later_with_seed_none_derives_from_the_programs_seed() -> None:
    """Each batch reseeds torch, so torch.initial_seed() moves; seed=None still derives from
    the seed the program set, not from how many steps ran before the loader was built."""
    torch.manual_seed(7)
    first = seekdata.StatefulDataLoader(Noisy(), batch_size=4)
    list(first)
    second = seekdata.StatefulDataLoader(Noisy(), batch_size=4)
    assert second.seed == first.seed
    torch.manual_seed(8)  # the program sets another seed: it counts
    assert seekdata.StatefulDataLoader(Noisy(), batch_size=4).seed != first.seed
