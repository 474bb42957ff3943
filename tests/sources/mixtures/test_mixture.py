"""seekdata.Mixture: the per-prefix bound, O(1) seek, purity, exact and elastic resume."""

from __future__ import annotations

import functools
import itertools
import json
import pathlib
import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seekdata
from seekdata import rng
from seekdata.sources.mixtures import tree as _tree
from seekdata.testing import assert_exact_resume
from seekdata.tools.inspection import fingerprint
from seekdata.wds import TarShards
from tests.helpers.mixtures import Source
from tests.helpers.paths import GOLDEN
from tests.helpers.shards import write_shards

GOLDEN = GOLDEN / "mixture.json"


def mix3(**kw: Any) -> seekdata.Mixture:
    sources = [Source(0, 5), Source(1, 7), Source(2, 40)]
    return seekdata.Mixture(sources, [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], **kw)


def check_prefixes(mix: seekdata.Mixture, start: int, stop: int) -> None:
    """Walk stream positions [start, stop): each source's count stays within the stated bound,
    counts() agrees with the walk, and each source gets its own positions 0, 1, 2, ... in turn."""
    weights, bound = mix.weights, mix.bound
    counts = mix._tree.counts(start)
    for stream in range(start, stop):
        for k, w in enumerate(weights):
            assert abs(counts[k] - w * stream) <= bound, (stream, k, counts[k], w * stream)
        k, q = mix._tree.locate(stream)
        assert q == counts[k]
        counts[k] += 1
    assert counts == mix._tree.counts(stop)


weights_st = st.lists(
    st.one_of(st.integers(1, 60), st.fractions(Fraction(1, 50), 3)), min_size=1, max_size=9
)


@settings(max_examples=60, deadline=None)
@given(weights=weights_st)
def test_every_prefix_stays_within_the_bound(weights: list[Any]) -> None:
    """The stream is periodic with period A = the integer weights' sum (proved by the counts
    at A being exactly the weights), so walking one period checks every prefix of the endless
    stream; the bound is below 2 for every weight set."""
    mix = seekdata.Mixture([range(3)] * len(weights), weights)
    a = mix._a
    period = sum(a)
    assert mix._tree.counts(period) == a
    assert mix.bound < (1 if len(weights) <= 3 else 2)
    check_prefixes(mix, 0, min(period, 3000) + 1)
    if period <= 3000:  # the whole period, hence every prefix of the stream
        assert mix._tree.counts(7 * period + 5) == [
            7 * x + c for x, c in zip(a, mix.counts(5), strict=True)
        ]
    far = 10**12 + 17
    check_prefixes(mix, far, far + 200)


@pytest.mark.parametrize(
    "weights, bound",
    [
        ([1, 1], 0.5),
        ([1], 0.0),
        ([1, 1, 1, 1], 0.75),
        ([1, 1, 1], 0.75),
        ([1, 1, 1, 1, 1, 1, 1, 1], 0.875),
    ],
)
def test_stated_bound_of_simple_mixes(weights: list[int], bound: float) -> None:
    assert seekdata.Mixture([range(2)] * len(weights), weights).bound == bound


def test_float_weights_are_read_as_decimals() -> None:
    mix = seekdata.Mixture([range(3), range(4)], [0.3, 0.7])
    assert mix.weights == (Fraction(3, 10), Fraction(7, 10))
    assert seekdata.Mixture([range(3), range(4)], [np.float32(0.5), 1]).weights == (
        Fraction(1, 3),
        Fraction(2, 3),
    )


def test_seek_to_1e12_is_exact() -> None:
    """Integer arithmetic: at 10**12 the counts are the period's multiple plus the remainder,
    and every source's samples continue q, q+1, ... across the seek (floats would drift)."""
    mix = seekdata.Mixture([range(5), range(7), range(11)], [Fraction(1, 3), 0.5, 1])
    a, period = mix._a, sum(mix._a)
    p = 10**12
    q, r = divmod(p, period)
    assert mix.counts(p) == [q * x + c for x, c in zip(a, mix.counts(r), strict=True)]
    check_prefixes(mix, p - 50, p + 50)
    # locate() at p equals the walk's prediction: source epoch and position within it
    k, source_epoch, index = mix.locate(p)
    count = mix.counts(p)[k]
    assert source_epoch == count // mix.sizes[k]
    assert index == mix._orders[k].indices(source_epoch, np.array([count % mix.sizes[k]]))[0]


