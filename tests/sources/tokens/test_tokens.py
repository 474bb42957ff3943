"""seekdata.tokens: token windows and packed documents over flat token files.

Invariants (Hypothesis where it fits): every document once per pass, contiguous and unsplit
unless longer than seq_len; labels never cross a document; windows hold the files' tokens in
order. Resume: bit-identical at every step, 2 -> 0 workers, and on another world size with the
same global batch (real gloo processes). Corrupt inputs: clear errors naming the file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seekdata
from seekdata.sources.tokens import index as _index
from seekdata.sources.tokens import packing as _packing
from seekdata.testing import assert_exact_resume
from seekdata.tokens import IGNORE_INDEX, PackedDocuments, TokenWindows
from tests.helpers.paths import ROOT, SCRIPTS
from tests.helpers.ranks import run_ranks

EOS, PAD = 1, 0


def documents(lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    """Documents of these lengths: ids in [2, 1000), each ending with EOS."""
    gen = np.random.default_rng(seed)
    return [np.append(gen.integers(2, 1000, n - 1), EOS).astype(np.uint16) for n in lengths]


def write(directory: pathlib.Path, docs: list[np.ndarray], splits: list[int]) -> list[str]:
    """The documents' tokens written as raw uint16 files, cut before each document in ``splits``."""
    names, cuts = [], [0, *splits, len(docs)]
    for k, (a, b) in enumerate(itertools.pairwise(cuts)):
        name = str(directory / f"part-{k:02d}.bin")
        np.concatenate(docs[a:b]).tofile(name)
        names.append(name)
    return names


def check_pass(ds: PackedDocuments, lengths: list[int]) -> None:
    """One pass over ``ds`` holds every document once, each as the packing promises."""
    L = ds.seq_len
    concat = np.concatenate([ds._reader.tokens(k) for k in range(len(ds.files))]).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    pieces: dict[int, list[tuple[int, int]]] = {d: [] for d in range(len(lengths))}
    for i in range(len(ds)):
        item, segments = ds[i], ds.locate(i)
        ids, labels, pos = (item[k].numpy() for k in ("input_ids", "labels", "position_ids"))
        assert all(len(v) == L for v in (ids, labels, pos))
        at = 0
        for doc, a, b in segments:
            n, end = b - a, int(starts[doc + 1])
            assert starts[doc] <= a < b <= end
            pieces[doc].append((a, b))
            assert (ids[at : at + n] == concat[a:b]).all()
            assert (pos[at : at + n] == np.arange(n)).all()  # restarts at each document
            assert (labels[at : at + n - 1] == concat[a + 1 : b]).all()
            assert labels[at + n - 1] == (IGNORE_INDEX if b == end else concat[b])  # same doc
            at += n
        assert (ids[at:] == PAD).all() and (labels[at:] == IGNORE_INDEX).all()
        assert (pos[at:] == np.arange(L - at)).all()
        if len(segments) > 1 or at < L:  # a packed sequence: documents (or a remainder) whole
            assert all(b == starts[d + 1] and b - a < L for d, a, b in segments)
    for doc, got in pieces.items():
        n = lengths[doc]
        want = [(int(starts[doc]) + k, int(starts[doc]) + min(n, k + L)) for k in range(0, n, L)]
        assert sorted(got) == want, (doc, n)  # once, contiguous; cut in L only when longer


def segments(ds: PackedDocuments) -> set[tuple[int, int, int]]:
    return {s for i in range(len(ds)) for s in ds.locate(i)}


# --- PackedDocuments: the invariants ------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=60),
    seq_len=st.integers(1, 24),
    data=st.data(),
)
def test_every_document_appears_once_whole_unless_longer_than_seq_len(
    lengths: list[int], seq_len: int, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(1, len(lengths)), max_size=3))
    splits = sorted({c for c in cuts if c < len(lengths)})  # files cut between documents
    with tempfile.TemporaryDirectory() as tmp:
        names = write(pathlib.Path(tmp), documents(lengths), splits)
        ds = PackedDocuments(names, seq_len, eos_id=EOS, pad_id=PAD)
        assert ds.num_documents == len(lengths) and ds.num_tokens == sum(lengths)
        check_pass(ds, lengths)


