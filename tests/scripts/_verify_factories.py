"""Loader factories for ``seekdata verify`` tests: imported by path in fresh processes.

Self-contained (no ``tests.`` imports) so that ``tests/scripts/_verify_factories.py:NAME`` works
from any folder.
"""

from __future__ import annotations

import random
import time

import numpy as np
import torch

import seekdata
from seekdata.training import set_step_rng

N = 10
BATCH = 4  # 3 batches per epoch


class GlobalRNGAug(torch.utils.data.Dataset):
    """Third-party style augmentation: draws from torch, numpy and ``random`` global RNG."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.full((3,), float(i)) + torch.rand(3)
        return {"index": torch.tensor(i), "x": x, "np": torch.tensor(np.random.rand(2))}


class OwnRandomState(GlobalRNGAug):
    """Not resumable: its own stateful RandomState, made once in ``__init__``."""

    def __init__(self) -> None:
        self.rs = np.random.RandomState(0)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"index": torch.tensor(i), "x": torch.tensor(self.rs.rand(3) + random.random())}


def good(num_workers: int = 0) -> tuple[seekdata.StatefulDataLoader, object]:
    """Resumable: global RNG augmentation under seekdata's loader, and a keyed model step."""
    loader = seekdata.StatefulDataLoader(
        GlobalRNGAug(), batch_size=BATCH, shuffle=True, seed=3, num_workers=num_workers
    )
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5))
    torch.nn.init.constant_(model[0].weight, 0.5)
    torch.nn.init.zeros_(model[0].bias)

    def step_fn(batch: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        set_step_rng(11, step, rank=0)  # dropout keyed by the step
        return {"out": model(batch["x"])}

    return loader, step_fn


def stateful_rng(num_workers: int = 0) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(
        OwnRandomState(), batch_size=BATCH, shuffle=True, num_workers=num_workers
    )


def time_seeded(num_workers: int = 0) -> seekdata.StatefulDataLoader:
    """Not resumable: its seed is drawn from the clock (load_state_dict refuses the state)."""
    seed = time.time_ns() % 2**32
    return seekdata.StatefulDataLoader(
        GlobalRNGAug(), batch_size=BATCH, shuffle=True, seed=seed, num_workers=num_workers
    )


def not_a_loader() -> list[int]:
    return [1, 2, 3]


def tensor_state() -> seekdata.StatefulDataLoader:
    """Its state_dict() holds a tensor: not JSON-native."""

    class Loader(seekdata.StatefulDataLoader):
        def state_dict(self) -> dict[str, object]:
            return {**super().state_dict(), "rng": torch.zeros(2)}

    return Loader(list(range(N)), batch_size=BATCH)


def slow() -> None:
    time.sleep(120)


def _random_step(batch: dict[str, torch.Tensor], step: int) -> torch.Tensor:
    return torch.rand(2)  # a model step drawing from global RNG (Dropout, noise)


def unkeyed_step(num_workers: int = 0) -> tuple[seekdata.StatefulDataLoader, object]:
    """Not resumable: the model step draws from global RNG, which nothing keys by the step
    (the loader's step_rng is off)."""
    loader, _ = good(num_workers)
    loader.step_rng = False
    return loader, _random_step


def loader_keyed_step(num_workers: int = 0) -> tuple[seekdata.StatefulDataLoader, object]:
    """Resumable: the same model step, with the loader keying global RNG by the step (the
    default)."""
    loader, _ = good(num_workers)
    return loader, _random_step


def aborts_at_shutdown(num_workers: int = 0) -> tuple[seekdata.StatefulDataLoader, object]:
    """:func:`good`, in a process that dies of SIGABRT at its end, after its last line, as
    torch's gloo threads make a DDP process do now and then (pytorch/pytorch#190489)."""
    import atexit
    import os

    atexit.register(os.abort)
    return good(num_workers)


def aborts_at_start(num_workers: int = 0) -> object:
    """A process that dies of SIGABRT before it writes anything."""
    import os

    os.abort()
