"""Token corpora at scale (issue 37): over 20,000 tiny token files with a manifest, building
``TokenWindows`` and ``PackedDocuments`` opens one local file (the manifest) and sends one GET
to a real S3 server (moto, behind the counting proxy); a resume at 90 % then reads the
manifest, the indexes of the files its first batch's packing block spans (none for windows)
and the batch's ranges, nothing more — counted with Python's audit events locally
(tests/helpers/opens.py) and at the proxy remotely. The objects a count says are not read are
not even uploaded: a read of one would fail. The sequences are the ones a dataset without the
manifest serves, and so is the signature; a stale manifest is refused naming the file.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import pathlib
from typing import Any

import numpy as np
import pytest
import torch

import seekdata
from seekdata import _servers
from seekdata.sources.files import manifest as _manifest
from seekdata.sources.tokens import index as _index
from seekdata.sources.tokens import packing as _packing
from seekdata.sources.tokens.files import describe
from seekdata.tokens import PackedDocuments, TokenWindows
from tests.helpers import opens
from tests.helpers.tiny_shards import _put

FILES, DOCS, SEQ, EOS, BATCH = 20_000, 200, 16, 1, 8
BUCKET = "tokens-at-scale"
MANIFEST = _manifest.manifest_name("tokens")
U16 = np.dtype(np.uint16)


def write_corpus(folder: pathlib.Path, files: int, seed: int) -> dict[str, Any]:
    """``files`` token files of DOCS documents of 1 to 3 tokens each (each ending with EOS),
    their document indexes and the folder's manifest, written directly (a scan per file would
    only repeat what test_tokens.py covers); and each file's bytes and index as an S3 object
    would hold them (stamped with its ETag), and the rows of its S3 manifest."""
    gen = np.random.default_rng(seed)
    lengths = gen.integers(1, 4, files * DOCS)
    tokens = gen.integers(2, 500, int(lengths.sum())).astype(np.uint16)
    ends = np.cumsum(lengths)
    tokens[ends - 1] = EOS
    starts = np.concatenate([[0], ends[DOCS - 1 :: DOCS]])  # a file ends after DOCS documents

    def one(k: int) -> tuple[str, np.ndarray, Any, Any, str]:
        name = f"part-{k:05d}.bin"
        data = tokens[starts[k] : starts[k + 1]]
        path = str(folder / name)
        _put(path, data.tobytes())
        mine, st = ends[k * DOCS : (k + 1) * DOCS] - starts[k], os.stat(path)
        ids = (len(data), int(data.min()), int(data.max()), mine)
        local = _index.DocIndex(st.st_size, st.st_mtime_ns, "<u2", EOS, *ids)
        _put(path + _index.INDEX_SUFFIX, _index._encode(local, name))
        etag = '"' + hashlib.md5(data.tobytes()).hexdigest() + '"'  # S3's, for one PUT
        there = _index.DocIndex(st.st_size, 0, "<u2", EOS, *ids, etag=etag)
        return name, data, local, there, etag

    names, rows, indexes, remote, remote_rows = [], [], [], {}, []
    # in threads: most of a file's time is its two writes, which release the GIL
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for name, data, local, there, etag in pool.map(one, range(files), chunksize=500):
            row = _index.manifest_entry(local, name)
            remote[name] = (data, there)  # encoded when uploaded: a few hundred are
            names.append(str(folder / name))
            rows.append(row)
            remote_rows.append({**row, "stamp": etag})  # the same digest: the same documents
            indexes.append(local)
    params = _index.manifest_params(np.dtype(np.uint16), EOS)
    packing = _index.packing_section(indexes, [SEQ])
    _manifest.write(str(folder), "tokens", rows, params, sections={"packing": packing})
    return {"folder": folder, "names": names, "remote": remote, "params": params,
            "packing": packing, "remote_rows": remote_rows}  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_corpus(tmp_path_factory.mktemp("tokens-at-scale"), FILES, 37)


def _state_at_90(ds: Any, shuffle: bool) -> tuple[dict[str, Any], list[int], dict[str, Any]]:
    """A checkpoint at 90 % of an epoch of ``ds``, the dataset indices of the batch after it,
    and that batch (read from ``ds``)."""
    loader = seekdata.StatefulDataLoader(ds, batch_size=BATCH, shuffle=shuffle, seed=5)
    steps = len(loader)
    stop = int(0.9 * steps)
    loader.skip(stop)
    state = json.loads(json.dumps(loader.state_dict()))
    batch = next(iter(loader))
    positions = np.arange(stop * BATCH, (stop + 1) * BATCH)
    indices = loader.sampler.indices(0, positions).tolist()
    return state, indices, batch


def _resume(ds: Any, state: dict[str, Any], shuffle: bool) -> dict[str, Any]:
    loader = seekdata.StatefulDataLoader(ds, batch_size=BATCH, shuffle=shuffle, seed=5)
    loader.load_state_dict(state)
    return next(iter(loader))


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _files_read(ds: Any, indices: list[int]) -> set[str]:
    """The token files the items ``indices`` read."""
    reader = ds._reader
    out = set()
    for i in indices:
        for start, stop in ds._token_ranges(i):
            first, last = reader.file_at(start), reader.file_at(stop - 1)
            out.update(reader.files[k].name for k in range(first, last + 1))
    return out


def _indexes_read(ds: PackedDocuments, indices: list[int]) -> set[str]:
    """The files whose document indexes the packing blocks of ``indices`` span."""
    docs = ds._documents
    out = set()
    for b in {ds._packing.block_of(i) for i in indices}:
        d0, d1 = b * _packing.BLOCK, min(docs.documents, (b + 1) * _packing.BLOCK)
        out.update(
            ds._reader.files[k].name for k in range(docs.file_of(d0), docs.file_of(d1 - 1) + 1)
        )
    return out


# -- local files: opens counted ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["windows", "packed"])
def test_local_construction_opens_the_manifest_and_a_resume_its_first_batch_only(
    corpus: dict[str, Any], kind: str
) -> None:
    names = corpus["names"]
    manifest = str(corpus["folder"] / MANIFEST)

    def build(**kwargs: Any) -> Any:
        if kind == "windows":
            return TokenWindows(names, SEQ, eos_id=EOS, **kwargs)
        return PackedDocuments(names, SEQ, eos_id=EOS, **kwargs)

    with opens.counting() as opened:
        ds = build()
    assert opened == [manifest]  # one open: no stat of a token file, no index
    assert len(ds.files) == FILES
    if kind == "packed":
        assert ds.num_documents == FILES * DOCS and ds._packing.origin.endswith(manifest)
        assert ds._packing.sequences_per_block == corpus["packing"][str(SEQ)]["sequences"]
    state, indices, want = _state_at_90(ds, shuffle=kind == "windows")
    with opens.counting() as opened:
        fresh = build()
        got = _resume(fresh, state, shuffle=kind == "windows")
    assert _equal(got, want)
    expected = {manifest} | _files_read(ds, indices)
    if kind == "packed":
        expected |= {n + _index.INDEX_SUFFIX for n in _indexes_read(ds, indices)}
        assert len(expected) < FILES // 20  # one block's files, not the corpus's
    assert set(opened) == expected and opened[0] == manifest
    assert len(opened) == len(expected)  # each once


def test_with_or_without_the_manifest_the_same_signature_and_sequences(
    corpus: dict[str, Any],
) -> None:
    names = corpus["names"][:2000]  # a selection: its blocks counted here, not the manifest's
    with_it = PackedDocuments(names, SEQ, eos_id=EOS)
    assert with_it._packing.origin == "PackedDocuments"
    without = PackedDocuments(names, SEQ, eos_id=EOS, manifest=False)
    assert with_it.stream_signature == without.stream_signature
    assert len(with_it) == len(without)
    for i in np.linspace(0, len(without) - 1, 50).astype(int).tolist():
        assert _equal(with_it[i], without[i])
    windows = TokenWindows(names, SEQ, manifest=False)
    assert TokenWindows(names, SEQ).stream_signature == windows.stream_signature


def test_a_stale_manifest_is_refused_naming_the_file(tmp_path: pathlib.Path) -> None:
    small = write_corpus(tmp_path, 4, 3)
    names = small["names"]
    os.remove(tmp_path / MANIFEST)
    entries = [_index.manifest_entry(_index.kept(describe(n, U16), U16, EOS, None), n)
               for n in names[:3]]  # fmt: skip
    _manifest.write(str(tmp_path), "tokens", entries, small["params"])
    with pytest.raises(ValueError, match=r"part-00003\.bin is not in the manifest .*--eos-id 1"):
        PackedDocuments(names, SEQ, eos_id=EOS)  # added after indexing
    with pytest.raises(ValueError, match=r"indexed its files with eos_id 1, but eos_id=2 here"):
        PackedDocuments(names[:3], SEQ, eos_id=2)
    ds = PackedDocuments(names[:3], SEQ, eos_id=EOS)
    assert len(PackedDocuments(names, SEQ, eos_id=EOS, manifest=False)) > len(ds)
    with pytest.raises(
        ValueError, match=r"part-00000\.bin: token \d+ of the file is id \d+, outside"
    ):
        PackedDocuments(names[:3], SEQ, eos_id=EOS, vocab_size=100)  # the manifest's max_id
    assert TokenWindows(names[:3], SEQ, vocab_size=500)._checked  # no read needs checking
    os.utime(names[1], ns=(1, 1))  # rewritten: another mtime
    with pytest.raises(ValueError, match=r"part-00001\.bin: it was rewritten since it was indexed"):
        for i in range(len(ds)):
            ds[i]
    os.remove(names[2])  # missing
    windows = TokenWindows(names[:3], SEQ)  # nothing read yet: found when read
    with pytest.raises(ValueError, match=r"part-00001\.bin: it was rewritten"):
        for i in range(len(windows)):
            windows[i]
    with pytest.raises(ValueError, match=r"part-00002\.bin: it cannot be opened .*seekdata index"):
        windows[len(windows) - 1]


# -- a real S3 server: requests counted ------------------------------------------------------------


@pytest.fixture(scope="module")
def bucket(corpus: dict[str, Any], s3_proxy: Any) -> Any:
    client = _servers.s3_client(s3_proxy)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    stores = seekdata.sources.remote.Stores(_servers.s3_options(s3_proxy))
    _manifest.write(f"s3://{BUCKET}/corpus", "tokens", corpus["remote_rows"], corpus["params"],
             stores=stores, sections={"packing": corpus["packing"]})  # fmt: skip
    return client


def _upload(client: Any, corpus: dict[str, Any], names: set[str], indexes: set[str]) -> None:
    """Put only these token files and indexes (basenames): what a count says is read."""
    remote = corpus["remote"]
    jobs = [(n, remote[n][0].tobytes()) for n in names]
    jobs += [(n + _index.INDEX_SUFFIX, _index._encode(remote[n][1], n)) for n in indexes]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda j: client.put_object(Bucket=BUCKET, Key=f"corpus/{j[0]}", Body=j[1]),
                      jobs))  # fmt: skip


@pytest.mark.parametrize("kind", ["windows", "packed"])
def test_s3_construction_is_one_get_and_a_resume_reads_its_first_batch_only(
    corpus: dict[str, Any], bucket: Any, proxy: Any, kind: str
) -> None:
    urls = [f"s3://{BUCKET}/corpus/{pathlib.Path(n).name}" for n in corpus["names"]]
    options = {"storage_options": _servers.s3_options(proxy)}
    local = (TokenWindows(corpus["names"], SEQ, eos_id=EOS) if kind == "windows"
             else PackedDocuments(corpus["names"], SEQ, eos_id=EOS))  # fmt: skip
    state, indices, want = _state_at_90(local, shuffle=kind == "windows")
    names = {pathlib.Path(n).name for n in _files_read(local, indices)}
    indexes = set()
    if kind == "packed":
        assert isinstance(local, PackedDocuments)
        indexes = {pathlib.Path(n).name for n in _indexes_read(local, indices)}
    _upload(bucket, corpus, names, indexes)
    proxy.reset()
    build = TokenWindows if kind == "windows" else PackedDocuments
    ds = build(urls, SEQ, eos_id=EOS, **options)
    log = proxy.stats()["log"]
    assert [(e["method"], e["path"].rsplit("/", 1)[-1]) for e in log] == [("GET", MANIFEST)]
    assert ds.stream_signature == local.stream_signature  # the same data: a digest of digests
    proxy.reset()
    got = _resume(ds, state, shuffle=kind == "windows")
    assert _equal(got, want)
    log = proxy.stats()["log"]
    read = {e["path"].rsplit("/", 1)[-1] for e in log}
    assert read == names | {n + _index.INDEX_SUFFIX for n in indexes}
    assert all(e["method"] == "GET" for e in log)
    assert sum(e["path"].endswith(_index.INDEX_SUFFIX) for e in log) == len(indexes)  # once each


# -- seekdata index --eos-id --seq-len: the packing counts in the manifest -------------------------


def test_seekdata_index_writes_the_packing_counts_the_dataset_takes(tmp_path: pathlib.Path) -> None:
    """Three blocks spanning four files (one ending inside a document): the counts come from
    the manifest, the sequences are those of a dataset that counts itself; counts that do not
    match the documents are refused when their block is read, naming the manifest."""
    from seekdata.tools.cli import main
    from tests.sources.tokens.test_tokens import pinned_corpus

    names = pinned_corpus(tmp_path)
    assert main(["index", "--eos-id", str(EOS), "--seq-len", "32", *names]) == 0
    ds = PackedDocuments(names, 32, eos_id=EOS)
    manifest = str(tmp_path / MANIFEST)
    assert ds._packing.origin.endswith(manifest)
    itself = PackedDocuments(names, 32, eos_id=EOS, manifest=False)
    assert ds._packing.sequences_per_block == itself._packing.sequences_per_block
    assert ds.stream_signature == itself.stream_signature
    for i in np.linspace(0, len(ds) - 1, 40).astype(int).tolist():
        assert ds.locate(i) == itself.locate(i) and _equal(ds[i], itself[i])
    other = PackedDocuments(names, 64, eos_id=EOS)  # no counts for 64: counted here
    assert other._packing.origin == "PackedDocuments" and len(other) > 0
    doc = json.loads(pathlib.Path(manifest).read_text())
    doc["packing"]["32"]["sequences"][1] += 1  # the second block recorded with one more
    pathlib.Path(manifest).write_text(json.dumps(doc))
    wrong = PackedDocuments(names, 32, eos_id=EOS)
    assert len(wrong) == len(ds) + 1
    wrong[0]  # the first block is as recorded
    first = int(wrong._packing.seq_starts[1])
    with pytest.raises(ValueError, match=r"manifest .* packing block 1 of seq_len 32 is recorded"):
        wrong[first]