def test_the_packing_depends_on_the_documents_lengths_only(tmp_path: pathlib.Path) -> None:
    """One file or four (cut at documents), indexed or given: the same sequences. The signature
    is a digest of the files' index digests (built from a manifest without reading an index),
    so it tells the cuts apart; the form before the manifest, a digest of every boundary,
    does not."""
    lengths = np.random.default_rng(1).integers(1, 60, 300).tolist()
    docs = documents(lengths)
    (tmp_path / "one").mkdir()
    (tmp_path / "four").mkdir()
    one = PackedDocuments(write(tmp_path / "one", docs, []), 32, eos_id=EOS)
    four = PackedDocuments(write(tmp_path / "four", docs, [50, 120, 121]), 32, eos_id=EOS)
    given_ends = PackedDocuments(one.files, 32, eos_id=None, document_ends=np.cumsum(lengths))
    assert len(one) == len(four) == len(given_ends)
    for i in range(len(one)):
        assert one.locate(i) == four.locate(i) == given_ends.locate(i)
        for key, value in one[i].items():
            assert torch.equal(value, four[i][key]) and torch.equal(value, given_ends[i][key])
    signatures = {ds.stream_signature for ds in (one, four, given_ends)}
    assert len(signatures) == 3 and all(", d2:" in s for s in signatures)
    assert one.legacy_signature() == four.legacy_signature() == given_ends.legacy_signature()
    assert one.utilization > 0.95


def test_packing_across_blocks_keeps_every_document_once(tmp_path: pathlib.Path) -> None:
    n = _packing.BLOCK + 4_000  # two blocks
    lengths = np.random.default_rng(2).integers(1, 9, n)
    lengths[::997] = 37  # some documents longer than seq_len
    names = write(tmp_path, documents(lengths.tolist()), [])
    ds = PackedDocuments(names, 16, eos_id=EOS)
    assert ds._packing.blocks == 2
    seen = np.zeros(n, dtype=np.int64)
    covered = np.zeros(n, dtype=np.int64)
    for i in range(len(ds)):
        for doc, a, b in ds.locate(i):
            seen[doc] += 1
            covered[doc] += b - a
    assert (covered == lengths).all()
    assert (seen == -(-lengths // 16)).all()  # one piece each, three for the long ones
    check = [0, len(ds) // 2, len(ds) - 1]
    assert all(len(ds[i]["input_ids"]) == 16 for i in check)


def pinned_corpus(directory: pathlib.Path) -> list[str]:
    """Three packing blocks of documents of 1..39 tokens, one in 1013 of 33..199 (longer than
    seq_len 32), in four files: the first block spans two, the second three, and a file ends
    inside a document (its tail is a document, the next file starts with the rest)."""
    gen = np.random.default_rng(37)
    n = 2 * _packing.BLOCK + 5_000
    lengths = gen.integers(1, 40, n)
    lengths[::1013] = gen.integers(33, 200, len(lengths[::1013]))
    tokens = gen.integers(2, 1000, int(lengths.sum())).astype(np.uint16)
    ends = np.cumsum(lengths)
    tokens[ends - 1] = EOS
    cuts = [0, int(ends[40_000]), int(ends[70_000]) - 3, int(ends[70_010]), len(tokens)]
    names = []
    for k, (a, b) in enumerate(itertools.pairwise(cuts)):
        names.append(str(directory / f"part-{k}.bin"))
        tokens[a:b].tofile(names[-1])
    return names


def test_lazy_packing_gives_the_eager_packings_sequences_bit_for_bit(
    tmp_path: pathlib.Path,
) -> None:
    """Pinned from the release that packed the whole corpus at construction: every sequence's
    documents, and the items of one sequence in 997, digested. Read backwards (blocks packed
    in another order, evicted and packed again), the same."""
    ds = PackedDocuments(pinned_corpus(tmp_path), 32, eos_id=EOS, pad_id=PAD)
    assert (ds.num_documents, len(ds), ds._packing.blocks) == (136_073, 85_495, 3)

    h = hashlib.blake2b(digest_size=16)
    for i in range(len(ds)):
        h.update(np.asarray(ds.locate(i), dtype="<i8").tobytes())
    for i in range(0, len(ds), 997):
        for key in ("input_ids", "labels", "position_ids"):
            h.update(ds[i][key].numpy().astype("<i8").tobytes())
    assert h.hexdigest() == "0583165c63686efddd83886dfaa54a96"
    assert ds.legacy_signature() == "PackedDocuments(seq_len=32, sequences=85495, 9cb9820378ec02e7)"
    fresh = PackedDocuments(ds.files, 32, eos_id=EOS, pad_id=PAD)
    for i in range(len(ds) - 1, -1, -4099):
        assert fresh.locate(i) == ds.locate(i)
    assert len(fresh._packing._cache) <= _packing.CACHED_BLOCKS
    assert fresh.nbytes < 4 * 1024 * 1024  # no boundary of the whole corpus is held


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=300), st.integers(64, 80))
def test_best_fit_decreasing_packs_as_item_by_item_best_fit_does(
    lengths: list[int], capacity: int
) -> None:
    sizes = np.array(lengths, dtype=np.int64)
    bin_of, bins = _packing.best_fit_decreasing(sizes, capacity)
    load = np.bincount(bin_of, weights=sizes, minlength=bins).astype(np.int64)
    assert len(load) == bins and (load <= capacity).all() and (load > 0).all()
    loads: list[int] = []  # the textbook: one item at a time, into the fullest bin it fits
    for size in sorted(lengths, reverse=True):
        fits = [k for k, used in enumerate(loads) if used + size <= capacity]
        if fits:
            loads[max(fits, key=lambda k: loads[k])] += size
        else:
            loads.append(size)
    assert sorted(load.tolist()) == sorted(loads)  # equal rooms are equally good: same loads
    if bins > 1:  # a bin is opened only when nothing fits: no two bins fit in one
        assert np.sort(load)[:2].sum() > capacity


def test_items_are_the_same_read_any_way(tmp_path: pathlib.Path) -> None:
    names = write(tmp_path, documents([5, 40, 3, 17, 9]), [2])
    ds = PackedDocuments(names, 16, eos_id=EOS, pad_id=7)
    copy = pickle.loads(pickle.dumps(ds))  # a spawned worker's copy maps its own files
    for i in range(-len(ds), len(ds)):
        for key, value in ds[i].items():
            assert torch.equal(value, copy[i][key]) and value.dtype == torch.int64
    assert any((ds[i]["input_ids"] == 7).any() for i in range(len(ds)))
    with pytest.raises(IndexError, match=r"in \[0, "):
        ds[len(ds)]
    with pytest.raises(TypeError, match="index must be an int"):
        ds[0:2]  # type: ignore[index]


# --- TokenWindows -----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 25), min_size=1, max_size=6),
    seq_len=st.integers(1, 12),
    eos=st.booleans(),
)
def test_windows_hold_the_files_tokens_in_order(sizes: list[int], seq_len: int, eos: bool) -> None:
    total = sum(sizes)
    concat = (np.arange(total) * 7919 % 50).astype(np.uint16)  # 0..49, EOS among them
    if total < seq_len + 1:
        return
    with tempfile.TemporaryDirectory() as tmp:
        names, at = [], 0
        for k, n in enumerate(sizes):
            names.append(os.path.join(tmp, f"{k}.bin"))
            concat[at : at + n].tofile(names[-1])
            at += n
        ds = TokenWindows(names, seq_len, eos_id=EOS if eos else None)
        assert len(ds) == (total - 1) // seq_len
        for i in range(len(ds)):
            item = ds[i]
            window = concat[i * seq_len : (i + 1) * seq_len + 1].astype(np.int64)
            assert item["input_ids"].tolist() == window[:-1].tolist()
            assert item["labels"].tolist() == window[1:].tolist()
            if eos:
                pos, p = [], 0
                for t in window[:-1]:
                    pos.append(p)
                    p = 0 if t == EOS else p + 1
                assert item["position_ids"].tolist() == pos
            else:
                assert "position_ids" not in item


