"""Every file-backed source read from the S3 server (and over HTTP): the local stream, bit for bit.

For tar shards, token windows and packed documents (Parquet rows: tests/test_parquet.py):
remote and local give the same batches at every step, and resume exactly at every step, from
2 workers to 0, and on another world size; a fresh process resuming at 90 % reads, before its
first batch, the indexes and that batch's ranges and nothing else (counted at the server);
under the fault proxy an epoch delivers every sample once, its bytes equal; an object changed
under its index is refused naming it; a missing back-end is one line.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from seekdata import _servers
from seekdata.sources.remote import coalesce
from seekdata.testing import assert_exact_resume, first_difference
from tests.helpers import remote_corpus as corpus
from tests.helpers.paths import SCRIPTS
from tests.helpers.remote_corpus import stream

KINDS = ("tar", "windows", "packed")
BUCKET = "sources-tests"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp("sources")
    out = {}
    for kind in (*KINDS, "parquet"):
        out[kind] = root / kind
        corpus.write(kind, out[kind])
    _servers.upload(s3_server, BUCKET, root)  # s3://sources-tests/<kind>/...
    return out


def local_ds(folders: dict[str, pathlib.Path], kind: str) -> Any:
    return corpus.dataset(kind, corpus.pattern(kind, str(folders[kind])))


def remote_ds(proxy: Any, kind: str, **options: Any) -> Any:
    urls = corpus.pattern(kind, f"s3://{BUCKET}/{kind}")
    return corpus.dataset(kind, urls, storage_options=_servers.s3_options(proxy), **options)


@pytest.mark.parametrize("kind", KINDS)
def test_remote_gives_the_local_stream_and_resumes_exactly(
    folders: dict[str, pathlib.Path], proxy: Any, kind: str
) -> None:
    local, ds = local_ds(folders, kind), remote_ds(proxy, kind)
    # one class, local or remote (issue 36: the Remote* subclasses are aliases now); what made
    # the remote one read a batch at once is its prefetch, which has ranges to fetch remotely only
    assert type(ds) is type(local) and isinstance(ds, type(local))
    assert ds._byte_ranges(0) and not local._byte_ranges(0)
    assert len(ds) == len(local)
    a, b = stream(corpus.make_loader(kind, local)), stream(corpus.make_loader(kind, ds))
    assert len(a) == len(b)
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert first_difference(x, y) is None, f"step {step}: {first_difference(x, y)}"
    steps = len(a) // 2
    assert_exact_resume(lambda **kw: corpus.make_loader(kind, ds, **kw), epochs=2)
    assert_exact_resume(
        lambda **kw: corpus.make_loader(kind, ds, **{"num_workers": 2, **kw}),
        epochs=2,
        stop_at=(2, steps, steps + 3),
        resume_kwargs={"num_workers": 0},
    )


@pytest.mark.parametrize("kind", KINDS)
def test_resume_on_another_world_size_continues_the_global_stream(
    folders: dict[str, pathlib.Path], proxy: Any, kind: str
) -> None:
    local, ds = local_ds(folders, kind), remote_ds(proxy, kind)
    whole = stream(corpus.make_loader(kind, local, batch_size=8), 1)
    reference = [corpus.rows_of(kind, b) for b in whole]
    two = [corpus.make_loader(kind, ds, batch_size=4, world=2, rank=r) for r in range(2)]
    its = [iter(loader) for loader in two]
    got = []
    for _ in range(3):  # global batch 8 = 2 ranks × 4
        parts = [corpus.rows_of(kind, next(it)) for it in its]
        got.append([row for pair in zip(*parts, strict=True) for row in pair])
    state = two[0].state_dict()
    del its, two
    one = corpus.make_loader(kind, ds, batch_size=8, num_workers=2)
    one.load_state_dict(state)
    got += [corpus.rows_of(kind, b) for b in one]
    assert got == reference


# -- what a resume reads -------------------------------------------------------------------


def expected_ranges(kind: str, local: Any, indices: list[int]) -> dict[str, list[tuple[int, int]]]:
    """The byte ranges (per file name) that reading ``indices`` needs."""
    out: dict[str, list[tuple[int, int]]] = {}
    if kind == "tar":
        for i in indices:
            s = local.shard_of(i)
            shard = local._shards[s]
            idx, at = shard.index, i - local.shard_starts[s]
            first, last = int(idx.starts[at]), int(idx.starts[at + 1]) - 1
            span = (int(idx.offsets[first]) - 512, int(idx.offsets[last] + idx.sizes[last]))
            out.setdefault(pathlib.Path(shard.url).name, []).append(span)
        return out
    if kind == "parquet":
        from seekdata.sources.parquet.footers import column_ranges

        starts = np.asarray(local.shard_starts)
        for g in sorted({int(np.searchsorted(starts, i, side="right") - 1) for i in indices}):
            k, rg = local._owners[g]
            part = local._parts[k]
            ranges = column_ranges(part.metadata, rg, local._leaves[k])
            out.setdefault(pathlib.Path(part.name).name, []).append((ranges[0][0], ranges[-1][1]))
        return out
    reader, size = local._reader, local.dtype.itemsize
    for i in indices:
        for start, stop in local._token_ranges(i):
            k = reader.file_at(start)
            while start < stop:
                end = min(stop, reader.starts[k + 1])
                base = -reader.starts[k] * size
                name = pathlib.Path(reader.files[k].name).name
                out.setdefault(name, []).append((base + start * size, base + end * size))
                start, k = end, k + 1
    return out


@pytest.mark.parametrize("kind", (*KINDS, "parquet"))
def test_a_resume_at_90_percent_reads_the_indexes_and_the_first_batch_only(
    folders: dict[str, pathlib.Path], proxy: Any, kind: str, tmp_path: pathlib.Path
) -> None:
    local = local_ds(folders, kind)
    batch = 8
    loader = corpus.make_loader(kind, local, batch_size=batch)
    steps = -(-len(local) // batch)
    stop = int(0.9 * steps)
    it = iter(loader)
    for _ in range(stop):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    want = corpus.rows_of(kind, next(it))
    positions = np.arange(stop * batch, min(len(local), (stop + 1) * batch))
    indices = loader.sampler.indices(0, positions).tolist()
    del it, loader
    remote_ds(proxy, kind)  # the first build writes the indexes beside the data
    proxy.reset()
    job = {
        "kind": kind,
        "urls": corpus.pattern(kind, f"s3://{BUCKET}/{kind}"),
        "options": {"storage_options": _servers.s3_options(proxy)},
        "batch": batch,
        "workers": 0,
        "state": state,
        "steps": 1,
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "_remote_job.py"), json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["batches"] == [want]  # a fresh process, the same batch
    log = proxy.stats()["log"]
    files = corpus.FILES[kind][2]
    # the folder's manifest looked for (none was written: each file's index is read instead)
    looked = [e for e in log if "/seekdata-manifest-" in e["path"]]
    assert len(looked) <= 1, looked
    log = [e for e in log if e not in looked]
    index = [e for e in log if e["path"].endswith((".seekdata-index.json", ".seekdata-docs"))]
    heads = [e for e in log if e["method"] == "HEAD"]
    data = [e for e in log if e not in index and e not in heads]
    # before the first batch: one request per file for what describes it ...
    if kind == "tar":
        assert len(index) == files and not heads
        # and the 512 bytes at each index's end: its end-of-archive marker, checked at load
        ends = {pathlib.Path(s.url).name: s.index.end for s in local._shards}
        marks = [e for e in data if e["range"] == "bytes={}-{}".format(*_mark(ends, e))]
        assert len(marks) == files
        data = [e for e in data if e not in marks]
    elif kind == "windows":
        assert len(heads) == files and not index
    elif kind == "packed":
        assert len(heads) == files and len(index) == files
    else:  # parquet: each footer, with the file's last 64 KiB
        tails = [e for e in data if e["range"] == "bytes=-65536"]
        assert len(tails) == files
        data = [e for e in data if e not in tails]
    # ... and the batch's ranges, neighbours coalesced: nothing else
    need = {name: coalesce(r) for name, r in expected_ranges(kind, local, indices).items()}
    for e in data:
        name = pathlib.Path(e["path"]).name
        a, b = map(int, e["range"].removeprefix("bytes=").split("-"))
        assert any(s <= a and b + 1 <= t for s, t in need.get(name, [])), (e, need)
    assert len(data) <= sum(map(len, need.values()))
    if kind != "parquet":  # (a footer's tail may hold a row group already)
        assert sorted((pathlib.Path(e["path"]).name, e["range"]) for e in data) == sorted(
            (name, f"bytes={s}-{t - 1}") for name, spans in need.items() for s, t in spans
        )


def _mark(ends: dict[str, int], entry: dict[str, Any]) -> tuple[int, int]:
    """The first and last byte of the end-of-archive marker of the shard ``entry`` read."""
    end = ends.get(pathlib.Path(entry["path"]).name, -1)
    return end, end + 511


# -- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", (*KINDS, "parquet"))
def test_under_faults_an_epoch_delivers_every_sample_once(
    folders: dict[str, pathlib.Path], proxy: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seekdata.sources.remote import Memory
    from seekdata.sources.remote import file as _file

    # nothing kept from before, and no neighbours coalesced: each sample's range is a request
    monkeypatch.setattr(_file, "_memory", Memory())
    monkeypatch.setattr(_file, "GAP", 0)
    local = local_ds(folders, kind)
    batches = stream(corpus.make_loader(kind, local), 1)
    want = [row for b in batches for row in corpus.rows_of(kind, b)]
    proxy.faults(every=20)  # 1 in 20 dropped, and as many 503 SlowDown and cut bodies
    ds = remote_ds(proxy, kind)
    got = [row for b in stream(corpus.make_loader(kind, ds), 1) for row in corpus.rows_of(kind, b)]
    assert got == want  # every sample, once, in order, its bytes equal
    faults = proxy.stats()["faults"]
    assert faults["drop"] and faults["slowdown"] and faults["truncate"], faults


# -- refusals --------------------------------------------------------------------------------


def test_a_shard_changed_under_its_index_is_refused_naming_it(
    folders: dict[str, pathlib.Path],
    s3_server: Any,
    proxy: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from seekdata.sources.remote import Memory
    from seekdata.sources.remote import file as _file

    client = _servers.s3_client(s3_server)
    client.create_bucket(Bucket="changing-shards")
    for p in sorted(folders["tar"].glob("*.tar")):
        client.put_object(Bucket="changing-shards", Key=p.name, Body=p.read_bytes())
    urls = corpus.pattern("tar", "s3://changing-shards")
    options = {"storage_options": _servers.s3_options(proxy)}
    first = corpus.dataset("tar", urls, **options)  # indexes written beside the shards
    data = (folders["tar"] / "train-02.tar").read_bytes()
    client.put_object(Bucket="changing-shards", Key="train-02.tar", Body=data[::-1])
    # a dataset built now: refused at once (its index's end is read, with If-Match)
    with pytest.raises(ValueError, match=r"s3://changing-shards/train-02.tar changed after"):
        corpus.dataset("tar", urls, **options)
    monkeypatch.setattr(_file, "_memory", Memory())  # what the builds read ahead is gone
    s = 2
    assert first[0]["__key__"] == "k00000"  # a dataset built before: other shards read on
    with pytest.raises(ValueError, match=r"s3://changing-shards/train-02.tar changed after"):
        first[first.shard_starts[s]]
    # an intended change: another valid shard, and the index rebuilt on request
    smaller = (folders["tar"] / "train-00.tar").read_bytes()  # 9 samples, not 15
    client.put_object(Bucket="changing-shards", Key="train-02.tar", Body=smaller)
    with pytest.raises(ValueError, match=r"train-02.tar changed after"):
        corpus.dataset("tar", urls, **options)[first.shard_starts[s]]
    rebuilt = corpus.dataset("tar", urls, rebuild_index=True, **options)
    assert rebuilt.shard_sizes[s] == 9 and rebuilt.shard_sizes[:2] == first.shard_sizes[:2]


def test_http_sources_keep_their_indexes_under_index_dir(
    folders: dict[str, pathlib.Path],
    http_server: Any,
    http_root: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    for kind in KINDS:
        shutil.copytree(folders[kind], http_root / "sources" / kind, dirs_exist_ok=True)
    for kind in ("tar", "packed"):
        urls = corpus.pattern(kind, f"{http_server.url}/sources/{kind}")
        with pytest.raises(ValueError, match=r"read only; pass index_dir="):
            corpus.dataset(kind, urls)
        ds = corpus.dataset(kind, urls, index_dir=tmp_path / kind)
        local = local_ds(folders, kind)
        picks = list(range(0, len(ds), 5))
        got, want = ds.__getitems__(picks), [local[i] for i in picks]
        if kind == "tar":  # __url__ is as given, and only local shards have a __local_path__
            got = [{k: v for k, v in x.items() if not k.startswith("__")} for x in got]
            want = [{k: v for k, v in x.items() if not k.startswith("__")} for x in want]
        assert first_difference(got, want) is None


def test_a_missing_back_end_is_one_line_from_every_source(tmp_path: pathlib.Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['s3fs'] = None  # as when the extra is not installed\n"
        "from seekdata.wds import TarShards\n"
        "from seekdata.tokens import TokenWindows\n"
        "from seekdata.parquet import ParquetRows\n"
        "for make in (lambda: TarShards('s3://b/train-{0..1}.tar'),\n"
        "             lambda: TokenWindows('s3://b/tok.bin', 8),\n"
        "             lambda: ParquetRows('s3://b/rows.parquet')):\n"
        "    try:\n"
        "        make()\n"
        "    except ImportError as e:\n"
        "        print(repr(str(e)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3, done.stdout + done.stderr
    for line in lines:
        message = eval(line)
        assert "\n" not in message and "pip install 'seekdata[remote]'" in message
