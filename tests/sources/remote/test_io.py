"""The byte-range layer (seekdata.sources.remote) against real servers on 127.0.0.1.

URL forms and refusals; coalesced batch reads counted at the
server; transient faults retried to the exact bytes; permanent ones (a missing object, an
object changed under its index) refused naming the URL; the disk cache's bound, and that it
never deletes what it did not write.
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
from typing import Any

import pytest

from seekdata import _servers
from seekdata.remote import Cache
from seekdata.sources import remote
from seekdata.sources.remote import Memory, RemoteFile, Stores, locate

DATA = bytes(range(256)) * 4096  # 1 MiB, each byte's value its offset mod 256


@pytest.fixture(scope="module")
def bucket(s3_server: Any) -> str:
    client = _servers.s3_client(s3_server)
    client.create_bucket(Bucket="io-tests")
    client.put_object(Bucket="io-tests", Key="data.bin", Body=DATA)
    return "s3://io-tests"


def opened(proxy: Any, url: str, **kwargs: Any) -> RemoteFile:
    return RemoteFile(Stores(_servers.s3_options(proxy)), url, **kwargs)


def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's reads start from an empty memory (it is one per process)."""
    from seekdata.sources.remote import file as _file

    monkeypatch.setattr(_file, "_memory", Memory())
    monkeypatch.setattr(_file, "_batches", threading.local())


# -- URLs --------------------------------------------------------------------------------


def where(url: str) -> tuple[str, str, str]:
    loc = locate(url)
    return loc.kind, loc.root, loc.key


def test_url_forms() -> None:
    assert where("s3://b/dir/x.tar") == ("s3", "s3://b", "dir/x.tar")
    assert locate("gs://b/x.bin").kind == "gs" and locate("gcs://b/x.bin").kind == "gs"
    assert locate("az://container/x.bin").root == "az://container"
    assert where("https://host:8443/a%20b/c.bin") == ("http", "https://host:8443", "a b/c.bin")
    hf = locate(
        "hf://datasets/org/name/data/train-00000-of-00002.parquet", {"endpoint": "http://h"}
    )
    assert (hf.root, hf.key) == (
        "http://h/datasets/org/name/resolve/main",
        "data/train-00000-of-00002.parquet",
    )
    rev = locate("hf://datasets/org/name@refs%2Fconvert%2Fparquet/default/train/0000.parquet")
    assert rev.root.endswith("/datasets/org/name/resolve/refs%2Fconvert%2Fparquet")
    assert locate("hf://org/model/weights.bin").root.endswith("/org/model/resolve/main")
    assert remote.is_remote("s3://b/k") and not remote.is_remote("data/x.tar")
    assert not remote.is_remote("file:///x.tar") and not remote.is_remote("pipe:cat x")


