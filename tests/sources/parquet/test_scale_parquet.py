"""ParquetRows on the corpus manifest (issue 37): a start in O(1) requests, footers read lazily.

- 20,000 tiny Parquet files: building the dataset opens at most 3 local files (counted with an
  audit hook on ``open``) and reads at most 3 objects of the S3 server (counted at the proxy);
  a fresh process resuming at 90 % reads the manifest, the footers of the files its first
  batch touches and that batch's ranges, nothing else;
- the same batches, bit for bit, and the same signature, with and without a manifest; the
  previous release's signature still resumes;
- a manifest stale against a file added, changed or missing, or against a footer kept under
  ``index_dir`` that is another file's, is refused naming the file and the manifest.

The 20,000 files are one small file written by pyarrow (no compression, no dictionary, no
statistics), copied with each file's own ids and texts patched into its bytes: pyarrow writes
about 150 files a second here, the copies 4,000. Their manifest entries are the template's with
each file's name, stamp and digest (a few are checked against ``manifest_entry``).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seekdata import _servers
from seekdata.parquet import ParquetRows
from seekdata.sources.files import manifest as _manifest
from seekdata.sources.parquet import footers
from seekdata.sources.remote import Stores
from seekdata.testing import first_difference
from tests.helpers import opens
from tests.helpers import remote_corpus as corpus
from tests.helpers.paths import SCRIPTS
from tests.helpers.tiny_shards import _put

FILES = 20_000
ROWS = 4  # per file, in two row groups
BUCKET = "parquet-scale"
PATTERN = "p-{00000..19999}.parquet"
_ID = 0x5EED_0000_0000  # the template's ids: _ID + row
_TEXT = "t-zzzzzzz-"  # the template's texts: _TEXT + row


def _template() -> bytes:
    table = pa.table(
        {
            "id": pa.array([_ID + j for j in range(ROWS)], pa.int64()),
            "text": pa.array([f"{_TEXT}{j}" for j in range(ROWS)], pa.string()),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        row_group_size=ROWS // 2,
        compression="NONE",
        use_dictionary=False,
        write_statistics=False,
    )
    return sink.getvalue().to_pybytes()


def _file(template: bytes, k: int) -> bytes:
    """File ``k``: the template with ids ``k * ROWS + j`` and texts ``t-<k>-j``."""
    out = template
    for j in range(ROWS):
        out = out.replace((_ID + j).to_bytes(8, "little"), (k * ROWS + j).to_bytes(8, "little"))
    return out.replace(_TEXT.encode(), f"t-{k:07d}-".encode())


def _entries(template_entry: dict[str, Any], stamps: list[str]) -> list[dict[str, Any]]:
    """The manifest entries of the files: the template's but for name, stamp and digest."""
    rows, schema = template_entry["row_groups"], template_entry["schema"]
    out = []
    for k, stamp in enumerate(stamps):
        name = f"p-{k:05d}.parquet"
        digest = footers.file_digest(name, rows, schema)
        out.append({**template_entry, "name": name, "stamp": stamp, "digest": digest})
    return out


def _write_manifest(folder: str, entries: list[dict[str, Any]], **options: Any) -> str:
    rows, sections = footers.intern_schemas(entries)
    return _manifest.write(folder, footers.FAMILY, rows, {}, sections=sections, **options)


@pytest.fixture(scope="module")
def template() -> bytes:
    return _template()


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory, template: bytes) -> pathlib.Path:
    """20,000 local files and their folder's manifest."""
    folder = tmp_path_factory.mktemp("scale-parquet")

    def one(k: int) -> str:
        path = str(folder / f"p-{k:05d}.parquet")
        _put(path, _file(template, k))
        return _manifest.local_stamp(os.stat(path))

    # in threads: most of a file's time is its write and stat, which release the GIL
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        stamps = list(pool.map(one, range(FILES), chunksize=500))
    first = footers.manifest_entry(str(folder / "p-00000.parquet"), stores=Stores({}))
    entries = _entries(first, stamps)
    for k in (0, 7, FILES - 1):  # the shortcut gives what manifest_entry gives
        path = str(folder / f"p-{k:05d}.parquet")
        assert entries[k] == footers.manifest_entry(path, stores=Stores({}))
    _write_manifest(str(folder), entries)
    return folder