def test_npy_files_with_and_without_a_header(tmp_path: pathlib.Path) -> None:
    tokens = np.arange(100, dtype=np.uint32)
    np.save(tmp_path / "a.npy", tokens[:60])  # a header: np.save
    np.memmap(tmp_path / "b.npy", np.uint32, "w+", shape=(40,))[:] = tokens[60:]  # none: OLMo
    ds = TokenWindows([tmp_path / "a.npy", tmp_path / "b.npy"], 9, dtype=np.uint32)
    got = torch.cat([ds[i]["input_ids"] for i in range(len(ds))])
    assert got.tolist() == list(range(99))[: len(got)] and len(ds) == 11
    with pytest.raises(ValueError, match=r"a\.npy is a \.npy array of uint32, but dtype=uint16"):
        TokenWindows(tmp_path / "a.npy", 9)
    np.save(tmp_path / "f.npy", np.asfortranarray(np.ones((4, 5), np.uint16)))
    with pytest.raises(ValueError, match=r"f\.npy is a Fortran-ordered 2-d array"):
        TokenWindows(tmp_path / "f.npy", 4)
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-8])
    with pytest.raises(ValueError, match=r"t\.npy: its \.npy header declares shape"):
        TokenWindows(tmp_path / "t.npy", 4, dtype=np.uint32)


