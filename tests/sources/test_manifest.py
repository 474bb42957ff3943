"""The corpus manifest (sources/files/manifest.py): its format written and read back, local and
on a real S3 server, split into parts, merged; a dataset's files looked up by folder in one
read each; stale entries refused naming the file; the digest of digests; the per-process
lazy table of indexes (sources/files/lazy.py)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import pathlib
import threading
import time
from typing import Any

import numpy as np
import pytest

from seekdata import _servers
from seekdata.sources.files import lazy
from seekdata.sources.files import manifest as mf
from seekdata.sources.remote import Stores
from tests.helpers import opens

BUCKET = "manifest-tests"


def entries(n: int, prefix: str = "shard-") -> list[dict[str, Any]]:
    return [
        {
            "name": f"{prefix}{i:05d}.tar",
            "size": 1000 + i,
            "stamp": f"mtime_ns:{10**18 + i}",
            "items": 3 + i % 4,
            "digest": mf.digest_of(f"file {i}"),
            "first_key": f"k{i}a",
            "last_key": f"k{i}z",
        }
        for i in range(n)
    ]


def test_names_and_places() -> None:
    assert mf.manifest_name("tar") == "seekdata-manifest-tar.json"
    assert mf.manifest_name("tokens", 3) == "seekdata-manifest-tokens.part-00003.json"
    assert mf.manifest_url("s3://b/c", "tar") == "s3://b/c/seekdata-manifest-tar.json"
    assert mf.manifest_url("/data/c", "parquet") == "/data/c/seekdata-manifest-parquet.json"
    under = mf.manifest_url("s3://b/c", "tar", "/idx")
    assert under.startswith("/idx/seekdata-manifest-tar.") and under.endswith(".json")
    assert under != mf.manifest_url("s3://b/d", "tar", "/idx")  # one per folder
    assert mf.part_record_url("s3://b/c", "tar", None, 1, 4) == (
        "s3://b/c/seekdata-manifest-tar.part-1-of-4.json"
    )
    assert mf.folder_of("s3://b/c/x.tar") == "s3://b/c"
    assert mf.folder_of("rel/x.tar") == os.path.abspath("rel")
    assert mf.folder_of("pipe:cat x.tar") is None
    with pytest.raises(ValueError, match="family must be one of"):
        mf.manifest_name("lance")


def test_written_and_read_back(tmp_path: pathlib.Path) -> None:
    rows = entries(5)[::-1]  # any order: written sorted
    url = mf.write(str(tmp_path), "tar", rows, {"decode": None}, sections={"extra": {"a": 1}})
    assert url == str(tmp_path / "seekdata-manifest-tar.json")
    doc = json.loads(pathlib.Path(url).read_text())
    assert doc["format"] == "seekdata-manifest" and doc["version"] == 1
    assert list(doc["files"]) == [*mf.BASE_COLUMNS, "first_key", "last_key"]
    assert doc["files"]["name"] == sorted(r["name"] for r in rows) and doc["parts"] is None
    m = mf.read(str(tmp_path), "tar")
    assert m is not None and len(m) == 5 and m.params == {"decode": None}
    assert m.sections == {"extra": {"a": 1}}
    assert m.items.dtype == np.int64 and m.digests.shape == (5, 16)
    assert m.entries() == sorted(rows, key=lambda r: r["name"])
    assert m.column("first_key")[0] == "k0a"
    assert m.lookup(["shard-00003.tar", "shard-00000.tar"]).tolist() == [3, 0]
    with pytest.raises(KeyError, match=r"shard-00009.tar"):
        m.lookup(["shard-00000.tar", "shard-00009.tar"])
    with pytest.raises(KeyError, match="no column 'documents'"):
        m.column("documents")
    assert mf.read(str(tmp_path), "tokens") is None  # another family: none there
    assert mf.read(str(tmp_path / "nowhere"), "tar") is None


def test_a_long_name_is_not_found_by_its_prefix(tmp_path: pathlib.Path) -> None:
    mf.write(str(tmp_path), "tar", entries(3), {})
    m = mf.read(str(tmp_path), "tar")
    assert m is not None
    with pytest.raises(KeyError):  # numpy's fixed-width bytes must not cut the query
        m.lookup(["shard-00001.tar.bak"])


def test_a_large_folder_is_split_into_parts(tmp_path: pathlib.Path) -> None:
    rows = entries(10)
    url = mf.write(str(tmp_path), "tar", rows, {}, part_files=4)
    head = json.loads(pathlib.Path(url).read_text())
    assert "files" not in head and [p["files"] for p in head["parts"]] == [4, 4, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "seekdata-manifest-tar.json",
        *(f"seekdata-manifest-tar.part-0000{i}.json" for i in range(3)),
    ]
    m = mf.read(str(tmp_path), "tar")
    assert m is not None and m.entries() == rows
    # a part replaced under its head is refused, not mixed in
    part = tmp_path / "seekdata-manifest-tar.part-00001.json"
    doc = json.loads(part.read_text())
    doc["files"]["items"][0] += 1
    part.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"part-00001.json is not the one it lists"):
        mf.read(str(tmp_path), "tar")
    part.unlink()
    with pytest.raises(ValueError, match=r"part-00001.json is missing"):
        mf.read(str(tmp_path), "tar")


def test_a_newer_version_or_a_broken_manifest_is_refused(tmp_path: pathlib.Path) -> None:
    url = pathlib.Path(mf.write(str(tmp_path), "tar", entries(2), {}))
    doc = json.loads(url.read_text())
    url.write_text(json.dumps({**doc, "version": 2}))
    with pytest.raises(ValueError, match=r"version 2, but this release.*upgrade seekdata"):
        mf.read(str(tmp_path), "tar")
    url.write_text(json.dumps(doc)[:-10])
    with pytest.raises(ValueError, match="not a seekdata-manifest JSON object"):
        mf.read(str(tmp_path), "tar")
    unsorted = {**doc, "files": {k: v[::-1] for k, v in doc["files"].items()}}
    url.write_text(json.dumps(unsorted))
    with pytest.raises(ValueError, match="sorted and distinct"):
        mf.read(str(tmp_path), "tar")
    url.write_text(json.dumps({**doc, "family": "tokens"}))
    with pytest.raises(ValueError, match="describes 'tokens' files, but a 'tar' dataset"):
        mf.read(str(tmp_path), "tar")


def test_merge_replaces_same_named_entries() -> None:
    old = entries(3)
    new = [{**old[1], "items": 99}, *entries(1, prefix="added-")]
    merged = mf.merge(old, new)
    assert [e["name"] for e in merged] == [
        "added-00000.tar", "shard-00000.tar", "shard-00001.tar", "shard-00002.tar"
    ]  # fmt: skip
    assert merged[2]["items"] == 99 and mf.merge(None, old) == old


def two_folders(tmp_path: pathlib.Path) -> tuple[list[str], list[dict[str, Any]]]:
    rows = entries(6)
    for sub, part in (("a", rows[:3]), ("b", rows[3:])):
        (tmp_path / sub).mkdir()
        mf.write(str(tmp_path / sub), "tar", part, {"decode": None})
    urls = [str(tmp_path / "b" / rows[4]["name"]), str(tmp_path / "a" / rows[0]["name"])]
    urls.append(str(tmp_path / "a" / rows[2]["name"]))
    return urls, rows


def test_a_dataset_reads_one_manifest_per_folder_in_its_own_order(tmp_path: pathlib.Path) -> None:
    urls, rows = two_folders(tmp_path)
    with opens.counting() as opened:
        table = mf.for_files(urls, "tar", columns=("first_key",))
    assert sorted(opened) == [str(tmp_path / s / "seekdata-manifest-tar.json") for s in "ab"]
    assert table is not None and table.covered().all()
    picked = [rows[4], rows[0], rows[2]]  # the dataset's order, not the manifest's
    assert table.items.tolist() == [r["items"] for r in picked]
    assert table.size.tolist() == [r["size"] for r in picked]
    assert [bytes(d).hex() for d in table.digests] == [r["digest"] for r in picked]
    assert table.columns["first_key"].tolist() == [r["first_key"] for r in picked]
    assert table.params == [{"decode": None}] * 2
    assert mf.for_files(urls, "tar", manifest=False) is None
    # a named manifest describes every file, looked up by basename
    named = mf.for_files(urls[1:], "tar", manifest=str(tmp_path / "a" / mf.manifest_name("tar")))
    assert named is not None and named.items.tolist() == [rows[0]["items"], rows[2]["items"]]
    with pytest.raises(ValueError, match="names no manifest"):
        mf.for_files(urls, "tar", manifest=str(tmp_path / "none.json"))


def test_a_file_not_in_its_folders_manifest_is_refused_naming_it(tmp_path: pathlib.Path) -> None:
    urls, _ = two_folders(tmp_path)
    added = str(tmp_path / "a" / "shard-00099.tar")
    with pytest.raises(ValueError) as info:
        mf.for_files([*urls, added], "tar", fix_args=" --index-dir x")
    text = str(info.value)
    assert added in text and str(tmp_path / "a" / "seekdata-manifest-tar.json") in text
    assert f"seekdata index {added} --index-dir x" in text and "manifest=False" in text


def test_a_manifest_of_other_files_of_the_folder_is_not_used(tmp_path: pathlib.Path) -> None:
    urls, _ = two_folders(tmp_path)
    others = [str(tmp_path / "a" / "train-0.tar"), str(tmp_path / "a" / "train-1.tar")]
    assert mf.for_files(others, "tar") is None  # another dataset's manifest: read without one
    with pytest.raises(ValueError, match=r"train-0\.tar is not in the manifest"):
        mf.for_files([*urls, *others], "tar")  # some of them listed, some not: stale, refused


def test_folders_without_a_manifest_keep_todays_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls, _rows = two_folders(tmp_path)
    (tmp_path / "c").mkdir()
    bare = [str(tmp_path / "c" / f"x{i}.tar") for i in range(4)]
    assert mf.for_files(bare, "tar") is None
    table = mf.for_files([*urls, *bare], "tar")
    assert table is not None and table.covered().tolist() == [True] * 3 + [False] * 4
    table.fill(3, size=7, stamp="mtime_ns:5", items=2, digest=mf.digest_of("x"))
    assert table.items[3] == 2 and bytes(table.digests[3]).hex() == mf.digest_of("x")
    monkeypatch.setattr(mf, "MANY_FILES", 3)
    with pytest.warns(UserWarning, match=r"4 files have no manifest.*seekdata index 'c/x\*'"):
        mf.for_files([*urls, *bare], "tar", pattern="c/x*")
    with pytest.warns(UserWarning, match="seekdata index"):
        assert mf.for_files(bare, "tar") is None


def test_a_changed_file_or_rebuilt_index_is_refused_naming_it(tmp_path: pathlib.Path) -> None:
    urls, rows = two_folders(tmp_path)
    table = mf.for_files(urls, "tar")
    assert table is not None
    table.check_stamp(1, urls[1], rows[0]["size"], rows[0]["stamp"])  # the same: no error
    table.check_digest(1, urls[1], rows[0]["digest"])
    where = str(tmp_path / "a" / "seekdata-manifest-tar.json")
    with pytest.raises(ValueError, match=f"is 5 bytes now but {rows[0]['size']}.*{where}"):
        table.check_stamp(1, urls[1], 5, rows[0]["stamp"])
    with pytest.raises(ValueError, match=r"rewritten since it was indexed.*seekdata index"):
        table.check_stamp(1, urls[1], rows[0]["size"], "mtime_ns:1")
    with pytest.raises(ValueError, match="index was rebuilt after the manifest"):
        table.check_digest(1, urls[1], mf.digest_of("other"))


def test_the_signature_is_a_digest_of_the_digests_in_order() -> None:
    d = np.stack([np.frombuffer(bytes.fromhex(mf.digest_of(str(i))), np.uint8) for i in range(3)])
    sig = mf.signature({"decode": None}, 12, d)
    assert sig.startswith(mf.SIGNATURE_MARK) and len(sig) == len(mf.SIGNATURE_MARK) + 16
    assert sig == mf.signature({"decode": None}, 12, d.copy())
    assert sig != mf.signature({"decode": None}, 12, d[::-1])  # the order decides
    assert sig != mf.signature({"decode": None}, 11, d)
    assert sig != mf.signature({"decode": "rgb"}, 12, d)
    assert mf.digest_of("ab", "c") != mf.digest_of("a", "bc")  # chunks are delimited


def test_the_table_keeps_a_few_bytes_per_file(tmp_path: pathlib.Path) -> None:
    n = 2000
    mf.write(str(tmp_path), "tar", entries(n), {})
    urls = [str(tmp_path / e["name"]) for e in entries(n)]
    table = mf.for_files(urls, "tar")
    assert table is not None
    kept = sum(
        a.nbytes for a in (table.source, table.size, table.items, table.stamp, table.digests)
    )
    assert kept / n <= 48


def test_part_records_round_trip_and_are_removed(tmp_path: pathlib.Path) -> None:
    url = mf.part_record_url(str(tmp_path), "tar", None, 0, 2)
    assert mf.read_part_record(url) is None
    mf.write_part_record(url, entries(2)[::-1], {"p": 1}, sections={"s": 2})
    doc = mf.read_part_record(url)
    assert doc is not None and doc["entries"] == entries(2) and doc["params"] == {"p": 1}
    assert doc["sections"] == {"s": 2}
    mf.remove(url)
    mf.remove(url)  # gone already: not an error
    assert not os.path.exists(url)


def test_on_a_real_s3_server_one_get_per_folder(s3_proxy: Any, proxy: Any) -> None:
    stores = Stores(_servers.s3_options(proxy))
    client = _servers.s3_client(proxy)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    folder = f"s3://{BUCKET}/corpus"
    assert mf.read(folder, "tar", stores=stores) is None  # absent: None, not an error
    mf.write(folder, "tar", entries(10), {}, stores=stores, part_files=4)
    proxy.reset()
    urls = [f"{folder}/{e['name']}" for e in entries(10)][::-1]
    table = mf.for_files(urls, "tar", stores=stores)
    assert table is not None and table.items.tolist() == [e["items"] for e in entries(10)][::-1]
    log = proxy.stats()["log"]
    assert [e["method"] for e in log] == ["GET"] * 4  # the head and its 3 parts
    record = mf.part_record_url(folder, "tar", None, 1, 3)
    mf.write_part_record(record, entries(1), {}, stores)
    assert mf.read_part_record(record, stores) is not None
    mf.remove(record, stores)
    assert mf.read_part_record(record, stores) is None


# -- the per-process table of lazily read indexes ------------------------------------------------


def test_lazy_values_are_made_once_whatever_the_threads() -> None:
    table: lazy.PerProcess[int] = lazy.PerProcess()
    calls: list[int] = []
    start = threading.Barrier(8)

    def make() -> int:
        calls.append(1)
        time.sleep(0.05)  # widen the window in which other threads ask
        return 7

    def ask() -> None:
        start.wait()
        assert table.get("k", make) == 7

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert calls == [1] and table.made == 1 and len(table) == 1
    small: lazy.PerProcess[int] = lazy.PerProcess(limit=2)
    for k in range(3):
        small.get(k, lambda k=k: k)
    assert small.peek(0) is None and small.peek(2) == 2  # least recently used dropped


def _child(table: lazy.PerProcess[int], out: Any) -> None:
    out.put((len(table), table.get("k", lambda: 2), table.made))


def test_a_forked_child_reads_its_own() -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    table: lazy.PerProcess[int] = lazy.PerProcess()
    table.get("k", lambda: 1)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(table, out))
    proc.start()
    try:
        assert out.get(timeout=30) == (0, 2, 1)  # nothing inherited: the child read its own
    finally:
        proc.join(30)
    assert table.get("k", lambda: 3) == 1  # the parent's is its own