@pytest.fixture(scope="module")
def resume(corpus_dir: pathlib.Path) -> dict[str, Any]:
    """A loader state at 90 % of the local corpus, the batch that follows and its files."""
    local = ParquetRows(str(corpus_dir / PATTERN))
    state, want, indices = _rows_at_90(local, batch=8)
    return {"state": state, "want": want, "files": {_file_of(local, i) for i in indices}}


@pytest.fixture(scope="module")
def bucket(s3_server: Any, template: bytes, resume: dict[str, Any]) -> dict[str, Any]:
    """The manifest of the 20,000 files in a bucket folder, and the files a resume reads.

    Putting 20,000 objects into the test server takes minutes; building the dataset reads
    none of them (were one read, the missing object would fail the build), so the bucket
    holds the manifest and the files of the batch the resume reads first, and a few others.
    """
    client = _servers.s3_client(s3_server)
    client.create_bucket(Bucket=BUCKET)
    put = {f"p-{k:05d}.parquet" for k in (0, 1, FILES - 1)} | resume["files"]
    stamps = []
    for k in range(FILES):
        data = _file(template, k)
        stamps.append(f'"{hashlib.md5(data).hexdigest()}"')  # the ETag of a one-part PUT
        if f"p-{k:05d}.parquet" in put:
            client.put_object(Bucket=BUCKET, Key=f"c/p-{k:05d}.parquet", Body=data)
    store = Stores(_servers.s3_options(s3_server))
    last = footers.manifest_entry(f"s3://{BUCKET}/c/p-{FILES - 1:05d}.parquet", stores=store)
    entries = _entries(last, stamps)
    assert entries[-1] == last  # the shortcut gives what manifest_entry gives
    _write_manifest(f"s3://{BUCKET}/c", entries, stores=store)
    return {"urls": f"s3://{BUCKET}/c/{PATTERN}"}


def _rows_at_90(ds: ParquetRows, batch: int) -> tuple[dict[str, Any], list[str], list[int]]:
    """A loader state at 90 % of the epoch (skipped to in O(1)), the batch that follows, and
    that batch's row indices."""
    loader = corpus.make_loader("parquet", ds, batch_size=batch)
    stop = int(0.9 * len(loader))
    loader.skip(stop)
    state = json.loads(json.dumps(loader.state_dict()))
    want = corpus.rows_of("parquet", next(iter(loader)))
    positions = np.arange(stop * batch, (stop + 1) * batch)
    return state, want, loader.sampler.indices(0, positions).tolist()


def _file_of(ds: ParquetRows, index: int) -> str:
    group = int(np.searchsorted(np.asarray(ds.shard_starts), index, side="right")) - 1
    return os.path.basename(ds.files[ds._owner(group)[0]])


# -- 20,000 files, local -------------------------------------------------------------------


def test_construction_over_20000_local_files_opens_the_manifest_only(
    corpus_dir: pathlib.Path,
) -> None:
    with opens.counting() as seen:
        ds = ParquetRows(str(corpus_dir / PATTERN))
    assert len(ds) == FILES * ROWS and len(ds.shard_sizes) == 2 * FILES
    ours = [p for p in seen if str(corpus_dir) in p]
    assert len(ours) <= 3, ours
    assert ours == [str(corpus_dir / "seekdata-manifest-parquet.json")]
    assert ds.stream_signature.startswith(f"ParquetRows(rows={FILES * ROWS}, ")
    assert ds[12_345]["id"].item() == 12_345 and ds[12_345]["text"] == "t-0003086-1"