def test_resume_is_exact_at_every_step_from_two_workers_to_none(tmp_path: pathlib.Path) -> None:
    lengths = np.random.default_rng(3).integers(1, 30, 60).tolist()
    names = write(tmp_path, documents(lengths), [25])
    for ds in (PackedDocuments(names, 12, eos_id=EOS), TokenWindows(names, 12, eos_id=EOS)):

        def make(num_workers: int = 2, ds: object = ds) -> seekdata.StatefulDataLoader:
            return seekdata.StatefulDataLoader(
                ds, batch_size=8, shuffle=True, seed=5, num_workers=num_workers
            )

        assert len(make()) >= 8
        assert assert_exact_resume(make, epochs=2, resume_kwargs={"num_workers": 0}) > 16


def test_a_mixture_of_two_token_sources_resumes_exactly(tmp_path: pathlib.Path) -> None:
    docs = documents(np.random.default_rng(4).integers(1, 30, 80).tolist())
    names = write(tmp_path, docs, [40])
    mix = seekdata.Mixture(
        [PackedDocuments(names[0], 8, eos_id=EOS), TokenWindows(names[1], 8, eos_id=EOS)],
        [0.75, 0.25],
        length=40,
    )

    def make(num_workers: int = 0) -> seekdata.StatefulDataLoader:
        return seekdata.StatefulDataLoader(mix, batch_size=8, num_workers=num_workers)

    assert assert_exact_resume(make, epochs=2, stop_at=[0, 1, 4, 5, 7, 10]) == 6


def test_a_state_over_another_packing_is_refused(tmp_path: pathlib.Path) -> None:
    names = write(tmp_path, documents([5, 9, 3, 12, 7, 4, 6]), [])
    a = PackedDocuments(names, 8, eos_id=EOS, pad_id=0)
    b = PackedDocuments(names, 8, eos_id=EOS, pad_id=3)  # the same length, other items
    assert len(a) == len(b) and a.stream_signature != b.stream_signature
    state = seekdata.StatefulDataLoader(a, batch_size=2).state_dict()
    assert state["dataset"] == a.stream_signature
    seekdata.StatefulDataLoader(a, batch_size=2).load_state_dict(state)
    with pytest.raises(seekdata.StateMismatchError, match="dataset"):
        seekdata.StatefulDataLoader(b, batch_size=2).load_state_dict(state)


def test_a_checkpoint_signed_before_the_manifest_still_resumes(tmp_path: pathlib.Path) -> None:
    """A state written by the release that signed every boundary (the old form) is accepted
    by computing that form, once, with a warning that says why it is slow; another old-form
    signature is still refused."""
    names = write(tmp_path, documents(list(range(1, 60))), [20])
    ds = PackedDocuments(names, 16, eos_id=EOS)
    loader = seekdata.StatefulDataLoader(ds, batch_size=4, seed=3)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    want = next(it)
    old = {**state, "dataset": ds.legacy_signature()}
    assert ", d2:" in state["dataset"] and ", d2:" not in old["dataset"]
    fresh = seekdata.StatefulDataLoader(
        PackedDocuments(names, 16, eos_id=EOS), batch_size=4, seed=3
    )
    with pytest.warns(UserWarning, match="reads the index of every one of the 2 files once"):
        fresh.load_state_dict(old)
    got = next(iter(fresh))
    assert all(torch.equal(got[k], want[k]) for k in want)
    other = {**state, "dataset": old["dataset"][:-5] + "00000)"}
    with pytest.raises(seekdata.StateMismatchError), pytest.warns(UserWarning):
        fresh.load_state_dict(other)


def test_token_files_in_another_order_are_another_corpus(tmp_path: pathlib.Path) -> None:
    """An unsorted glob on a new node: the same files in another order hold other items at the
    same indices, so a state saved over one order is refused over the other, and the loader is
    left as it was. Equal-size files too (their first tokens are signed)."""
    docs = documents([5, 9, 3, 12, 7, 4, 6, 8, 10, 5, 11, 3])
    (tmp_path / "a").mkdir()
    names = write(tmp_path / "a", docs, [3, 6, 9])
    same_size = [str(tmp_path / f"eq-{k}.bin") for k in range(3)]
    for k, name in enumerate(same_size):
        np.concatenate(docs[4 * k : 4 * k + 4])[:20].tofile(name)
    shuffled = [names[2], names[0], names[3], names[1]]
    cases = [
        (PackedDocuments(names, 8, eos_id=EOS), PackedDocuments(shuffled, 8, eos_id=EOS)),
        (TokenWindows(names, 6), TokenWindows(shuffled, 6)),
        (TokenWindows(same_size, 6), TokenWindows(same_size[::-1], 6)),
    ]
    for saved, other in cases:
        assert len(saved) == len(other) and saved.stream_signature != other.stream_signature
        first = seekdata.StatefulDataLoader(saved, batch_size=2, shuffle=True, seed=1)
        it = iter(first)
        next(it)
        state = json.loads(json.dumps(first.state_dict()))
        assert state["dataset"] == saved.stream_signature
        again = seekdata.StatefulDataLoader(saved, batch_size=2, shuffle=True, seed=1)
        again.load_state_dict(state)  # the same files in the same order: accepted
        loader = seekdata.StatefulDataLoader(other, batch_size=2, shuffle=True, seed=1)
        before = loader.state_dict()
        with pytest.raises(seekdata.StateMismatchError, match="the same data in the same order"):
            loader.load_state_dict(state)
        assert loader.state_dict() == before


