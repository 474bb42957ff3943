"""What frameworks read from a loader: batch_sampler and sampler with torch's meaning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import torch

import seekdata


class Indexed(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 22

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(i)


def _loader(**kwargs: object) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(Indexed(), batch_size=4, shuffle=True, seed=3, **kwargs)


def test_batch_sampler_yields_the_epoch_from_the_cursor_without_moving_it() -> None:
    loader = _loader()
    bs = loader.batch_sampler
    assert isinstance(bs, torch.utils.data.BatchSampler)
    assert bs.sampler is loader.sampler and (bs.batch_size, bs.drop_last) == (4, False)
    assert len(bs) == len(loader) == 6
    epoch0 = [b.tolist() for b in _loader()]
    assert list(bs) == epoch0  # the loader's own batches, as index lists
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert list(bs) == epoch0[2:]  # from the cursor
    assert loader.state_dict() == state  # a view: iterating it consumed nothing
    assert [b.tolist() for b in it] == epoch0[2:]


def _epoch(e: int) -> list[list[int]]:
    loader = _loader()
    loader.set_epoch(e)
    return [b.tolist() for b in loader]


def test_batch_sampler_after_an_epoch_is_the_next_epoch_and_drop_last_counts() -> None:
    loader = _loader(drop_last=True)
    assert len(loader.batch_sampler) == len(loader) == 5
    assert all(len(b) == 4 for b in loader.batch_sampler)
    loader = _loader()
    list(loader)  # epoch 0 exhausted: the next iter() starts epoch 1
    assert list(loader.batch_sampler) == _epoch(1)


def test_batch_sampler_is_none_without_batching_and_cannot_be_assigned() -> None:
    loader = seekdata.StatefulDataLoader(Indexed(), batch_size=None)
    assert loader.batch_sampler is None
    with pytest.raises((AttributeError, ValueError)):
        _loader().batch_sampler = None  # type: ignore[misc]


def test_user_sampler_gives_torch_batch_sampler() -> None:
    sampler = torch.utils.data.SequentialSampler(range(22))
    loader = seekdata.StatefulDataLoader(Indexed(), batch_size=5, sampler=sampler)
    assert list(loader.batch_sampler) == list(torch.utils.data.BatchSampler(sampler, 5, False))


def test_set_epoch_between_iter_and_the_first_batch_applies() -> None:
    """Lightning calls iter() before set_epoch when it resumes at an epoch's end."""
    for workers in (0, 2):
        loader = _loader(num_workers=workers)
        it = iter(loader)
        loader.set_epoch(3)
        assert [b.tolist() for b in it] == _epoch(3)


def test_import_seekdata_imports_no_framework() -> None:
    code = (
        "import sys, seekdata, seekdata.integrations; "
        "print(sorted(m for m in ('accelerate', 'transformers', 'lightning') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("framework", ["accelerate", "transformers", "lightning"])
def test_integration_modules_export_a_sorted_all(framework: str) -> None:
    pytest.importorskip(framework)
    module = importlib.import_module(f"seekdata.integrations.{framework}")
    assert list(module.__all__) == sorted(module.__all__)
    assert all(hasattr(module, name) for name in module.__all__)