def test_a_local_resume_at_90_percent_opens_the_manifest_and_its_batchs_files_only(
    corpus_dir: pathlib.Path, resume: dict[str, Any]
) -> None:
    with opens.counting() as seen:
        ds = ParquetRows(str(corpus_dir / PATTERN))
        loader = corpus.make_loader("parquet", ds, batch_size=8)
        loader.load_state_dict(resume["state"])
        got = corpus.rows_of("parquet", next(iter(loader)))
    assert got == resume["want"]
    files = resume["files"]
    ours = [os.path.basename(p) for p in seen if str(corpus_dir) in p]
    assert ours[0] == "seekdata-manifest-parquet.json" and ours.count(ours[0]) == 1
    assert set(ours[1:]) == files  # each file of the batch: its footer, its row groups
    assert len(ours) <= 1 + 2 * len(files), ours


# -- 20,000 files, on the S3 server -----------------------------------------------------------


def test_construction_over_20000_objects_reads_the_manifest_only(
    bucket: dict[str, Any], proxy: Any
) -> None:
    ds = ParquetRows(bucket["urls"], storage_options=_servers.s3_options(proxy))
    log = proxy.stats()["log"]
    assert len(log) <= 3, log
    assert [(e["method"], e["path"]) for e in log] == [
        ("GET", f"/{BUCKET}/c/seekdata-manifest-parquet.json")
    ]
    assert len(ds) == FILES * ROWS


def test_a_resume_at_90_percent_reads_the_manifest_its_files_footers_and_ranges_only(
    bucket: dict[str, Any], resume: dict[str, Any], proxy: Any
) -> None:
    state, want, files = resume["state"], resume["want"], resume["files"]
    job = {
        "kind": "parquet",
        "urls": bucket["urls"],
        "options": {"storage_options": _servers.s3_options(proxy)},
        "batch": 8,
        "workers": 0,
        "state": state,
        "steps": 1,
    }
    proxy.reset()
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "_remote_job.py"), json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["batches"] == [want]  # a fresh process, the same batch
    log = [(e["method"], e["path"].rsplit("/", 1)[-1], e["range"]) for e in proxy.stats()["log"]]
    manifest = [e for e in log if e[1] == "seekdata-manifest-parquet.json"]
    assert len(manifest) == 1 and manifest[0][0] == "GET", log
    rest = [e for e in log if e not in manifest]
    assert all(method == "GET" for method, _, _ in rest), log  # no HEAD, no listing
    assert {name for _, name, _ in rest} == files, (log, files)
    tails = [e for e in rest if e[2] == "bytes=-65536"]  # each file's footer, with its bytes
    assert sorted(name for _, name, _ in tails) == sorted(files), log
    assert len(rest) <= 2 * len(files), log  # and at most one range more per file


# -- the same data, with and without a manifest ----------------------------------------------


@pytest.fixture
def small(tmp_path: pathlib.Path) -> pathlib.Path:
    """The three-file corpus of tests/helpers/remote_corpus.py and its manifest."""
    corpus.write("parquet", tmp_path)
    names = sorted(str(p) for p in tmp_path.glob("*.parquet"))
    _write_manifest(str(tmp_path), [footers.manifest_entry(n, stores=Stores({})) for n in names])
    return tmp_path


