"""Token windows cut into shards (``TokenWindows(shard_windows=)``): the shard-local order.

A shard is ``shard_windows`` consecutive windows, the last one shorter, so ``order="shards"``
reads a few contiguous byte ranges at a time (streamed, from object storage). The shards
change no window's tokens; they decide the order, so the signature records them. A corpus
that grew by appended files fills up its last shard: the growth is exact, and the epochs
before it keep the shards they had.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch

import seekdata
from seekdata import Growth, StateMismatchError
from seekdata.testing import assert_exact_resume
from seekdata.tokens import PackedDocuments, TokenWindows
from tests.sources.tokens.test_tokens import documents, write


def corpus(tmp_path: pathlib.Path, count: int = 4) -> list[str]:
    """``count`` token files of different sizes, in order (the corpus of tests/core/test_growth)."""
    lengths = [5, 9, 3, 12, 7, 4, 11, 6, 8, 10, 5, 13][: 3 * count]
    return write(tmp_path, documents(lengths), [3 * k for k in range(1, count)])


def sharded_loader(ds: TokenWindows, num_workers: int = 0, **kw) -> seekdata.StatefulDataLoader:
    sampler = seekdata.DistributedSampler(ds, 1, 0, order="shards", seed=4)
    return seekdata.StatefulDataLoader(
        ds, batch_size=2, sampler=sampler, num_workers=num_workers, **kw
    )


def windows_of(batches) -> list[tuple[int, ...]]:
    return [tuple(x) for b in batches for x in b["input_ids"].tolist()]


def test_shard_windows_cut_the_windows_into_shards(tmp_path: pathlib.Path) -> None:
    files = corpus(tmp_path)
    ds = TokenWindows(files, 4, shard_windows=5)
    assert len(ds) == 23 and ds.shard_sizes == [5, 5, 5, 5, 3]
    assert ds.shard_sizes_of_first(12) == [5, 5, 2] and ds.shard_sizes_of_first(10) == [5, 5]
    assert TokenWindows(files, 4, shard_windows=100).shard_sizes == [23]
    plain = TokenWindows(files, 4)
    assert not hasattr(plain, "shard_sizes")  # not sharded: nothing changes for it
    for bad, kind in ((0, ValueError), (-3, ValueError), (True, TypeError), ("8", TypeError)):
        with pytest.raises(kind, match="shard_windows"):
            TokenWindows(files, 4, shard_windows=bad)


def test_without_shard_windows_the_signature_is_what_it_was(tmp_path: pathlib.Path) -> None:
    """Checkpoints saved before shard_windows existed still load: the signature of a corpus
    without it is unchanged (pinned); with it, the shards are part of it."""
    files = corpus(tmp_path)
    assert TokenWindows(files, 4).stream_signature == (
        "TokenWindows(seq_len=4, windows=23, 44767e883340ed2a)"
    )
    assert TokenWindows(files, 4, eos_id=1).signature_of_first(10) == (
        "TokenWindows(seq_len=4, windows=10, f65d4178037f3e4a)"
    )
    five, six = TokenWindows(files, 4, shard_windows=5), TokenWindows(files, 4, shard_windows=6)
    signatures = {
        five.stream_signature,
        six.stream_signature,
        TokenWindows(files, 4).stream_signature,
    }
    assert len(signatures) == 3


def test_order_shards_needs_shard_windows_and_says_so(tmp_path: pathlib.Path) -> None:
    ds = TokenWindows(corpus(tmp_path), 4)
    with pytest.raises(ValueError, match=r"TokenWindows\(\.\.\., shard_windows=4096\)"):
        seekdata.DistributedSampler(ds, 1, 0, order="shards")


def test_the_shard_local_order_reads_a_few_shards_at_a_time(tmp_path: pathlib.Path) -> None:
    ds = TokenWindows(corpus(tmp_path), 4, shard_windows=3)
    sampler = seekdata.DistributedSampler(ds, 1, 0, order=seekdata.order.Shards(window=2), seed=1)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        order = list(sampler)
        assert sorted(order) == list(range(len(ds)))
        left = dict.fromkeys(range(len(ds.shard_sizes)), 3)
        left[len(left) - 1] = 2  # the last shard holds 23 - 7·3 windows
        started: set[int] = set()
        for i in order:  # at most 2 shards are being read at any time
            started.add(i // 3)
            left[i // 3] -= 1
            assert len([k for k in started if left[k]]) <= 2


def test_a_sharded_corpus_resumes_exactly_at_every_step_from_two_workers_to_none(
    tmp_path: pathlib.Path,
) -> None:
    ds = TokenWindows(corpus(tmp_path), 4, eos_id=1, shard_windows=4)

    def make(num_workers: int = 2) -> seekdata.StatefulDataLoader:
        return sharded_loader(ds, num_workers=num_workers, seed=4)

    assert assert_exact_resume(make, epochs=2, resume_kwargs={"num_workers": 0}) >= 22


def test_a_state_over_other_shards_is_refused(tmp_path: pathlib.Path) -> None:
    files = corpus(tmp_path)
    loader = sharded_loader(TokenWindows(files, 4, shard_windows=5))
    next(iter(loader))
    state = json.loads(json.dumps(loader.state_dict()))
    other = sharded_loader(TokenWindows(files, 4, shard_windows=6))
    before = other.state_dict()
    with pytest.raises(StateMismatchError):
        other.load_state_dict(state)
    assert other.state_dict() == before
    same = sharded_loader(TokenWindows(files, 4, shard_windows=5))
    same.load_state_dict(state)


@pytest.mark.parametrize("steps", [0, 1, 3, 5, 8])  # 8 batches an epoch on 16 windows: its end
def test_appended_files_fill_the_last_shard_and_the_growth_is_exact(
    tmp_path: pathlib.Path, steps: int
) -> None:
    """16 windows in shards of 5 (the last holds 1); files appended: 23 windows, the last old
    shard now full. The growth epoch serves every window of the grown corpus once, after what
    was consumed; a checkpoint taken after the growth resumes exactly; a mixture grows too."""
    files = corpus(tmp_path)
    old, new = TokenWindows(files[:3], 4, shard_windows=5), TokenWindows(files, 4, shard_windows=5)
    assert len(old) == 16 and old.shard_sizes == [5, 5, 5, 1] and new.shard_sizes[3] == 5
    assert new.signature_of_first(len(old)) == old.stream_signature
    first = sharded_loader(old)
    it = iter(first)
    served = windows_of(next(it) for _ in range(steps))
    state = json.loads(json.dumps(first.state_dict()))

    grown = sharded_loader(new)
    grown.load_state_dict(state, grow=True)
    if steps == 8:  # saved after the epoch's last batch: its (empty) rest comes first
        assert windows_of(grown) == []
    it = iter(grown)
    rest = windows_of([next(it) for _ in range(3)])
    middle = json.loads(json.dumps(grown.state_dict()))
    rest += windows_of(it)
    every = [tuple(new[i]["input_ids"].tolist()) for i in range(len(new))]
    if steps < 8:
        assert sorted(served + rest) == sorted(every)  # the growth epoch: each window once
    else:  # the old epoch was used up: the new windows join the next one, whole
        assert sorted(rest) == sorted(every)

    again = sharded_loader(new)  # a checkpoint after the growth records it
    again.load_state_dict(middle)
    assert windows_of(again) == rest[6:]
    assert windows_of(again) == windows_of(grown)  # and the epochs after: the grown shards

    mix = seekdata.Mixture({"tw": old, "more": range(10)}, [1, 1], seed=2, order="shards")
    at = 4 + 2 * steps
    changed = mix.changed(at, [1, 1], grown={"tw": new})

    def item(m: seekdata.Mixture, p: int) -> object:
        x = m[p]
        return tuple(x["input_ids"].tolist()) if isinstance(x, dict) else x

    before = [item(mix, p) for p in range(at)]
    assert [item(changed, p) for p in range(at)] == before  # the stream served is kept
    after = [item(changed, p) for p in range(at, len(changed))]
    assert set(before).isdisjoint(x for x in after if isinstance(x, tuple))


def test_a_grown_declaration_that_does_not_add_up_is_refused(tmp_path: pathlib.Path) -> None:
    """shard_sizes_of_first is checked, never trusted: a dataset whose declaration does not add
    up to the length is refused at the growth."""
    files = corpus(tmp_path)

    class Lying(TokenWindows):
        def shard_sizes_of_first(self, n: int) -> list[int]:
            return [n + 1]

    new = Lying(files, 4, shard_windows=5)
    with pytest.raises(StateMismatchError, match=r"shard_sizes_of_first\(16\) adds up to 17"):
        seekdata.DistributedSampler(new, 1, 0, order="shards", grown=[Growth(0, 2, 16)])


def test_shards_through_a_transform_wrapper(tmp_path: pathlib.Path) -> None:
    ds = TokenWindows(corpus(tmp_path), 4, shard_windows=5)
    wrapped = seekdata.transforms.TransformedDataset(ds, lambda s, rng: s)
    assert wrapped.shard_sizes == ds.shard_sizes
    assert wrapped.shard_sizes_of_first(7) == [5, 2]
    assert sorted(seekdata.DistributedSampler(wrapped, 1, 0, order="shards")) == list(range(23))
    assert np.array_equal(wrapped.get(3, seed=0, epoch=0)["input_ids"], ds[3]["input_ids"])


# -- PackedDocuments(sharded=True): the packing's blocks as shards ---------------------------


def test_packed_documents_without_sharded_keep_their_signature(tmp_path: pathlib.Path) -> None:
    files = corpus(tmp_path)
    plain = PackedDocuments(files, 8, eos_id=1)
    assert plain.legacy_signature() == "PackedDocuments(seq_len=8, sequences=12, a93639c3e8da3b0e)"
    assert plain.stream_signature == "PackedDocuments(seq_len=8, sequences=12, d2:a55168137e9d6388)"
    assert not hasattr(plain, "shard_sizes")
    sharded = PackedDocuments(files, 8, eos_id=1, sharded=True)
    assert sharded.shard_sizes == [12] and sharded.stream_signature != plain.stream_signature
    with pytest.raises(TypeError, match="sharded"):
        PackedDocuments(files, 8, eos_id=1, sharded=1)


def test_packed_blocks_are_shards_and_resume_exactly(tmp_path: pathlib.Path) -> None:
    """Three packing blocks (65,536 documents each, the last shorter): a shard-local epoch is
    a permutation that reads one block at a time, and resumes exactly."""
    gen = np.random.default_rng(5)
    lengths = gen.integers(2, 5, 2 * 65_536 + 9_000)
    tokens = gen.integers(2, 500, int(lengths.sum()), dtype=np.uint16)
    tokens[np.cumsum(lengths) - 1] = 1  # each document ends with eos 1
    tokens[: len(tokens) // 2].tofile(tmp_path / "a.bin")
    tokens[len(tokens) // 2 :].tofile(tmp_path / "b.bin")
    files = [str(tmp_path / "a.bin"), str(tmp_path / "b.bin")]
    ds = PackedDocuments(files, 64, eos_id=1, sharded=True)
    sizes = ds.shard_sizes
    assert len(sizes) == 3 and sum(sizes) == len(ds)
    plain = PackedDocuments(files, 64, eos_id=1)
    assert all(
        torch.equal(ds[i]["input_ids"], plain[i]["input_ids"]) for i in (0, 999, len(ds) - 1)
    )
    order = seekdata.order.Shards(window=1)
    sampler = seekdata.DistributedSampler(ds, 1, 0, order=order, seed=2)
    seen = list(sampler)
    assert sorted(seen) == list(range(len(ds)))
    ends = np.cumsum(sizes)
    blocks = np.searchsorted(ends, seen, side="right")
    assert (np.diff(blocks) != 0).sum() == 2  # one block after another

    def make(num_workers: int = 0) -> seekdata.StatefulDataLoader:
        s = seekdata.DistributedSampler(ds, 1, 0, order="shards", seed=2)
        return seekdata.StatefulDataLoader(
            ds, batch_size=512, sampler=s, seed=2, num_workers=num_workers
        )

    n = len(make())
    assert assert_exact_resume(make, stop_at=(0, 1, n // 2, n - 1)) == 4
