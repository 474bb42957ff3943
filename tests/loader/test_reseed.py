"""reseed_global_rng as a set of generators, and the cheap save/restore of the caller's RNG."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import seekdata
from seekdata import rng
from seekdata._core import globalrng as _globalrng
from seekdata._core import rngkeys as _rngkeys
from tests.helpers.datasets import GlobalRNGAug


def _draws(reseed: object, num_workers: int = 0) -> list[dict[str, torch.Tensor]]:
    loader = seekdata.StatefulDataLoader(
        GlobalRNGAug(23), batch_size=4, shuffle=True, seed=5, num_workers=num_workers,
        reseed_global_rng=reseed, step_rng=False,  # the caller's RNG is the caller's
    )  # fmt: skip
    return list(loader)


def _expected(index: int, epoch: int = 0) -> tuple[torch.Tensor, np.ndarray, float]:
    """What sample ``index`` draws when all three generators are seeded from its key."""
    a, b, c = rng.global_seeds(5, epoch, np.array([index])).tolist()[0]
    torch.default_generator.manual_seed(a)
    np.random.seed(b)
    random.seed(c)
    return torch.rand(3), np.random.rand(2), random.random()


def test_default_draws_are_the_keyed_seeds_of_each_sample() -> None:
    saved = _globalrng.capture()
    for batch in _draws(True):
        for j, index in enumerate(batch["index"].tolist()):
            x, n, p = _expected(index)
            assert torch.equal(batch["x"][j], torch.full((3,), float(index)) + x)
            assert np.array_equal(batch["np"][j].numpy(), n)
            assert batch["py"][j].item() == torch.tensor(p).item()
    _globalrng.restore(saved)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_subset_reseeds_exactly_those_generators(num_workers: int) -> None:
    full = _draws(True)
    part = _draws(("numpy", "torch"), num_workers)  # any order; "random" left alone
    for a, b in zip(full, part, strict=True):
        assert torch.equal(a["index"], b["index"])
        assert torch.equal(a["x"], b["x"]) and torch.equal(a["np"], b["np"])
    # random is not reseeded: the draws continue one stream instead of the keyed seeds
    assert not all(torch.equal(a["py"], b["py"]) for a, b in zip(full, part, strict=True))


def test_reseeding_only_random_leaves_torch_and_numpy_alone() -> None:
    torch.manual_seed(1)
    np.random.seed(1)
    got = _draws(["random"])
    full = _draws(True)
    assert [torch.equal(a["py"], b["py"]) for a, b in zip(got, full, strict=True)] == [True] * 6
    torch.manual_seed(1)
    first = torch.rand(3)  # the first sample drew from the caller's stream, as it was
    assert torch.equal(got[0]["x"][0], torch.full((3,), float(got[0]["index"][0])) + first)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("torch", TypeError, "collection of generator names"),
        (1, TypeError, "collection of generator names"),
        ([1], TypeError, "names must be str"),
        (("torch", "cuda"), ValueError, "must be among"),
    ],
)
def test_reseed_global_rng_is_validated(value: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        seekdata.StatefulDataLoader(GlobalRNGAug(4), reseed_global_rng=value)


def test_the_attribute_keeps_a_bool_and_normalises_names() -> None:
    assert seekdata.StatefulDataLoader(GlobalRNGAug(4)).reseed_global_rng is True
    loader = seekdata.StatefulDataLoader(GlobalRNGAug(4), reseed_global_rng={"random", "torch"})
    assert loader.reseed_global_rng == ("torch", "random")


def _caller_stream() -> tuple[torch.Tensor, float, float, float, float]:
    return (torch.rand(2), np.random.standard_normal(), np.random.rand(),
            random.gauss(0, 1), random.random())  # fmt: skip


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("cached_normal", [True, False])
def test_the_callers_rng_is_restored_around_batches(
    fast: bool, cached_normal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """num_workers=0: the caller's streams continue as if no batch had been loaded, including
    numpy's cached second normal and random's gauss_next (which the byte copy must keep)."""
    if not fast:  # the public getters, as on an interpreter or numpy whose layout differs
        monkeypatch.setattr(_globalrng, "_np_layout_ok", False)
        monkeypatch.setattr(_globalrng, "_py_layout_ok", False)

    def prepare() -> None:
        torch.manual_seed(3)
        np.random.seed(3)
        random.seed(3)
        if cached_normal:  # an odd number of normals: one is cached for the next call
            np.random.standard_normal()
            random.gauss(0, 1)

    prepare()
    expected = _caller_stream()
    prepare()
    for _ in _draws(True):
        pass
    got = _caller_stream()
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


def _np_equal(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


@pytest.mark.parametrize("cached_normal", [True, False])
def test_capture_globals_does_not_move_any_generator(cached_normal: bool) -> None:
    np.random.seed(4)
    random.seed(4)
    if cached_normal:
        np.random.standard_normal()
        random.gauss(0, 1)
    reference = (np.random.get_state(), random.getstate(), torch.get_rng_state())
    saved = _globalrng.capture()
    assert _np_equal(np.random.get_state(), reference[0]) and random.getstate() == reference[1]
    assert torch.equal(torch.get_rng_state(), reference[2])
    np.random.rand(100)
    np.random.standard_normal()
    random.random()
    torch.rand(5)
    _globalrng.restore(saved)
    assert _np_equal(np.random.get_state(), reference[0])
    assert random.getstate() == reference[1] and torch.equal(torch.get_rng_state(), reference[2])


def test_a_random_collate_still_draws_from_the_batch_key() -> None:
    """Skipping the collation reseed is only for collate functions that draw nothing."""

    def collate(samples: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, float]:
        return torch.stack([s["index"] for s in samples]), np.random.rand()

    loader = seekdata.StatefulDataLoader(GlobalRNGAug(8), batch_size=4, seed=5, collate_fn=collate)
    for step, (indices, drawn) in enumerate(loader):
        digest = _rngkeys.batch_counters(0, step, tuple(indices.tolist()))[3]
        np.random.seed(rng.batch_seeds(5, 0, step, digest)[1])
        assert drawn == np.random.rand()


def test_the_loaders_seed_columns_are_global_seeds_bit_for_bit() -> None:
    indices = [0, 1, 7, 2**31, 2**40 + 3, 2**63 - 1, *range(100, 140)]
    for seed, epoch in [(0, 0), (5, 3), (2**40, 2**20)]:
        rows = rng.global_seeds(seed, epoch, np.array(indices, dtype=np.uint64)).tolist()
        assert [
            list(r) for r in zip(*_rngkeys.seed_columns(seed, epoch, indices), strict=True)
        ] == rows


def test_single_samples_restore_only_the_reseeded_generators() -> None:
    """batch_size=None: no collate follows, so the fetch itself restores what it saved."""
    np.random.seed(9)
    torch.manual_seed(9)
    expected_np, expected_torch = np.random.rand(3), torch.rand(3)
    np.random.seed(9)
    torch.manual_seed(9)
    loader = seekdata.StatefulDataLoader(GlobalRNGAug(3), batch_size=None, step_rng=False,
                                         reseed_global_rng=["numpy"])  # fmt: skip
    samples = list(loader)
    assert np.array_equal(np.random.rand(3), expected_np)  # saved and restored around each
    assert not torch.equal(torch.rand(3), expected_torch)  # not reseeded: the samples drew it
    assert [int(s["index"]) for s in samples] == [0, 1, 2]


class _TwoDraws(torch.utils.data.Dataset):
    """Each sample draws twice from sample_rng(), with a nested sample_scope in between."""

    def __len__(self) -> int:
        return 9

    def __getitem__(self, index: int) -> tuple[int, float, float, float]:
        first = seekdata.sample_rng().random()
        with rng.sample_scope(99, 0, 1000 + index, reseed_global_rng=False) as inner:
            nested = inner.random()
        return index, first, seekdata.sample_rng().random(), nested


@pytest.mark.parametrize("reseed", [False, True])
def test_sample_rng_without_reseeding_continues_each_samples_stream(reseed: bool) -> None:
    """Reseeding off, the loader fetches a batch without per-sample writes (_sample.IN_BATCH):
    sample_rng() must still key each sample, continue its stream within the sample, and
    survive a nested scope — also for a repeated index in one batch."""
    g = torch.Generator().manual_seed(3)
    sampler = torch.utils.data.RandomSampler(range(9), True, num_samples=40, generator=g)
    loader = seekdata.StatefulDataLoader(
        _TwoDraws(), batch_size=8, sampler=sampler, seed=4, reseed_global_rng=reseed,
        collate_fn=list,
    )  # fmt: skip
    seen = [sample for batch in loader for sample in batch]
    indices = [s[0] for s in seen]
    assert len(set(indices)) < len(indices)  # repeats within the stream (replacement)
    for index, first, second, nested in seen:
        g = seekdata.sample_generator(4, 0, index)
        assert (first, second) == (g.random(), g.random())
        assert nested == seekdata.sample_generator(99, 0, 1000 + index).random()
    with pytest.raises(RuntimeError, match="outside one"):
        seekdata.sample_rng()


class _StopsAt(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        if index == 5:
            raise StopIteration
        return index


@pytest.mark.parametrize("reseed", [False, True])
def test_a_stopiteration_from_getitem_is_an_error_not_a_short_batch(reseed: bool) -> None:
    loader = seekdata.StatefulDataLoader(_StopsAt(), batch_size=8, reseed_global_rng=reseed)
    with pytest.raises(RuntimeError, match=r"StopIteration|__getitem__\(5\)"):
        next(iter(loader))
