"""Datasets shared by the loader tests: augmentation through every kind of RNG."""

from __future__ import annotations

import random

import numpy as np
import torch

import seekdata


class GlobalRNGAug(torch.utils.data.Dataset):
    """Unmodified third-party style: draws from torch, numpy and random global RNG."""

    def __init__(self, n: int = 23) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.full((3,), float(i)) + torch.rand(3)
        return {
            "index": torch.tensor(i),
            "x": x,
            "np": torch.tensor(np.random.rand(2)),
            "py": torch.tensor(random.random()),
        }


class SampleRNGAug(torch.utils.data.Dataset):
    """New code: asks for the sample's generator explicitly."""

    def __init__(self, n: int = 23) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        rng = seekdata.sample_rng()
        return {"index": torch.tensor(i), "x": torch.from_numpy(rng.normal(size=4))}


def batches_equal(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.keys() != y.keys():
            return False
        if not all(torch.equal(x[k], y[k]) for k in x):
            return False
    return True


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