def test_each_source_cycles_through_reshuffled_epochs() -> None:
    mix = seekdata.Mixture([range(6), range(50)], [3, 1], length=40)
    per: dict[tuple[int, int], list[int]] = {}
    for epoch in range(3):  # the stream continues across mixture epochs
        for p in range(len(mix)):
            k, e, i = mix.locate(p, epoch)
            per.setdefault((k, e), []).append(i)
    small = [per[(0, e)] for e in range(14)]  # 90 draws of a 6-sample source: 15 epochs
    assert all(sorted(s) == list(range(6)) for s in small)
    assert len({tuple(s) for s in small}) > 5  # reshuffled each source epoch
    assert len(per[(1, 0)]) == 30 and len(set(per[(1, 0)])) == 30  # never exhausted: no repeat
    assert (1, 1) not in per


def test_locate_is_pure() -> None:
    """The same answer in any call order, from any instance, and through __getitem__."""
    want = [mix3().locate(p, 1) for p in range(52)]
    mix = mix3()
    order = list(range(52))
    random.Random(3).shuffle(order)
    got = {p: mix.locate(p, 1) for p in order}
    assert [got[p] for p in range(52)] == want
    mix.set_epoch(1)
    items = {p: mix[p] for p in order}
    for p, (k, _, i) in enumerate(want):
        assert int(items[p]["source"]) == k and int(items[p]["index"]) == i


def test_getitem_draws_from_the_sample_key_and_leaves_global_rng_alone() -> None:
    mix = mix3()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    item = mix[3]
    assert torch.equal(torch.get_rng_state(), before)
    k, e, i = mix.locate(3)
    assert item["y"] == mix.sample_generator(k, e, i).random()
    assert torch.equal(mix[3]["x"], item["x"])


def test_a_samples_randomness_does_not_depend_on_the_mix() -> None:
    """Source A keeps its id (0) in two different mixtures: every (epoch, index) of A gets the
    same global-RNG and sample_rng draws in both, in a loader with workers."""
    a = Source(0, 9)
    first = seekdata.Mixture([a, Source(1, 4)], [1, 1], length=60, seed=2)
    second = seekdata.Mixture(
        [Source(7, 30), a], [5, 1], length=60, seed=2, source_ids=[3, 0], order="sequential"
    )

    def draws(mix: seekdata.Mixture, workers: int) -> dict[tuple[int, int], Any]:
        out = {}
        loader = seekdata.StatefulDataLoader(mix, batch_size=4, num_workers=workers)
        for p, (b_x, b_y, b_s) in enumerate(
            (x, y, s) for b in loader for x, y, s in zip(b["x"], b["y"], b["source"], strict=True)
        ):
            _, e, i = mix.locate(p)
            if int(b_s) == 0:
                out[(e, i)] = (b_x, float(b_y))
        return out

    one, two = draws(first, 0), draws(second, 2)
    common = set(one) & set(two)
    assert len(common) >= 5
    for key in common:
        assert torch.equal(one[key][0], two[key][0]) and one[key][1] == two[key][1]
    other = seekdata.Mixture([a, Source(1, 4)], [1, 1], length=60, seed=3)
    assert draws(other, 0)[(0, 0)][1] != one[(0, 0)][1]  # the seed does key it


@pytest.mark.parametrize("workers, resume_workers, window", [(0, 2, 0), (2, 0, 0), (2, 0, 5)])
def test_exact_resume_at_every_step(workers: int, resume_workers: int, window: int) -> None:
    def make(num_workers: int = workers) -> seekdata.StatefulDataLoader:
        return seekdata.StatefulDataLoader(
            mix3(length=17, window=window), batch_size=3, num_workers=num_workers, seed=4
        )

    checked = assert_exact_resume(make, epochs=2, resume_kwargs={"num_workers": resume_workers})
    assert checked == 2 * 6 + 1


