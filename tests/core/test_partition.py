"""Partition maths as pure functions: no sampler object, Hypothesis over (n, W, start, origin)."""

from __future__ import annotations

import numpy as np
import torch.utils.data
from hypothesis import given
from hypothesis import strategies as st

from seekdata._core import partition as _partition

sizes = st.integers(1, 300)
worlds = st.integers(1, 9)


def positions(n: int, world: int, drop_last: bool, start: int, origin: int) -> list[np.ndarray]:
    local = _partition.local_len(n, world, drop_last, start)
    return [_partition.local_positions(n, world, r, start, origin, 0, local) for r in range(world)]


@given(sizes, worlds, st.booleans())
def test_from_the_epochs_head_it_is_torchs_distributed_sampler(n, world, drop_last) -> None:
    data = range(n)
    for rank in range(world):
        torch_sampler = torch.utils.data.DistributedSampler(
            data, world, rank, shuffle=False, drop_last=drop_last
        )
        ours = _partition.local_positions(
            n, world, rank, 0, 0, 0, _partition.local_len(n, world, drop_last, 0)
        )
        assert ours.tolist() == list(torch_sampler)
        assert _partition.local_len(n, world, drop_last, 0) == len(torch_sampler)


@given(sizes, worlds, st.booleans(), st.data())
def test_ranks_take_every_wth_position_disjoint_and_covering(n, world, drop_last, data) -> None:
    origin = data.draw(st.integers(0, n - 1), label="origin")
    start = data.draw(st.integers(origin, n), label="start")
    parts = positions(n, world, drop_last, start, origin)
    local = _partition.local_len(n, world, drop_last, start)
    assert all(len(p) == local for p in parts)
    taken = np.stack(parts, axis=1).reshape(-1)  # in global order: step k of rank 0, 1, ...
    real = taken[: max(n - start, 0)]
    if drop_last:
        # the whole rounds from start, nothing padded; the tail shorter than W is dropped
        assert taken.tolist() == list(range(start, start + local * world))
        assert n - start - len(taken) < world
    else:
        # every remaining position exactly once, then padding from the partition's origin
        assert real.tolist() == list(range(start, n))
        pad = taken[len(real) :]
        assert len(pad) < world
        assert all(origin <= p < n for p in pad.tolist())  # never a position before origin


@given(sizes, worlds, st.booleans(), st.data())
def test_position_after_counts_global_positions_and_ends_at_n(n, world, drop_last, data) -> None:
    start = data.draw(st.integers(0, n), label="start")
    local = _partition.local_len(n, world, drop_last, start)
    consumed = data.draw(st.integers(0, local + 3), label="consumed")
    after = _partition.position_after(n, world, drop_last, start, consumed)
    if consumed >= local:
        assert after == n  # the end is the same cursor whatever the world size
    else:
        assert after == start + consumed * world < n
        # the rest from there is exactly the rest of this partition
        assert _partition.local_len(n, world, drop_last, after) == local - consumed


@given(st.integers(0, 1000), st.integers(1, 64), st.booleans())
def test_batches_count_a_short_last_batch_unless_dropped(local, batch_size, drop_last) -> None:
    count = _partition.batches(local, batch_size, drop_last)
    sampler = torch.utils.data.BatchSampler(range(local), batch_size, drop_last)
    assert count == len(sampler) == len(list(sampler))