@pytest.mark.parametrize(
    "url, match",
    [
        ("https://host/x.bin?X-Amz-Signature=abc", "query string"),
        ("https://user:secret@host/x.bin", "user name or password"),
        ("s3://bucket-only", "a bucket and an object"),
        ("hf://datasets/org", "names a repository and a file"),
    ],
)
def test_urls_that_could_leak_a_secret_or_name_nothing_are_refused(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        locate(url)
    assert "secret" not in str(err.value) and "X-Amz-Signature=abc" not in str(err.value)


# -- reads -------------------------------------------------------------------------------


def test_a_batch_is_read_in_coalesced_requests(
    bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_memory(monkeypatch)
    f = opened(proxy, f"{bucket}/data.bin")  # one HEAD
    ranges = [(10, 20), (30, 40), (900_000, 900_004), (5, 6)]
    proxy.reset()
    assert f.read_ranges(ranges) == [DATA[a:b] for a, b in ranges]
    log = proxy.stats()["log"]
    # neighbours closer than 64 KiB in one request; nothing else
    assert sorted(e["range"] for e in log) == ["bytes=5-39", "bytes=900000-900003"]
    proxy.reset()
    assert f.read(12, 18) == DATA[12:18]  # kept in memory: no request
    assert proxy.stats()["requests"] == 0


def test_an_object_the_previous_batch_read_too_is_streamed_in_chunks(
    bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seekdata.sources.remote import file as _file

    fresh_memory(monkeypatch)
    monkeypatch.setattr(_file, "CHUNK", 1 << 18)  # 256 KiB chunks of the 1 MiB object
    f = opened(proxy, f"{bucket}/data.bin")
    other = opened(proxy, f"{bucket}/data.bin", size=len(DATA), etag=f.etag)
    first = [(k * 150_000, k * 150_000 + 100) for k in range(4)]
    proxy.reset()
    remote.prefetch([(f, a, b) for a, b in first])  # a first batch: its own ranges
    assert len(proxy.stats()["log"]) == 4
    second = [(k * 150_000 + 70_000, k * 150_000 + 70_100) for k in range(4)]
    proxy.reset()
    remote.prefetch([(other, a, b) for a, b in second])  # read again: whole chunks
    got = sorted(e["range"] for e in proxy.stats()["log"])
    assert got == ["bytes=0-262143", "bytes=262144-524287"]  # chunks 0 and 1, a request each
    assert [f.read(a, b) for a, b in second] == [DATA[a:b] for a, b in second]


def test_reading_forward_reads_ahead_and_a_first_read_does_not(
    bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_memory(monkeypatch)
    f = opened(proxy, f"{bucket}/data.bin", size=len(DATA), etag=None)
    assert f.read(1000, 1100) == DATA[1000:1100]  # a first read: exactly what it asks for
    assert f.read(1100, 1200) == DATA[1100:1200]  # continues it: read ahead
    assert f.read(1200, 5000) == DATA[1200:5000]  # from memory
    assert [e["range"] for e in proxy.stats()["log"]] == [
        "bytes=1000-1099",
        "bytes=1100-1048575",
    ]  # to the end


def test_transient_faults_are_retried_to_the_exact_bytes(
    bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_memory(monkeypatch)
    f = opened(proxy, f"{bucket}/data.bin")
    proxy.faults(every=10)  # drops, 503 SlowDown, truncated bodies (3 requests in 10)
    for i in range(16):
        a = 37 * i * 1000
        assert f.get(a, a + 20_000) == DATA[a : a + 20_000]
    faults = proxy.stats()["faults"]
    assert faults["drop"] and faults["slowdown"] and faults["truncate"], faults


def test_a_missing_object_is_refused_naming_it(bucket: str, proxy: Any) -> None:
    with pytest.raises(ValueError, match=r"s3://io-tests/nothing.bin does not exist"):
        opened(proxy, f"{bucket}/nothing.bin")


def test_an_object_changed_under_its_index_is_refused_naming_it(
    s3_server: Any, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_memory(monkeypatch)
    client = _servers.s3_client(s3_server)
    client.put_object(Bucket="io-tests", Key="changing.bin", Body=DATA)
    f = opened(proxy, "s3://io-tests/changing.bin")
    assert f.get(0, 4) == DATA[:4]
    client.put_object(Bucket="io-tests", Key="changing.bin", Body=DATA[::-1])  # same size
    with pytest.raises(ValueError, match=r"s3://io-tests/changing.bin changed after its index"):
        f.get(0, 4)


def test_an_http_file_changed_under_its_index_is_refused(
    http_server: Any, http_root: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_memory(monkeypatch)
    path = http_root / "changing.bin"
    path.write_bytes(DATA)
    url = f"{http_server.url}/changing.bin"
    f = RemoteFile(Stores({}), url)
    assert f.get(100, 104) == DATA[100:104] and f.etag
    path.write_bytes(DATA[::-1])
    os.utime(path, (1, 1))  # another mtime: starlette's ETag is of size and mtime
    with pytest.raises(ValueError, match=f"{url} changed after its index"):
        f.get(100, 104)


# -- the disk cache ----------------------------------------------------------------------


def test_the_cache_stays_within_its_bound_and_leaves_other_files_alone(
    bucket: str, proxy: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_memory(monkeypatch)
    folder = tmp_path / "cache"
    (folder / "seekdata-cache").mkdir(parents=True)
    theirs = [folder / "mine.bin", folder / "seekdata-cache" / ("0" * 40 + ".blk")]
    for path in theirs:
        path.write_bytes(b"not the cache's")
    cache = Cache(folder, max_bytes=3 * 4096, block_bytes=4096)
    f = opened(proxy, f"{bucket}/data.bin", cache=cache)

    def written() -> int:
        manifest = (folder / "seekdata-cache" / "manifest").read_text().split()
        names = manifest[::2]
        return sum((folder / "seekdata-cache" / n).stat().st_size for n in names)

    for block in (0, 9, 3, 40, 9, 77, 0, 120):
        a = block * 4096 + 100
        assert f._fetch(a, a + 50) == DATA[a : a + 50]
        assert written() <= 3 * 4096 and cache.nbytes() == written()
    assert all(p.read_bytes() == b"not the cache's" for p in theirs)
    proxy.reset()
    assert f._fetch(120 * 4096 + 7, 120 * 4096 + 9) == DATA[120 * 4096 + 7 : 120 * 4096 + 9]
    assert proxy.stats()["requests"] == 0  # the last block is on disk


def test_stores_keep_no_secret_in_their_repr_and_pickle_without_clients() -> None:
    import pickle

    stores = Stores({"key": "AKIAXXXX", "secret": "hunter2"})
    assert "hunter2" not in repr(stores) and "AKIA" not in repr(stores)
    assert pickle.loads(pickle.dumps(stores)).options == stores.options
    assert json.dumps(sorted(stores.options))  # keys only in messages