def test_with_and_without_a_manifest_the_same_rows_and_signature(small: pathlib.Path) -> None:
    pattern = corpus.pattern("parquet", str(small))
    with opens.counting() as seen:
        ds = ParquetRows(pattern)
    assert [p for p in seen if not p.endswith(".pyc")] == [
        str(small / "seekdata-manifest-parquet.json")
    ]  # (a module imported for the first time opens its .pyc)
    plain = ParquetRows(pattern, manifest=False)
    named = ParquetRows(pattern, manifest=small / "seekdata-manifest-parquet.json")
    for other in (plain, named):
        assert other.stream_signature == ds.stream_signature
        assert other.shard_sizes == ds.shard_sizes and other.schema.equals(ds.schema)
    assert ds.stream_signature.split(", ")[-1].startswith("d2:")
    picks = list(range(0, len(ds), 7))
    assert first_difference(ds.__getitems__(picks), plain.__getitems__(picks)) is None
    for kwargs in ({}, {"num_workers": 2}):  # footers read lazily in each worker
        a = corpus.stream(corpus.make_loader("parquet", ds, batch_size=16, **kwargs), 1)
        b = corpus.stream(corpus.make_loader("parquet", plain, batch_size=16), 1)
        assert len(a) == len(b) and all(
            first_difference(x, y) is None for x, y in zip(a, b, strict=True)
        )
    columns = ParquetRows(pattern, ["text", "id"], format="numpy")
    assert (
        columns.stream_signature
        == ParquetRows(pattern, ["text", "id"], format="numpy", manifest=False).stream_signature
        != ds.stream_signature
    )  # the columns decide


def test_footers_are_read_lazily_once_per_file(small: pathlib.Path) -> None:
    ds = ParquetRows(corpus.pattern("parquet", str(small)))
    assert not ds._described and ds._lazy.made == 0  # nothing read at construction
    ds.__getitems__([0, 1, 2])
    assert ds._lazy.made == 1  # the first file's footer only
    ds.__getitems__(list(range(len(ds))))
    assert ds._lazy.made == 3  # each once


def test_a_checkpoint_of_the_previous_release_resumes(small: pathlib.Path) -> None:
    ds = ParquetRows(corpus.pattern("parquet", str(small)))
    loader = corpus.make_loader("parquet", ds, batch_size=16)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    rest = [corpus.rows_of("parquet", b) for b in it]
    old = json.loads(json.dumps(state).replace(ds.stream_signature, ds.legacy_signature()))
    assert old != state  # the state names the dataset by the previous form now
    fresh = ParquetRows(corpus.pattern("parquet", str(small)))
    again = corpus.make_loader("parquet", fresh, batch_size=16)
    again.load_state_dict(old)
    assert [corpus.rows_of("parquet", b) for b in again] == rest
    assert not ds.accepts_signature(ds.legacy_signature().replace("Rows(rows=", "Rows(rows=1"), 1)


# -- stale manifests ---------------------------------------------------------------------------


def test_a_file_added_after_the_manifest_is_refused_naming_it(small: pathlib.Path) -> None:
    extra = small / "rows-00003-of-00003.parquet"
    shutil.copy(small / "rows-00000-of-00003.parquet", extra)
    names = [*sorted(str(p) for p in small.glob("rows-*.parquet"))]
    with pytest.raises(ValueError, match=r"rows-00003-of-00003.parquet is not in the manifest"):
        ParquetRows(names)
    assert len(ParquetRows(names, manifest=False)) == len(ParquetRows(names[:3])) + 150


def test_a_file_changed_or_missing_is_refused_at_its_first_read(small: pathlib.Path) -> None:
    pattern = corpus.pattern("parquet", str(small))
    ds = ParquetRows(pattern)
    second = small / "rows-00001-of-00003.parquet"
    pq.write_table(pq.read_table(second).slice(0, 100), second)  # rewritten: other rows
    assert ds[0]["id"].item() == 0  # the first file reads on
    manifest = str(small / "seekdata-manifest-parquet.json")
    with pytest.raises(ValueError) as err:
        ds[160]
    message = str(err.value)
    assert str(second) in message and manifest in message and "seekdata index" in message
    os.remove(second)
    with pytest.raises(ValueError, match=r"rows-00001-of-00003.parquet: it does not exist"):
        ParquetRows(pattern)[160]


