"""A ``Cache`` shared by the processes of a machine fetches each block once.

A process about to fetch a block claims it (a ``.claim`` file holding its pid); another that
finds it claimed waits for it — or, reading ahead, moves on — instead of fetching it too; a
claim whose process is gone is taken over. So DataLoader workers reading the same shards in a
shard-local order split the download instead of each making it, and the stream is the same.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
from typing import Any

import pytest

from seekdata import _servers
from seekdata.remote import Cache
from seekdata.sources.remote import Memory, RemoteFile, Stores
from seekdata.sources.remote import file as _file
from seekdata.testing import first_difference
from tests.helpers import remote_corpus as corpus

DATA = bytes(range(256)) * 4096  # 1 MiB, each byte's value its offset mod 256
BLOCK = 64 << 10
BUCKET = "shared-cache-tests"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("shared-cache-tar")
    corpus.write("tar", folder / "tar")
    return folder


@pytest.fixture(scope="module")
def bucket(s3_server: Any, folder: pathlib.Path) -> str:
    client = _servers.s3_client(s3_server)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="data.bin", Body=DATA)
    _servers.upload(s3_server, BUCKET, folder)  # s3://shared-cache-tests/tar/...
    return f"s3://{BUCKET}"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_file, "_memory", Memory())
    monkeypatch.setattr(_file, "_batches", threading.local())
    monkeypatch.setattr(_file, "_flights_of", None)


def gets(proxy: Any) -> list[dict[str, Any]]:
    return [e for e in proxy.stats()["log"] if e["method"] == "GET"]


def claim_path(cache: Cache, file: RemoteFile, block: int) -> pathlib.Path:
    return pathlib.Path(cache.root, cache._name(file, block) + ".claim")


def live_pid() -> subprocess.Popen[bytes]:
    """Another process that lives until killed (the holder of a claim)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_a_block_another_live_process_claimed_is_waited_for_not_fetched(
    bucket: str, proxy: Any, tmp_path: pathlib.Path, fresh: None
) -> None:
    cache = Cache(tmp_path, max_bytes=1 << 20, block_bytes=BLOCK)
    f = RemoteFile(Stores(_servers.s3_options(proxy)), f"{bucket}/data.bin", cache=cache)
    other = live_pid()
    try:
        span = (3 * BLOCK + 10, 3 * BLOCK + 20)
        claim = claim_path(cache, f, 3)
        claim.parent.mkdir(parents=True, exist_ok=True)
        claim.write_text(str(other.pid))
        proxy.reset()
        # a read-ahead moves on: nothing fetched, nothing returned
        assert cache.read(f, *span, wait=False) is None
        assert gets(proxy) == []
        # a batch waits until the other process's block lands, and then reads it from disk
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(cache.read(f, *span)))
        waiter.start()
        writer = Cache(tmp_path, max_bytes=1 << 20, block_bytes=BLOCK)  # "the other process"
        writer._store(cache._name(f, 3), DATA[3 * BLOCK : 4 * BLOCK])
        waiter.join(timeout=60)
        assert not waiter.is_alive()
        assert got == [DATA[span[0] : span[1]]]
        assert gets(proxy) == [] and claim.exists()  # its claim is its own to remove
    finally:
        other.kill()
        other.wait()


def test_a_claim_whose_process_is_gone_is_taken_over(
    bucket: str, proxy: Any, tmp_path: pathlib.Path, fresh: None
) -> None:
    cache = Cache(tmp_path, max_bytes=1 << 20, block_bytes=BLOCK)
    f = RemoteFile(Stores(_servers.s3_options(proxy)), f"{bucket}/data.bin", cache=cache)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    claim = claim_path(cache, f, 5)
    claim.parent.mkdir(parents=True, exist_ok=True)
    claim.write_text(gone.stdout.strip())
    proxy.reset()
    assert cache.read(f, 5 * BLOCK, 5 * BLOCK + 7) == DATA[5 * BLOCK : 5 * BLOCK + 7]
    assert len(gets(proxy)) == 1 and not claim.exists()
    assert not list(pathlib.Path(cache.root).glob("*.claim"))  # and the fetch removed its own


def test_a_failed_fetch_leaves_no_claim_behind(
    bucket: str, proxy: Any, tmp_path: pathlib.Path, fresh: None
) -> None:
    cache = Cache(tmp_path, max_bytes=1 << 20, block_bytes=BLOCK)
    f = RemoteFile(Stores(_servers.s3_options(proxy)), f"{bucket}/data.bin", cache=cache)
    f.etag = '"not-its-etag"'  # the object "changed": a permanent error
    with pytest.raises(ValueError, match="changed after its index"):
        cache.read(f, 0, 10)
    assert not list(pathlib.Path(cache.root).glob("*.claim"))


READER = """
import hashlib, json, sys
from seekdata.remote import Cache
from seekdata.sources.remote import RemoteFile, Stores
spec = json.loads(sys.argv[1])
cache = Cache(spec["dir"], max_bytes=1 << 30, block_bytes=spec["block"])
f = RemoteFile(Stores(spec["options"]), spec["url"], cache=cache)
blocks = range(f.size // spec["block"])
order = list(blocks)[::-1] if spec["backwards"] else list(blocks)
parts = {b: f._fetch(b * spec["block"], (b + 1) * spec["block"]) for b in order}
print(hashlib.sha256(b"".join(parts[b] for b in blocks)).hexdigest())
"""


def test_processes_sharing_a_cache_fetch_each_block_once(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    import hashlib

    spec = {"dir": str(tmp_path), "block": BLOCK, "options": _servers.s3_options(proxy),
            "url": f"{bucket}/data.bin"}  # fmt: skip
    proxy.reset()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", READER, json.dumps({**spec, "backwards": back})],
            stdout=subprocess.PIPE,
            text=True,
        )
        for back in (False, True, False)
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert outs == [hashlib.sha256(DATA).hexdigest()] * 3
    ranges = [e["range"] for e in gets(proxy)]
    assert sum(e["bytes"] for e in gets(proxy)) == len(DATA), ranges  # each block once
    assert not list(pathlib.Path(tmp_path, "seekdata-cache").glob("*.claim"))


def test_two_workers_sharing_a_cache_read_an_epoch_once_and_give_the_same_stream(
    bucket: str,
    folder: pathlib.Path,
    proxy: Any,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_file, "CHUNK", 4096)  # several chunks per small shard (forked workers)
    urls = corpus.pattern("tar", f"{bucket}/tar")
    options = _servers.s3_options(proxy)
    plain = corpus.dataset("tar", urls, storage_options=options)
    cached = corpus.dataset(
        "tar", urls, storage_options=options, cache=Cache(tmp_path, max_bytes=64 << 20,
                                                           block_bytes=4096)
    )  # fmt: skip
    a = corpus.stream(corpus.make_loader("tar", plain), epochs=1)
    proxy.reset()
    b = corpus.stream(corpus.make_loader("tar", cached, num_workers=2), epochs=1)
    assert len(a) == len(b)
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert first_difference(x, y) is None, f"step {step}: {first_difference(x, y)}"
    fetched: dict[str, int] = {}
    for e in gets(proxy):
        if e["path"].endswith(".tar"):
            fetched[e["path"]] = fetched.get(e["path"], 0) + e["bytes"]
    sizes = {f"/{BUCKET}/tar/{p.name}": p.stat().st_size for p in (folder / "tar").glob("*.tar")}
    assert set(fetched) == set(sizes)  # every shard was read...
    for path, nbytes in fetched.items():  # ... once, though both workers streamed it
        assert nbytes <= sizes[path], (path, nbytes, sizes[path])
