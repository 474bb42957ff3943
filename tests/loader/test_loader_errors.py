"""An error in one batch is that batch's error, as with torch's DataLoader: each failing
``next()`` raises, the loop can catch it and go on, the failed batch counts as consumed, and a
resume after it continues exactly — with and without workers, for every way a batch is made."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

import seekdata

BAD = {3, 17, 18, 40}  # corrupt samples


class Corrupt(torch.utils.data.Dataset):
    """Sample i is (i, noise from global RNG); the samples in BAD raise."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor]:
        if i in BAD:
            raise ValueError(f"sample {i} is corrupt")
        return i, torch.rand(2)


def drain(it: Any) -> list[Any]:
    """Every step of an iterator: a batch, or the error's type name."""
    out: list[Any] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except ValueError as e:
            assert "corrupt" in str(e)
            out.append("ValueError")


def same(a: list[Any], b: list[Any]) -> bool:
    return seekdata.testing.first_difference(a, b) is None


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning")
@pytest.mark.parametrize("workers", [0, 2])
# pin_memory: torch's own single-process iterator instead of the loader's in-process one
@pytest.mark.parametrize("options", [{}, {"pin_memory": True}, {"batch_size": None}])
def test_each_failing_batch_raises_and_the_epoch_goes_on_as_with_torch(
    workers: int, options: dict
) -> None:
    kwargs = {"batch_size": 4, "num_workers": workers, **options}
    ours = drain(iter(seekdata.StatefulDataLoader(Corrupt(), seed=0, **kwargs)))
    theirs = drain(iter(torch.utils.data.DataLoader(Corrupt(), **kwargs)))
    assert [b == "ValueError" for b in ours] == [b == "ValueError" for b in theirs]
    failed = sum(b == "ValueError" for b in ours)
    assert failed == (len(BAD) if options.get("batch_size", 4) is None else 3)
    ids = [torch.as_tensor(b[0]).tolist() for b in ours if b != "ValueError"]
    assert ids == [torch.as_tensor(b[0]).tolist() for b in theirs if b != "ValueError"]


@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 2)])
def test_resume_after_an_error_is_exact_at_every_step(before: int, after: int) -> None:
    def make(workers: int) -> seekdata.StatefulDataLoader:
        sampler = seekdata.DistributedSampler(range(48), 1, 0, shuffle=True, seed=3)
        return seekdata.StatefulDataLoader(
            Corrupt(), batch_size=4, sampler=sampler, num_workers=workers, seed=5,
            persistent_workers=workers > 0,
        )  # fmt: skip

    loader = make(before)
    it = iter(loader)
    full, states = [], [json.loads(json.dumps(loader.state_dict()))]
    for step in _steps(it):  # the state after every step, errors included
        full.append(step)
        states.append(json.loads(json.dumps(loader.state_dict())))
    assert "ValueError" in full and len(full) == 12
    resumed = make(after)  # one loader: its persistent workers serve every resume
    for stop, state in enumerate(states):
        assert state["step"] == stop  # a failed batch counts as consumed
        resumed.load_state_dict(state)
        assert same(full[:stop] + drain(iter(resumed)), full), f"stop={stop}"


def _steps(it: Any) -> Any:
    while True:
        try:
            yield next(it)
        except StopIteration:
            return
        except ValueError:
            yield "ValueError"


def test_an_error_in_collate_or_the_batch_transform_is_the_batchs_too() -> None:
    def collate(batch: list[Any]) -> Any:
        if any(i == 9 for i, _ in batch):
            raise ValueError("corrupt batch")
        return torch.utils.data.default_collate(batch)

    class Fine(Corrupt):
        def __getitem__(self, i: int) -> tuple[int, torch.Tensor]:
            return i, torch.rand(2)

    loader = seekdata.StatefulDataLoader(Fine(), batch_size=4, collate_fn=collate, seed=0)
    steps = drain(iter(loader))
    assert [s == "ValueError" for s in steps] == [i == 2 for i in range(12)]

    def mix(batch: Any, rng: Any) -> Any:
        if 30 in batch[0].tolist():
            raise ValueError("corrupt mix")
        return batch

    loader = seekdata.StatefulDataLoader(Fine(), batch_size=4, batch_transform=mix, seed=0)
    steps = drain(iter(loader))
    assert [s == "ValueError" for s in steps] == [i == 7 for i in range(12)]
