"""Webdataset shards written for a test."""

from __future__ import annotations

import pathlib
import random
from typing import Any

import webdataset as wds

N_SHARDS, PER_SHARD = 5, 20


def write_shards(
    directory: pathlib.Path, n: int = N_SHARDS * PER_SHARD, per_shard: int = PER_SHARD, **extra: Any
) -> str:
    """Shards shard-000.tar, ... of n samples; returns their brace pattern."""
    rng = random.Random(0)
    with wds.ShardWriter(str(directory / "shard-%03d.tar"), maxcount=per_shard, verbose=0) as w:
        for i in range(n):
            sample = {
                "__key__": f"s{i:05d}",
                "cls": i % 7,
                "txt": f"sample {i}",
                "bin": rng.randbytes(rng.randrange(0, 3000)),
            }
            sample.update({k: f(i) for k, f in extra.items()})
            w.write(sample)
    last = (n - 1) // per_shard
    return str(directory / f"shard-{{000..{last:03d}}}.tar")
