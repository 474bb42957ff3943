"""Read-ahead of shards being streamed (``prefetch(shards=True)``), against the S3 server.

A shard that a process's batches keep reading from (a shard-local order) is read ahead whole,
a chunk per request, in the background: every chunk is requested once, whether a batch takes
it over from the queue, waits for it in flight, or finds it in memory; shards that could not
stay in memory are read by their own ranges; read-ahead never changes a sample's bytes, even
under faults; and a process whose read-ahead is still running ends.
"""

from __future__ import annotations

import collections
import json
import pathlib
import subprocess
import sys
import threading
from typing import Any

import pytest

from seekdata import _servers
from seekdata.sources import remote
from seekdata.sources.remote import Memory, RemoteFile, Stores
from seekdata.sources.remote import file as _file
from seekdata.testing import first_difference, run_loop
from tests.helpers import remote_corpus as corpus

DATA = bytes(range(256)) * 4096  # 1 MiB, each byte's value its offset mod 256
CHUNK = 1 << 17  # 128 KiB: 8 chunks of DATA
BUCKET = "readahead-tests"


@pytest.fixture(scope="module")
def bucket(s3_server: Any) -> str:
    client = _servers.s3_client(s3_server)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="data.bin", Body=DATA)
    return f"s3://{BUCKET}"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty memory, no previous batch, nothing in flight, 128 KiB chunks."""
    monkeypatch.setattr(_file, "_memory", Memory())
    monkeypatch.setattr(_file, "_batches", threading.local())
    monkeypatch.setattr(_file, "_flights_of", None)
    monkeypatch.setattr(_file, "CHUNK", CHUNK)


def opened(proxy: Any, bucket: str) -> RemoteFile:
    return RemoteFile(Stores(_servers.s3_options(proxy)), f"{bucket}/data.bin")


def ranges_at(*offsets: int) -> list[tuple[int, int]]:
    return [(a, a + 100) for a in offsets]


def requested(proxy: Any) -> collections.Counter[str]:
    return collections.Counter(e["range"] for e in proxy.stats()["log"] if e["method"] == "GET")


def chunk(c: int) -> str:
    return f"bytes={c * CHUNK}-{(c + 1) * CHUNK - 1}"


def test_a_streamed_shard_is_read_ahead_whole_each_chunk_once(
    bucket: str, proxy: Any, fresh: None
) -> None:
    f = opened(proxy, bucket)
    first = ranges_at(0, 140_000, 300_000, 420_000)  # chunks 0, 1, 2, 3
    proxy.reset()
    assert remote.read_batch([(f, a, b) for a, b in first], shards=True) == [
        DATA[a:b] for a, b in first
    ]
    assert sorted(requested(proxy)) == sorted(f"bytes={a}-{b - 1}" for a, b in first)  # its own
    proxy.reset()
    second = ranges_at(10_000, 20_000, 30_000, 200_000)  # chunks 0 and 1: streamed now
    assert remote.read_batch([(f, a, b) for a, b in second], shards=True) == [
        DATA[a:b] for a, b in second
    ]
    _file.settle()  # the rest of the object lands in the background
    assert requested(proxy) == {chunk(c): 1 for c in range(8)}
    proxy.reset()
    third = ranges_at(600_000, 700_000, 900_000, 1_048_000)
    assert remote.read_batch([(f, a, b) for a, b in third], shards=True) == [
        DATA[a:b] for a, b in third
    ]
    assert not requested(proxy)  # all of it in memory


def test_a_batch_takes_over_queued_chunks_and_dropped_ones_are_never_read(
    bucket: str, proxy: Any, fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_file, "AHEAD", 0)  # no background thread: chunks stay queued
    f = opened(proxy, bucket)
    g = RemoteFile(f.stores, f.url, size=f.size, etag=None)  # another version: another object
    batch = ranges_at(0, 140_000, 300_000, 420_000)
    for _ in range(2):
        remote.prefetch([(f, a, b) for a, b in batch], shards=True)
    assert len(_file._flights().queue) == 4  # chunks 4-7
    proxy.reset()
    later = ranges_at(600_000, 610_000, 620_000, 900_000)  # chunks 4 and 6, queued
    remote.prefetch([(f, a, b) for a, b in later], shards=True)
    assert requested(proxy) == {chunk(4): 1, chunk(6): 1}
    assert [x.start // CHUNK for x in _file._flights().queue] == [5, 7]
    for _ in range(2):  # the order moves on to another object: the queue is dropped
        remote.prefetch([(g, a, b) for a, b in batch], shards=False)
    remote.prefetch([(g, a, b) for a, b in batch], shards=True)
    assert all(x.file is g for x in _file._flights().queue)
    assert not _file._flights().by_key.keys() & {(f.version, a, a + CHUNK) for a in (5, 7)}


def test_a_batch_waits_for_a_chunk_in_flight_instead_of_reading_it_again(
    bucket: str, proxy: Any, fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = opened(proxy, bucket)
    started, release = threading.Event(), threading.Event()
    fetch = RemoteFile._fetch

    def held(self: RemoteFile, start: int, stop: int, **how: Any) -> Any:
        if start == 5 * CHUNK and threading.current_thread().name == "seekdata-ahead":
            started.set()
            release.wait(60)
        return fetch(self, start, stop, **how)

    monkeypatch.setattr(RemoteFile, "_fetch", held)
    batch = ranges_at(0, 140_000, 300_000, 420_000)
    for _ in range(2):
        remote.prefetch([(f, a, b) for a, b in batch], shards=True)
    assert started.wait(60)  # chunk 5 is being read ahead, and held
    proxy.reset()
    needs = ranges_at(5 * CHUNK + 10, 5 * CHUNK + 5000, 5 * CHUNK + 9000, 5 * CHUNK + 20_000)
    got: list[Any] = []
    reader = threading.Thread(
        target=lambda: got.append(remote.read_batch([(f, a, b) for a, b in needs], shards=True))
    )
    reader.start()
    release.set()
    reader.join(60)
    _file.settle()
    assert got == [[DATA[a:b] for a, b in needs]]
    assert requested(proxy)[chunk(5)] == 1


def test_shards_that_cannot_stay_in_memory_are_read_by_their_own_ranges(
    bucket: str, proxy: Any, fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_file, "_memory", Memory(limit=len(DATA) // 2))
    f = opened(proxy, bucket)
    batch = ranges_at(0, 140_000, 300_000, 420_000)
    remote.prefetch([(f, a, b) for a, b in batch], shards=True)
    proxy.reset()
    second = ranges_at(10_000, 150_000, 310_000, 430_000)
    assert remote.read_batch([(f, a, b) for a, b in second], shards=True) == [
        DATA[a:b] for a, b in second
    ]
    assert sorted(requested(proxy)) == sorted(f"bytes={a}-{b - 1}" for a, b in second)
    assert not _file._flights().by_key  # nothing read ahead


def test_a_range_across_two_kept_chunks_is_read_from_memory(
    bucket: str, proxy: Any, fresh: None
) -> None:
    f = opened(proxy, bucket)
    memory = _file.memory()
    memory.put(f.version, 0, DATA[:CHUNK])
    memory.put(f.version, CHUNK, DATA[CHUNK : 2 * CHUNK])
    proxy.reset()
    assert f.read(CHUNK - 300, CHUNK + 300) == DATA[CHUNK - 300 : CHUNK + 300]
    assert memory.has(f.version, 0, 2 * CHUNK) and not memory.has(f.version, 0, 2 * CHUNK + 1)
    assert not requested(proxy)


# -- tar shards: the same samples, with read-ahead, under faults, and at exit ----------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("readahead") / "tar"
    corpus.write("tar", folder, sample_bytes=3000)
    _servers.upload(s3_server, BUCKET, folder.parent)  # s3://readahead-tests/tar/...
    return folder


def stream(loader: Any) -> list[Any]:
    out: list[Any] = []
    run_loop(loader, range(1), lambda b, *_: out.append(b) if b is not None else None)
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_tar_shards_read_ahead_give_the_local_stream_under_faults(
    shards: pathlib.Path, proxy: Any, fresh: None, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    monkeypatch.setattr(_file, "CHUNK", 4096)  # shards of ~20-45 KiB: several chunks each
    monkeypatch.setattr(_file, "STREAM_MIN", 2)  # a batch has 2 or 3 samples of each shard
    local = corpus.dataset("tar", corpus.pattern("tar", str(shards)))
    options = {"storage_options": _servers.s3_options(proxy)}
    ds = corpus.dataset("tar", corpus.pattern("tar", f"s3://{BUCKET}/tar"), **options)
    want = stream(corpus.make_loader("tar", local, batch_size=8))
    proxy.reset()
    proxy.faults(every=20)  # 1 in 20 dropped, and as many 503 SlowDown and cut bodies
    got = stream(corpus.make_loader("tar", ds, batch_size=8, num_workers=workers))
    assert len(got) == len(want)
    for step, (x, y) in enumerate(zip(want, got, strict=True)):
        assert first_difference(x, y) is None, f"step {step}: {first_difference(x, y)}"
    spans = [e["range"].removeprefix("bytes=").split("-") for e in proxy.stats()["log"]]
    chunks = [a for a, b in spans if int(a) % 4096 == 0 and int(b) - int(a) == 4095]
    assert len(chunks) > 40, "few chunks streamed: the test does not reach read-ahead"
    faults = proxy.stats()["faults"]
    assert faults["drop"] or faults["slowdown"] or faults["truncate"], faults


def test_a_process_whose_read_ahead_is_still_running_ends(shards: pathlib.Path, proxy: Any) -> None:
    """Read-ahead that never finishes (held forever, in the main process and in each
    DataLoader worker) keeps neither from exiting: its threads are daemons."""
    code = (
        "import json, sys, threading\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "import seekdata\n"
        "from seekdata.sources import remote\n"
        "from seekdata.sources.remote import file as _file\n"
        "from tests.helpers import remote_corpus as corpus\n"
        "job = json.loads(sys.argv[1])\n"
        "_file.CHUNK = 4096\n"
        "fetch = _file.RemoteFile._fetch\n"
        "def held(self, start, stop, **how):\n"
        "    ahead = threading.current_thread().name == 'seekdata-ahead'\n"
        "    if getattr(self, 'held', False) and ahead:\n"
        "        threading.Event().wait()  # never\n"
        "    return fetch(self, start, stop, **how)\n"
        "_file.RemoteFile._fetch = held\n"
        "def hold(_worker=None):  # a shard streamed: its read-ahead started, and held\n"
        "    f = _file.RemoteFile(remote.Stores(job['options']), job['url'], size=job['size'])\n"
        "    f.held = True\n"
        "    for _ in range(2):\n"
        "        remote.prefetch([(f, a, a + 10) for a in (0, 100, 200, 300)], shards=True)\n"
        "    assert _file._flights().threads, 'nothing is read ahead'\n"
        "ds = corpus.dataset('tar', job['urls'], storage_options=job['options'])\n"
        "hold()\n"
        "for workers in (0, 2):\n"
        "    sampler = seekdata.DistributedSampler(ds, order='shards', seed=0)\n"
        "    loader = seekdata.StatefulDataLoader(ds, batch_size=8, sampler=sampler, seed=0,\n"
        "        collate_fn=corpus.collate_tar, num_workers=workers, worker_init_fn=hold)\n"
        "    assert sum(len(b['key']) for b in loader) == len(ds)\n"
        "print('done', flush=True)\n"
    )
    shard = sorted(shards.glob("*.tar"))[0]
    job = {
        "urls": corpus.pattern("tar", f"s3://{BUCKET}/tar"),
        "url": f"s3://{BUCKET}/tar/{shard.name}",
        "size": shard.stat().st_size,
        "options": _servers.s3_options(proxy),
    }
    root = str(pathlib.Path(__file__).resolve().parents[3])
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(job), root],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-3000:]