def test_a_packed_seq_len_the_packer_cannot_hold_is_refused(tmp_path: pathlib.Path) -> None:
    names = write(tmp_path, documents([5, 9, 3]), [])
    with pytest.raises(ValueError, match="seq_len must be at most 16,777,216"):
        PackedDocuments(names, 10**12, eos_id=EOS)
    assert len(PackedDocuments(names, 100, eos_id=EOS)[0]["position_ids"]) == 100


def test_token_files_in_another_order_inside_a_mixture_are_refused(tmp_path: pathlib.Path) -> None:
    """The mixture's own signature (sizes, weights, seed) cannot see a source rebuilt on its
    files in another order: each source's signature is recorded beside it, for loader and
    sampler states alike, and a mismatch is refused, leaving the loader as it was."""
    docs = documents([5, 9, 3, 12, 7, 4, 6, 8, 10, 5, 11, 3])
    names = write(tmp_path, docs, [3, 6, 9])
    shuffled = [names[2], names[0], names[3], names[1]]

    def mixture(files: list[str], pad: int = PAD) -> seekdata.Mixture:
        other = list(range(30))
        packed = PackedDocuments(files, 8, eos_id=EOS, pad_id=pad)
        return seekdata.Mixture({"web": other, "code": packed}, weights=[1, 1], length=40)

    saved = mixture(names)
    first = seekdata.StatefulDataLoader(saved, batch_size=2, seed=1, collate_fn=list)
    it = iter(first)
    next(it)
    sampler = seekdata.DistributedSampler(saved, 1, 0, shuffle=False, seed=1)
    sampler_state = json.loads(json.dumps(sampler.state_dict()))
    for state in (json.loads(json.dumps(first.state_dict())), sampler_state):
        assert state["source"]["sources"] == [
            [1, len(saved.datasets[1]), saved.datasets[1].stream_signature]
        ]
        again = seekdata.StatefulDataLoader(mixture(names), batch_size=2, seed=1, collate_fn=list)
        again.load_state_dict(state)  # the same files in the same order: accepted
        for other in (mixture(shuffled), mixture(names, pad=7)):
            loader = seekdata.StatefulDataLoader(other, batch_size=2, seed=1, collate_fn=list)
            before = loader.state_dict()
            with pytest.raises(seekdata.StateMismatchError, match="source 'code' is not the data"):
                loader.load_state_dict(state)
            assert loader.state_dict() == before
    with pytest.raises(seekdata.StateMismatchError, match="source 'code'"):
        seekdata.DistributedSampler(mixture(shuffled), 1, 0, shuffle=False, seed=1).load_state_dict(
            sampler_state
        )


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "world", "batch"), [("packed", 4, 2), ("mixture", 1, 8)])
def test_a_world_size_change_with_the_same_global_batch_repeats_every_batch(
    kind: str, world: int, batch: int, tmp_path: pathlib.Path
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lengths = np.random.default_rng(5).integers(1, 40, 40).tolist()
    while True:  # whole global batches of 8: every rank count pads an epoch the same way
        names = write(corpus, documents(lengths), [25])
        packed = PackedDocuments(names, 16, eos_id=EOS, rebuild_index=True)  # before the ranks
        if len(packed) % 8 == 0:
            break
        lengths.append(16)  # one more sequence: a document of seq_len tokens
    assert len(packed) // 8 < 10  # the run crosses an epoch end
    steps, save_at = 10, 3

    def run(world: int, mode: str, batch: int, steps: int, name: str) -> list:
        out = tmp_path / f"{name}.json"
        args = [kind, mode, str(batch), str(steps), str(out), str(tmp_path / "ckpt.pt")]
        run_ranks(SCRIPTS / "_tokens_worker.py", world, [*args, str(corpus)])
        return json.loads(out.read_text())

    full = run(2, "full", 4, steps, "full")
    head = run(2, "save", 4, save_at, "head")
    rest = run(world, "resume", batch, steps, "rest")
    assert head == full[:save_at]
    assert [r["step"] for r in rest] == list(range(save_at, steps))
    assert rest == full[save_at:]  # every row of every later global batch, bit for bit


# --- corrupt inputs: clear errors naming the file --------------------------------------------


def test_corrupt_token_files_are_refused_naming_the_file(tmp_path: pathlib.Path) -> None:
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02")  # 3 bytes of uint16
    with pytest.raises(ValueError, match=r"odd\.bin: 3 bytes .* not a whole number of uint16"):
        TokenWindows(odd, 1)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.bin holds no tokens"):
        PackedDocuments([empty], 4, eos_id=EOS)
    with pytest.raises(ValueError, match=r"missing\.bin does not exist"):
        TokenWindows(tmp_path / "missing.bin", 4)
    good = write(tmp_path, documents([4, 6]), [])
    for bad in (0, -3):
        with pytest.raises(ValueError, match="seq_len must be >= 1"):
            TokenWindows(good, bad)
    with pytest.raises(TypeError, match="seq_len must be an int"):
        PackedDocuments(good, 2.5, eos_id=EOS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fewer than seq_len"):
        TokenWindows(good, 10)
    with pytest.raises(TypeError, match="dtype must be an integer dtype"):
        TokenWindows(good, 2, dtype=np.float32)
    with pytest.raises(ValueError, match="eos_id 70000 cannot occur in uint16"):
        PackedDocuments(good, 2, eos_id=70_000)
    with pytest.raises(ValueError, match="exactly one of them"):
        PackedDocuments(good, 2, eos_id=EOS, document_ends=[4, 10])
    with pytest.raises(ValueError, match=r"must increase strictly .* to the files' 10 tokens"):
        PackedDocuments(good, 2, eos_id=None, document_ends=[4, 9])


def test_token_ids_outside_the_vocabulary_are_refused_naming_the_file(
    tmp_path: pathlib.Path,
) -> None:
    docs = documents([5, 5, 5])
    docs[2][1] = 1500  # token 11 of the file
    names = write(tmp_path, docs, [])
    with pytest.raises(ValueError, match=r"part-00\.bin: token 11 of the file is id 1500, outside"):
        PackedDocuments(names, 4, eos_id=EOS, vocab_size=1000)  # at build, from the index
    windows = TokenWindows(names, 4, vocab_size=1000)
    windows[0]  # tokens 0..4: in the vocabulary
    with pytest.raises(ValueError, match=r"token 11 of the file is id 1500"):
        windows[2]  # on read: TokenWindows has no index
    given_ends = PackedDocuments(names, 8, eos_id=None, document_ends=[5, 10, 15], vocab_size=1000)
    with pytest.raises(ValueError, match=r"token 11 of the file is id 1500"):
        [given_ends[i] for i in range(len(given_ends))]
    PackedDocuments(names, 4, eos_id=EOS, vocab_size=2000)
    with pytest.raises(ValueError, match="pad_id 1500 is outside"):
        PackedDocuments(names, 4, eos_id=EOS, vocab_size=1000, pad_id=1500)


def test_a_stale_or_edited_boundary_index_is_refused(tmp_path: pathlib.Path) -> None:
    names = write(tmp_path, documents([5, 9, 3, 12]), [])
    path = pathlib.Path(names[0])
    ipath = pathlib.Path(names[0] + _index.INDEX_SUFFIX)
    assert PackedDocuments(names, 8, eos_id=EOS).num_documents == 4
    assert ipath.exists()

    with open(path, "ab") as f:  # appended: the size changed
        np.array([5, EOS], np.uint16).tofile(f)
    with pytest.raises(ValueError, match=r"part-00\.bin changed since .* \(size 58 → 62 bytes\)"):
        PackedDocuments(names, 8, eos_id=EOS)
    assert PackedDocuments(names, 8, eos_id=EOS, rebuild_index=True).num_documents == 5

    tokens = np.fromfile(path, np.uint16)
    tokens[3], tokens[4] = EOS, 7  # same size, a boundary moved
    tokens.tofile(path)
    os.utime(path, ns=(1, 1))
    with pytest.raises(ValueError, match="same size, but its document boundaries moved"):
        PackedDocuments(names, 8, eos_id=EOS)
    moved = PackedDocuments(names, 8, eos_id=EOS, rebuild_index=True)
    assert (0, 0, 4) in segments(moved)  # the first document now ends at the new eos
    os.utime(path, ns=(2, 2))  # touched, unchanged: rescanned and kept
    assert segments(PackedDocuments(names, 8, eos_id=EOS)) == segments(moved)

    good = ipath.read_bytes()
    edited = bytearray(good)
    edited[-8:] = np.array([3], "<i8").tobytes()  # the last offset, edited
    ipath.write_bytes(bytes(edited))
    with pytest.raises(ValueError, match=r"document index .* cannot be trusted .* edited"):
        PackedDocuments(names, 8, eos_id=EOS)
    ipath.write_bytes(good[:-8])  # truncated
    with pytest.raises(ValueError, match=r"cannot be trusted .* holds"):
        PackedDocuments(names, 8, eos_id=EOS)
    ipath.write_bytes(good)
    ds = PackedDocuments(names, 8, eos_id=EOS)
    stat = path.stat()
    tokens[tokens == EOS] = 9  # rewritten with its old size and mtime: found on read
    tokens.tofile(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ValueError, match="the token before it is not eos_id 1"):
        [ds[i] for i in range(len(ds))]


def test_a_file_changed_after_the_dataset_was_built_is_refused_on_read(
    tmp_path: pathlib.Path,
) -> None:
    names = write(tmp_path, documents([5, 9, 3, 12]), [])
    ds = TokenWindows(names, 4)
    with open(names[0], "ab") as f:
        f.write(b"\x00\x00")
    with pytest.raises(ValueError, match=r"part-00\.bin changed after this dataset read it"):
        ds[0]


def test_an_eos_inside_a_document_is_refused_when_it_is_read(tmp_path: pathlib.Path) -> None:
    """A file rewritten in place with an end-of-document token moved into a document (size and
    mtime kept): its index no longer describes it, and labels would cross documents."""
    lengths = [5, 9, 3, 12, 20]  # 20 > seq_len 8: a long document's pieces are read too
    names = write(tmp_path, documents(lengths), [])
    path = pathlib.Path(names[0])
    for at in (7, 34):  # inside document 1 (tokens 5..13); inside a piece of document 4
        ds = PackedDocuments(names, 8, eos_id=EOS)
        tokens = np.fromfile(path, dtype=np.uint16)
        stat = path.stat()
        edited = tokens.copy()
        edited[at] = EOS
        edited.tofile(path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        with pytest.raises(ValueError, match=rf"part-00\.bin: token {at} of the file, inside "):
            [ds[i] for i in range(len(ds))]
        tokens.tofile(path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    check_pass(PackedDocuments(names, 8, eos_id=EOS), lengths)  # untouched: read as before


def test_an_index_header_with_edited_ids_is_refused(tmp_path: pathlib.Path) -> None:
    """The recorded smallest and largest ids decide the vocabulary check: they are digested."""
    docs = documents([5, 5, 5])
    docs[2][1] = 1500
    names = write(tmp_path, docs, [])
    with pytest.raises(ValueError, match="id 1500, outside"):
        PackedDocuments(names, 4, eos_id=EOS, vocab_size=1000)
    ipath = pathlib.Path(names[0] + _index.INDEX_SUFFIX)
    raw = ipath.read_bytes()
    head = raw[: raw.index(b"\n") + 1]
    edited = head.replace(b'"max_id":1500', b'"max_id":999 ')  # the same length: still aligned
    assert edited != head and len(edited) == len(head)
    ipath.write_bytes(edited + raw[len(head) :])
    with pytest.raises(ValueError, match=r"cannot be trusted .* recorded ids"):
        PackedDocuments(names, 4, eos_id=EOS, vocab_size=1000)


def test_token_ids_are_never_negative(tmp_path: pathlib.Path) -> None:
    names = write(tmp_path, documents([5, 5, 5]), [])
    int32 = tmp_path / "ids.npy"
    np.save(int32, np.fromfile(names[0], dtype=np.uint16).astype(np.int32))
    for kwargs in ({"pad_id": -1}, {"eos_id": -5}):
        args: dict = {"eos_id": EOS, "dtype": np.int32, **kwargs}
        with pytest.raises(ValueError, match=r"_id must be >= 0; got -\d; pass the"):
            PackedDocuments(int32, 4, **args)
    with pytest.raises(ValueError, match="eos_id must be >= 0"):
        TokenWindows(int32, 4, dtype=np.int32, eos_id=-5)


def test_a_huge_seq_len_is_refused_before_anything_is_allocated(tmp_path: pathlib.Path) -> None:
    names = write(tmp_path, documents([5, 5, 5]), [])
    with pytest.raises(ValueError, match=r"15 tokens, fewer than seq_len \+ 1 = 1000000000001"):
        TokenWindows(names, 10**12)


def test_an_index_for_another_eos_is_rebuilt_and_index_dir_holds_them(
    tmp_path: pathlib.Path,
) -> None:
    names = write(tmp_path, documents([5, 9, 3, 12]), [])
    index_dir = tmp_path / "idx"
    a = PackedDocuments(names, 8, eos_id=EOS, index_dir=index_dir)
    assert not pathlib.Path(names[0] + _index.INDEX_SUFFIX).exists()
    assert len(list(index_dir.glob(f"*{_index.INDEX_SUFFIX}"))) == 1
    other = PackedDocuments(names, 8, eos_id=5, index_dir=index_dir)  # another eos: rebuilt
    assert a.num_documents == 4 and other.num_documents != 4


# --- `seekdata index --eos-id` ----------------------------------------------------------------


def test_seekdata_index_builds_the_boundary_indexes_once(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from seekdata.tools.cli import main

    names = write(tmp_path, documents([5, 9, 3, 12, 4]), [2, 4])
    scanned: list[str] = []
    scan = _index.scan
    monkeypatch.setattr(_index, "scan", lambda f, *a: scanned.append(f.name) or scan(f, *a))
    pattern = str(tmp_path / "part-{00..02}.bin")
    assert main(["index", "--eos-id", str(EOS), pattern]) == 0
    out = capsys.readouterr().out
    assert out == (
        "built 3 indexes, found 0 current: 3 token files, 33 tokens, 5 documents; "
        f"indexes beside the files\nmanifest {tmp_path / 'seekdata-manifest-tokens.json'}: "
        "3 files\n"
    )
    assert len(scanned) == 3
    assert main(["index", "--eos-id", str(EOS), pattern]) == 0
    assert PackedDocuments(names, 8, eos_id=EOS).num_documents == 5
    assert len(scanned) == 3  # current indexes are kept, and the dataset reads them
    assert main(["index", "--eos-id", str(EOS), "--force", pattern]) == 0
    assert len(scanned) == 6
    index_dir = tmp_path / "idx"
    assert main(["index", "--eos-id", "1", "-j", "2", "--index-dir", str(index_dir), *names]) == 0
    kept = sorted(p.name for p in index_dir.iterdir())
    assert len(kept) == 4 and kept[-1].startswith("seekdata-manifest-tokens.")  # and 3 indexes
    assert PackedDocuments(names, 8, eos_id=EOS, index_dir=index_dir).num_documents == 5
    assert len(scanned) == 6  # built by the command's worker processes, reused here


def test_seekdata_index_errors_for_token_files(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from seekdata.tools.cli import main

    docs = documents([5, 8])  # 26 bytes: not a whole number of uint32 tokens
    docs[1][2] = 1500
    name = write(tmp_path, docs, [])[0]

    def error(*argv: str) -> str:
        assert main(["index", *argv]) == 2
        return capsys.readouterr().err

    assert "token files are indexed by their end-of-document token" in error(name)
    assert "pass --eos-id" in error("--vocab-size", "10", name)
    assert "token 7 of the file is id 1500" in error("--eos-id", "1", "--vocab-size", "1000", name)
    assert "not a whole number of uint32 tokens" in error(
        "--eos-id", "1", "--dtype", "uint32", name
    )
    assert "--dtype must name" in error("--eos-id", "1", "--dtype", "nope", name)
    assert "integer dtype" in error("--eos-id", "1", "--dtype", "float32", name)
    assert "cannot occur in uint16" in error("--eos-id", "70000", name)
    assert "--allow-pipe is for tar shards" in error("--eos-id", "1", "--allow-pipe", name)
    assert main(["index", "--eos-id", "1", "--vocab-size", "2000", name]) == 0


def test_the_benchmark_script_runs_and_writes_its_tables(tmp_path: pathlib.Path) -> None:
    """benchmarks/tokens.py --quick: the tables the docs cite, JSON and a plot; no timing."""
    out, script = tmp_path / "tokens.json", ROOT / "benchmarks" / "tokens.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    packing = {r["packer"]: r["sequences"] for r in result["packing"]}
    bound = packing["lower bound: ceil(tokens / seq_len)"]
    assert bound <= packing["seekdata PackedDocuments (BFD, blocks of 65,536)"] < 1.02 * bound
    assert [r["boundaries from"] for r in result["setup"]] == [
        "document_ends (in memory)",
        "boundary index on disk",
    ]
    assert "published, not measured here" in done.stdout and out.with_suffix(".png").exists()