def test_two_ranks_resume_on_three_with_the_same_stream() -> None:
    mix = mix3(length=30)

    def loaders(world: int) -> list[seekdata.StatefulDataLoader]:
        return [
            seekdata.StatefulDataLoader(
                mix,
                batch_size=2,
                sampler=seekdata.DistributedSampler(mix, world, r, shuffle=False),
            )
            for r in range(world)
        ]

    def key(batch: dict[str, Any], j: int) -> tuple[int, int, float]:
        return int(batch["source"][j]), int(batch["index"][j]), float(batch["y"][j])

    two = loaders(2)
    iters = [iter(x) for x in two]
    seen = [[key(b, j) for j in range(2)] for b in (next(it) for it in iters for _ in range(3))]
    state = json.loads(json.dumps(two[0].state_dict()))
    assert state["position"] == 12
    three = loaders(3)
    for x in three:
        x.load_state_dict(state)
    by_position = {}
    for r in range(2):
        for step in range(3):
            for j in range(2):
                by_position[r + 2 * (2 * step + j)] = seen[r * 3 + step][j]
    for r, x in enumerate(three):
        for step, b in enumerate(x):
            for j in range(len(b["y"])):
                by_position[12 + r + 3 * (2 * step + j)] = key(b, j)
    reference = [
        key(b, j) for b in seekdata.StatefulDataLoader(mix, batch_size=5) for j in range(5)
    ]
    assert [by_position[p] for p in range(30)] == reference


def test_tar_shards_as_a_source(tmp_path: pathlib.Path) -> None:
    shards = TarShards(write_shards(tmp_path, n=30, per_shard=10))
    mix = seekdata.Mixture([shards, range(100, 104)], [2, 1], length=24, order="shards")
    want = []
    for p in range(24):
        k, _, i = mix.locate(p)
        want.append(shards[i]["__key__"] if k == 0 else 100 + i)
    loader = seekdata.StatefulDataLoader(
        mix, batch_size=4, num_workers=2, collate_fn=lambda b: b, seed=1
    )
    got = [s["__key__"] if isinstance(s, dict) else s for b in loader for s in b]
    assert got == want
    # tar shards keep their shard-local order; the plain source is Feistel-shuffled
    assert mix._orders[0].spec().startswith("shards") and mix._orders[1].spec() == "feistel"


def test_golden_sequence() -> None:
    from tests.golden.regenerate import mixture_golden

    assert mixture_golden() == json.loads(GOLDEN.read_text())


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(3))


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        (([range(3)], [0]), {}, ValueError, "must be > 0"),
        (([range(3)], [-1.5]), {}, ValueError, "must be > 0"),
        (([range(3)], [float("nan")]), {}, ValueError, "finite"),
        (([range(3)], [True]), {}, TypeError, "real numbers"),
        (([range(3)], ["1"]), {}, TypeError, "real numbers"),
        (([range(3), range(0)], [1, 1]), {}, ValueError, "source 1 .* len 0"),
        (([Stream()], [1]), {}, TypeError, "map-style"),
        (([range(3)], [1, 2]), {}, ValueError, "one weight per dataset"),
        (([], []), {}, ValueError, "at least one"),
        (([range(3)] * 2, [1, 1]), {"source_ids": [1, 1]}, ValueError, "distinct"),
        (([range(3)], [1]), {"length": 0}, ValueError, "length must be an int >= 1 or None"),
        (([range(3)], [1]), {"length": -1}, ValueError, "length must be an int >= 1 or None"),
        (([range(3)], [1]), {"length": 2.0}, TypeError, "length must be an int >= 1 or None"),
        (([range(3)], [1]), {"length": True}, TypeError, "length must be an int >= 1 or None"),
        (([range(3)], [1]), {"order": "torch"}, ValueError, "order must be"),
    ],
)
def test_bad_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match) as raised:
        seekdata.Mixture(*args, **kwargs)
    assert ">= 0" not in str(raised.value) and "=0" not in str(raised.value)  # 0 is refused


def test_shuffling_a_mixture_again_is_refused() -> None:
    mix = mix3()
    with pytest.raises(ValueError, match="shuffle must be False"):
        seekdata.DistributedSampler(mix, 1, 0)
    with pytest.raises(ValueError, match="shuffle must be False"):
        seekdata.StatefulDataLoader(mix, batch_size=2, shuffle=True)
    with pytest.raises(IndexError):
        mix[len(mix)]
    assert len(list(seekdata.StatefulDataLoader(mix, batch_size=26))) == 2


def test_default_length_is_the_sources_total() -> None:
    assert len(mix3()) == 52
    assert functools.reduce(lambda a, b: a + b, mix3().weights) == 1


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 2**40),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**40),
    x=st.integers(0, 2**40),
)
def test_scalar_fast_paths_equal_the_vectorised_ones(n: int, seed: int, epoch: int, x: int) -> None:
    """Mixture looks up one sample at a time in pure Python; it must be seekdata's Feistel
    order and global-RNG seeds exactly, or mixtures would disagree with the rest."""
    x %= n
    want = seekdata.order.Feistel(n, seed).indices(epoch, np.array([x]))[0]
    assert _tree.feistel(n, seed, epoch, x) == want
    want_seeds = seekdata.rng.global_seeds(seed, epoch, np.array([x])).tolist()[0]
    assert _tree.global_seeds(seed, epoch, x) == want_seeds


