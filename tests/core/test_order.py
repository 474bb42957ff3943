"""Orders: bijections with O(1) random access; golden sequences; invariants."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seekdata.order import (
    Feistel,
    Sequential,
    Shards,
    TorchRandperm,
    feistel_index,
    make_order,
)
from tests.helpers.paths import GOLDEN

GOLDEN = json.loads((GOLDEN / "orders.json").read_text())


def test_golden_orders() -> None:
    for name, expected in GOLDEN.items():
        kind, *fields = name.split(" ")
        kv = dict(f.split("=") for f in fields)
        if kind == "shards":
            sizes = [int(s) for s in kv["sizes"].split(",")]
            order = Shards(int(kv["window"])).bind(sizes, int(kv["seed"]))
            got = order.indices(int(kv["epoch"]), np.arange(order.n))
        else:
            n, seed, epoch = int(kv["n"]), int(kv["seed"]), int(kv["epoch"])
            cls = Feistel if kind == "feistel" else TorchRandperm
            got = cls(n, seed).indices(epoch, np.arange(min(n, 16)))
        assert got.tolist() == expected, name


@pytest.mark.parametrize("n", [2, 3, 100, 20_000, 2**20 + 7])
def test_the_vectorised_feistel_agrees_with_the_scalar_walk_for_any_chunk(n: int) -> None:
    """Vectorised passes, then the last few elements walked in Python: the scalar order's bits,
    whether a call holds one position or hundreds."""
    gen = np.random.default_rng(n)
    for count in (1, 7, 30, 300):
        positions = gen.integers(0, n, count)
        got = Feistel(n, 3).indices(2, positions).tolist()
        assert got == [feistel_index(n, 3, 2, int(p)) for p in positions], count


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**64), epoch=st.integers(0, 10**6))
def test_feistel_is_a_permutation(n: int, seed: int, epoch: int) -> None:
    idx = Feistel(n, seed).indices(epoch, np.arange(n))
    assert np.array_equal(np.sort(idx), np.arange(n))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 10**18), seed=st.integers(0, 2**32), data=st.data())
def test_feistel_random_access_matches_vectorised(n: int, seed: int, data: st.DataObject) -> None:
    pos = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20))
    order = Feistel(n, seed)
    whole = order.indices(3, np.array(pos, dtype=np.uint64))
    one_by_one = [int(order.indices(3, np.array([p], dtype=np.uint64))[0]) for p in pos]
    assert whole.tolist() == one_by_one
    assert all(0 <= i < n for i in one_by_one)
    # injective on the sample
    assert len(set(one_by_one)) == len(set(pos))


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=12).filter(lambda s: sum(s) > 0),
    window=st.integers(1, 5),
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 50),
)
def test_shards_is_a_permutation(sizes: list[int], window: int, seed: int, epoch: int) -> None:
    order = Shards(window).bind(sizes, seed)
    idx = order.indices(epoch, np.arange(order.n))
    assert np.array_equal(np.sort(idx), np.arange(order.n))


def test_shards_keep_locality() -> None:
    sizes = [100] * 40
    order = Shards(window=4).bind(sizes, 0)
    idx = order.indices(0, np.arange(order.n))
    shard = idx // 100
    for w in range(10):  # each block of 400 positions reads exactly 4 shards
        assert len(set(shard[w * 400 : (w + 1) * 400].tolist())) == 4
    # and the shard order itself is shuffled and changes with the epoch
    first = [int(s) for s in shard[::400]]
    assert first != sorted(first)
    assert order.indices(1, np.arange(400)).tolist() != idx[:400].tolist()


def test_different_epochs_and_seeds_differ() -> None:
    for n in (16, 100, 12345):
        pos = np.arange(min(n, 64))
        seen = {tuple(Feistel(n, s).indices(e, pos).tolist()) for s in range(3) for e in range(3)}
        assert len(seen) == 9


def test_seed_epoch_not_interchangeable() -> None:
    # torch's sampler: (seed 0, epoch 1) == (seed 1, epoch 0). Ours: never.
    pos = np.arange(100)
    assert Feistel(100, 0).indices(1, pos).tolist() != Feistel(100, 1).indices(0, pos).tolist()
    assert (
        TorchRandperm(100, 0).indices(1, pos).tolist()
        == TorchRandperm(100, 1).indices(0, pos).tolist()
    )


def test_torch_order_is_torch_randperm() -> None:
    g = torch.Generator()
    g.manual_seed(7 + 2)
    ref = torch.randperm(500, generator=g).tolist()
    assert TorchRandperm(500, 7).indices(2, np.arange(500)).tolist() == ref


def test_huge_n_is_o1() -> None:
    n = 2**63 - 1
    idx = Feistel(n, 0).indices(0, np.array([0, 1, n - 1], dtype=np.uint64))
    assert all(0 <= int(i) < n for i in idx) and len(set(idx.tolist())) == 3


def test_sequential_and_shuffle_off() -> None:
    assert Sequential(5).indices(0, np.arange(5)).tolist() == [0, 1, 2, 3, 4]
    assert isinstance(make_order("torch", 5, 0, shuffle=False), Sequential)


def test_bad_orders_and_positions() -> None:
    with pytest.raises(ValueError, match="order must be one of"):
        make_order("random", 10, 0)
    with pytest.raises(TypeError, match="order must be a str"):
        make_order(3, 10, 0)
    with pytest.raises(ValueError, match="needs a dataset with shard_sizes"):
        make_order("shards", 10, 0, dataset=list(range(10)))
    with pytest.raises(ValueError, match="positions must lie in"):
        Feistel(10, 0).indices(0, np.array([10]))
    with pytest.raises(TypeError, match="positions must be integers"):
        Feistel(10, 0).indices(0, np.array([1.5]))
    with pytest.raises(ValueError, match="window must be >= 1"):
        Shards(0)
