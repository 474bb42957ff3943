"""Regenerate the golden sequences: `python tests/golden/regenerate.py`.

A change to any golden file is a deliberate break of every user's stream: review it as one.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch

import seekdata
from seekdata.order import Feistel, Shards, TorchRandperm

HERE = pathlib.Path(__file__).parent

RNG_CASES = [(0,), (0, 0), (0, 1), (1, 0), (42, 3, 7), (2**40, 5, 2**33)]
ORDER_CASES = [
    (1, 0, 0),
    (2, 0, 0),
    (10, 0, 0),
    (10, 0, 1),
    (10, 1, 0),
    (1000, 7, 3),
    (10**9, 0, 0),
]


def rng_golden() -> dict:
    out = {}
    for case in RNG_CASES:
        key = ",".join(map(str, case))
        out[key] = {
            "numpy": seekdata.numpy_generator(*case).integers(0, 2**32, 4).tolist(),
            "torch": torch.randint(
                0, 2**31, (4,), generator=seekdata.torch_generator(*case)
            ).tolist(),
        }
    out["sample(3,1,5)"] = seekdata.sample_generator(3, 1, 5).integers(0, 2**32, 4).tolist()
    return out


def order_golden() -> dict:
    out = {}
    for n, seed, epoch in ORDER_CASES:
        pos = np.arange(min(n, 16))
        out[f"feistel n={n} seed={seed} epoch={epoch}"] = (
            Feistel(n, seed).indices(epoch, pos).tolist()
        )
        if n <= 1000:
            out[f"torch n={n} seed={seed} epoch={epoch}"] = (
                TorchRandperm(n, seed).indices(epoch, pos).tolist()
            )
    shards = Shards(2).bind([5, 3, 0, 8, 4], 9)
    out["shards window=2 sizes=5,3,0,8,4 seed=9 epoch=1"] = shards.indices(
        1, np.arange(shards.n)
    ).tolist()
    return out


def mixture_golden() -> dict:
    """(source, source epoch, index) at the first positions of two epochs and at far ones."""
    from fractions import Fraction

    mix = seekdata.Mixture(
        [range(5), range(7), range(40)], [Fraction(1, 2), Fraction(1, 3), 0.2], length=30, seed=7
    )
    out = {}
    for epoch in (0, 1):
        out[f"epoch {epoch}"] = [list(mix.locate(p, epoch)) for p in range(30)]
    out["far"] = {str(p): list(mix.locate(p)) for p in (10**6, 10**9, 10**12)}
    out["bound"] = mix.bound
    windowed = seekdata.Mixture([range(5), range(7)], [2, 1], length=24, seed=7, window=6)
    out["window 6"] = [list(windowed.locate(p, 1)) for p in range(24)]
    return out


def mixture_schedule_golden() -> dict:
    """A schedule: a source joining, leaving and coming back, a window; (source, source epoch,
    index) at the first positions, around each change and far away, and the counts there."""
    sources = {"web": range(9), "code": range(5), "maths": range(3)}
    schedule = [
        (0, {"web": 3, "code": 1}),
        (12, {"web": 1, "code": 1, "maths": 1}),
        (24, {"code": 2, "maths": 1}),
        (36, [0.5, 0.25, 0.25]),
        (10**12, {"maths": 1}),
    ]
    mix = seekdata.Mixture(sources, schedule=schedule, length=20, seed=7)
    windowed = seekdata.Mixture(sources, schedule=schedule, length=20, seed=7, window=4)
    far = (10**9, 10**12 - 1, 10**12, 10**12 + 1)
    return {
        "first 48": [list(mix.locate(p)) for p in range(48)],
        "far": {str(p): list(mix.locate(p)) for p in far},
        "counts": {str(p): mix.counts(p) for p in (12, 24, 36, *far)},
        "window 4": [list(windowed.locate(p)) for p in range(48)],
        "bound": mix.bound,
    }


if __name__ == "__main__":
    (HERE / "rng.json").write_text(json.dumps(rng_golden(), indent=1) + "\n")
    (HERE / "orders.json").write_text(json.dumps(order_golden(), indent=1) + "\n")
    (HERE / "mixture.json").write_text(json.dumps(mixture_golden(), indent=1) + "\n")
    (HERE / "mixture_schedule.json").write_text(
        json.dumps(mixture_schedule_golden(), indent=1) + "\n"
    )
    print("wrote", HERE / "rng.json", HERE / "orders.json", HERE / "mixture.json")
    print("wrote", HERE / "mixture_schedule.json")