@pytest.mark.parametrize("reseed", [True, False])
def test_a_loader_in_the_main_process_leaves_global_rng_alone(reseed: bool) -> None:
    mix = mix3(reseed_global_rng=reseed)
    loader = seekdata.StatefulDataLoader(
        mix, batch_size=4, reseed_global_rng=reseed, step_rng=False
    )
    torch.manual_seed(9)
    before = torch.get_rng_state()
    batches = list(loader)
    if not reseed:  # the samples drew from the caller's stream, and nothing reseeded it
        torch.manual_seed(9)
        for _ in range(len(mix)):
            torch.rand(2)
        before = torch.get_rng_state()
    assert torch.equal(torch.get_rng_state(), before)
    # reseeding or not, sample_rng draws from the sample's key
    k, e, i = mix.locate(5)
    assert batches[1]["y"][1] == torch.tensor(mix.sample_generator(k, e, i).random())


def test_a_thousand_geometric_weights_build_a_deep_tree() -> None:
    """Weights 2**-k make the split tree a chain 1,000 deep: built without recursion, and the
    lightest source is still found where the counts say."""
    weights = [Fraction(1, 2**k) for k in range(1000)]
    mix = seekdata.Mixture([range(2)] * 1000, weights, length=10)
    assert mix.bound < 2
    check_prefixes(mix, 0, 300)
    check_prefixes(mix, 2**1000 - 3, 2**1000 + 3)  # the lightest source's only visits


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loaders_epoch_is_the_mixtures(workers: int) -> None:
    """Epoch e of the loader is positions e * len + p of the stream: epoch 1 continues the
    sources where epoch 0 left them, in workers too."""
    mix = mix3(length=13)
    loader = seekdata.StatefulDataLoader(mix, batch_size=4, num_workers=workers)
    for epoch in range(2):
        loader.set_epoch(epoch)
        got = [
            (int(s), int(i)) for b in loader for s, i in zip(b["source"], b["index"], strict=True)
        ]
        want = [(k, i) for k, _, i in (mix.locate(p, epoch) for p in range(13))]
        assert got == want
    assert mix.locate(0, 1) == mix.locate(13, 0)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    data=st.data(),
)
def test_each_source_walks_its_own_permuted_epochs(sizes: list[int], data: Any) -> None:
    """Whatever the lengths and weights: source k's j-th appearance is sample
    order_k(j // n_k, j % n_k), so each of its epochs is a permutation of its samples."""
    weights = data.draw(st.lists(st.integers(1, 9), min_size=len(sizes), max_size=len(sizes)))
    start = data.draw(st.sampled_from([0, 10**12]))
    mix = seekdata.Mixture([range(n) for n in sizes], weights, length=7)
    seen: dict[int, list[tuple[int, int]]] = {k: [] for k in range(len(sizes))}
    first = mix.counts(start % 7, start // 7)
    for p in range(start, start + 150):
        k, e, i = mix.locate(p % 7, p // 7)
        seen[k].append((e, i))
    for k, n in enumerate(sizes):
        order = seekdata.order.Feistel(n, mix.source_seeds[k])
        for j, (e, i) in enumerate(seen[k], first[k]):
            assert e == j // n and i == order.indices(e, np.array([j % n]))[0]


@settings(max_examples=30, deadline=None)
@given(weights=weights_st, window=st.integers(2, 40), start=st.sampled_from([0, 10**12]))
def test_a_window_keeps_its_looser_bound(weights: list[Any], window: int, start: int) -> None:
    """With window=B every prefix stays within 3 * bound_k + B * weight_k, the counts are the
    tree's exactly at window ends, and counts() agrees with a walk of locate()."""
    mix = seekdata.Mixture([range(4)] * len(weights), weights, window=window, length=1)
    plain = seekdata.Mixture([range(4)] * len(weights), weights, length=1)
    start -= start % window
    counts = mix.counts(start)
    assert counts == plain.counts(start)
    for p in range(start, start + 3 * window + 1):
        for k, w in enumerate(mix.weights):
            assert abs(counts[k] - w * p) <= mix.bound
        if p % window == 0:
            assert counts == plain.counts(p)
        if p % 7 == 0:
            assert counts == mix.counts(p)
        counts[mix.locate(p, 0)[0]] += 1


def test_a_window_stops_ranks_from_seeing_one_source_each() -> None:
    """Weights 1:1 repeat the pattern A B A B: on 2 ranks, rank 0 would only ever see A.
    A window shuffles positions within each 16, so every rank sees both sources, while each
    16 positions still hold exactly 8 of each."""
    for window, both in ((0, False), (16, True)):
        mix = seekdata.Mixture([range(50), range(50)], [1, 1], length=64, window=window)
        per_rank = [{mix.locate(p)[0] for p in range(r, 64, 2)} for r in range(2)]
        assert all(len(s) == 2 for s in per_rank) is both
        assert mix.counts(16) == [8, 8] and mix.counts(48) == [24, 24]


class _DrawsFirst(seekdata.Mixture):
    """A subclass that draws from numpy's global RNG before the mixture reseeds."""

    def __getitem__(self, position: int) -> Any:
        return float(np.random.random()), super().__getitem__(position)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_loader_skips_its_reseed_only_where_the_mixture_reseeds_first(num_workers: int) -> None:
    """A Mixture reseeds every generator from its sample's key, so the loader does not reseed
    by position first; a subclass that draws before the mixture still gets the position's key."""
    mix = mix3()
    assert mix.reseeds_global_rng_itself
    assert not mix3(reseed_global_rng=False).reseeds_global_rng_itself
    sub = _DrawsFirst(mix.datasets, [1, 1, 2], seed=7)
    assert not sub.reseeds_global_rng_itself
    loader = seekdata.StatefulDataLoader(sub, batch_size=4, seed=3, num_workers=num_workers)
    firsts = [first for batch in itertools.islice(loader, 3) for first in batch[0].tolist()]
    for p, first in enumerate(firsts):  # the loader's default order is sequential here
        _, numpy_seed, _ = rng.global_seeds(3, 0, np.array([p])).tolist()[0]
        assert first == np.random.RandomState(numpy_seed).random_sample()


def test_a_state_from_another_mixture_is_refused_not_continued() -> None:
    """The loader's state names the mixture's stream (sources, exact weights, seed, ...), so
    resuming with other weights (the same length) does not silently continue another stream."""
    loader = seekdata.StatefulDataLoader(mix3(), batch_size=4)
    next(iter(loader))
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["dataset"].startswith("Mixture(K=3, length=52, seed=0, ")
    same = seekdata.StatefulDataLoader(mix3(), batch_size=4)
    same.load_state_dict(state)  # the same mixture, built anew: accepted
    sources = mix3().datasets
    other = seekdata.Mixture(sources, [Fraction(1, 3)] * 3)  # same sources and length
    for dataset in (other, mix3(seed=1), torch.utils.data.ConcatDataset(sources)):
        assert len(dataset) == 52
        with pytest.raises(seekdata.StateMismatchError, match=r"dataset is 'Mixture|has none") as e:
            seekdata.StatefulDataLoader(dataset, batch_size=4).load_state_dict(state)
        assert "the same sources, weights and seed" in str(e.value)
    with pytest.warns(UserWarning, match=r"continuing \(strict=False\)"):
        seekdata.StatefulDataLoader(other, batch_size=4).load_state_dict(state, strict=False)
    reweighted = seekdata.StatefulDataLoader(other, batch_size=4).state_dict()
    assert fingerprint(reweighted) != fingerprint(state)  # other weights, another stream
    plain = seekdata.StatefulDataLoader(torch.utils.data.ConcatDataset(sources), batch_size=4)
    with pytest.raises(seekdata.StateMismatchError, match="has none"):
        plain.load_state_dict(state)  # a mixture's state into a plain dataset of its length
    del state["dataset"]  # a mixture's state stripped of its signature: another stream's
    with pytest.raises(seekdata.StateMismatchError, match="has no 'dataset' signature"):
        seekdata.StatefulDataLoader(mix3(), batch_size=4).load_state_dict(state)
    plain_state = plain.state_dict()  # a plain dataset's state into a mixture of its length
    with pytest.raises(seekdata.StateMismatchError, match="has no 'dataset' signature"):
        seekdata.StatefulDataLoader(mix3(), batch_size=4).load_state_dict(plain_state)
