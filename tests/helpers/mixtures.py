"""Mixture sources and checks shared by the mixture tests."""

from __future__ import annotations

from typing import Any

import torch

import seekdata


class Source(torch.utils.data.Dataset):
    """Sample i of source `name`, with a global-RNG draw and a sample_rng draw."""

    def __init__(self, name: int, n: int) -> None:
        self.name, self.n = name, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "source": torch.tensor(self.name),
            "index": torch.tensor(i),
            "x": torch.rand(2),
            "y": torch.tensor(seekdata.sample_rng().random()),
        }


def bounded(mix: seekdata.Mixture) -> Any:
    """A check of each segment's bound on the counts from its start: ``check(counts, p)``
    with the counts before stream position ``p``."""
    schedule, bound = mix.schedule, mix.bound
    origins = [mix.counts(start, 0) for start, _ in schedule]

    def check(counts: list[int], p: int) -> None:
        j = max(j for j, (start, _) in enumerate(schedule) if start <= p)
        start, weights = schedule[j]
        for k, w in enumerate(weights):
            assert abs(counts[k] - origins[j][k] - w * (p - start)) <= bound, (p, k)

    return check