def test_a_schema_that_differs_is_refused_from_the_manifest(small: pathlib.Path) -> None:
    third = small / "rows-00002-of-00003.parquet"
    table = pq.read_table(third)
    pq.write_table(table.set_column(0, "id", table["id"].cast(pa.int32())), third)
    names = sorted(str(p) for p in small.glob("rows-*.parquet"))
    _write_manifest(str(small), [footers.manifest_entry(n, stores=Stores({})) for n in names])
    with (
        opens.counting() as seen,
        pytest.raises(ValueError, match=r"rows-00002-of-00003.parquet holds columns"),
    ):
        ParquetRows(names)
    assert [p for p in seen if not p.endswith(".pyc")] == [
        str(small / "seekdata-manifest-parquet.json")
    ]  # (a module imported for the first time opens its .pyc)
    assert ParquetRows(names, ["text"]).columns == ["text"]


def test_a_kept_footer_of_another_file_is_refused_against_the_manifest(
    small: pathlib.Path, s3_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    prefix = f"kept-{small.name}"
    _servers.upload(s3_server, BUCKET, small, prefix + "/")
    options = _servers.s3_options(s3_server)
    urls = corpus.pattern("parquet", f"s3://{BUCKET}/{prefix}")
    index_dir = tmp_path_factory.mktemp("kept")
    built = ParquetRows(urls, storage_options=options, manifest=False, index_dir=index_dir)
    names = built.files
    entries = [footers.manifest_entry(n, stores=Stores(options)) for n in names]
    # with index_dir, a folder's manifest is looked for there (a read-only store's way)
    _write_manifest(
        f"s3://{BUCKET}/{prefix}", entries, stores=Stores(options), index_dir=str(index_dir)
    )
    kept = [
        pathlib.Path(footers._indexes.local_index_path(u, footers.FOOTER_SUFFIX, str(index_dir)))
        for u in names
    ]
    heads = [p.read_bytes().partition(b"\n") for p in kept]
    kept[1].write_bytes(heads[1][0] + b"\n" + heads[0][2])  # the first file's footer
    ds = ParquetRows(urls, storage_options=options, index_dir=index_dir)
    assert ds.stream_signature == built.stream_signature
    assert ds[0]["id"].item() == 0
    with pytest.raises(ValueError) as err:
        ds[160]
    message = str(err.value)
    assert names[1] in message and str(index_dir / "seekdata-manifest-parquet.") in message
    assert "rebuilt after the manifest" in message and "seekdata index" in message, message


def test_a_folder_without_a_manifest_is_read_as_before_beside_one_with(
    small: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = tmp_path_factory.mktemp("no-manifest")
    shutil.copy(small / "rows-00001-of-00003.parquet", other / "more.parquet")
    names = [*sorted(str(p) for p in small.glob("rows-*.parquet")), str(other / "more.parquet")]
    with opens.counting() as seen:
        ds = ParquetRows(names)
    assert sorted(p for p in seen if not p.endswith(".pyc")) == sorted(
        [
            str(small / "seekdata-manifest-parquet.json"),  # no footer of its files
            str(other / "seekdata-manifest-parquet.json"),  # looked for: none
            str(other / "more.parquet"),  # so its footer, now
        ]
    )
    plain = ParquetRows(names, manifest=False)
    assert ds.stream_signature == plain.stream_signature and len(ds) == 570 + 190
    picks = list(range(0, len(ds), 11))
    assert first_difference(ds.__getitems__(picks), plain.__getitems__(picks)) is None


def test_worker_threads_read_each_footer_once_and_give_the_same_stream(
    small: pathlib.Path,
) -> None:
    pattern = corpus.pattern("parquet", str(small))
    reference = corpus.stream(
        corpus.make_loader("parquet", ParquetRows(pattern, manifest=False), batch_size=16), 1
    )
    ds = ParquetRows(pattern)
    loader = corpus.make_loader("parquet", ds, batch_size=16, num_workers=3)
    loader.worker_method = "thread"  # the threads share the dataset, and its footers
    got = corpus.stream(loader, 1)
    assert len(got) == len(reference)
    assert all(first_difference(x, y) is None for x, y in zip(got, reference, strict=True))
    assert ds._lazy.made == 3  # each file's footer once, whichever thread came first
