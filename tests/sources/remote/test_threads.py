"""Remote files under thread workers: one process, one client, one memory, one read-ahead.

Thread workers (``worker_method="thread"``) are threads of one process, so they share what a
process holds: the dataset's clients (:class:`~seekdata.sources.remote.Stores`), the memory of
fetched bytes, and the requests in flight. A range another worker is fetching is waited for,
never fetched again, so an epoch of remote tar shards in a shard-local order costs the server
each chunk once — where two worker processes, with no ``Cache``, each download every shard.
The batches are the same, bit for bit, as ``num_workers=0`` and as process workers.
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

import seekdata
from seekdata import _servers
from seekdata.order import Shards
from seekdata.sources.remote import RemoteFile, Stores, obstores
from seekdata.sources.remote import file as _file
from seekdata.testing import first_difference
from tests.helpers import remote_corpus as corpus

BUCKET = "thread-tests"
CHUNK = 4096  # several chunks per small shard
DATA = bytes(range(256)) * 1024  # 256 KiB, each byte's value its offset mod 256


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("thread-tar")
    corpus.write("tar", folder / "tar", sample_bytes=1500)
    return folder


@pytest.fixture(scope="module")
def bucket(s3_server: Any, folder: pathlib.Path) -> str:
    client = _servers.s3_client(s3_server)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="data.bin", Body=DATA)
    _servers.upload(s3_server, BUCKET, folder)  # s3://thread-tests/tar/...
    return f"s3://{BUCKET}"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty memory, no previous batch, nothing in flight, 4 KiB chunks."""
    monkeypatch.setattr(_file, "CHUNK", CHUNK)
    _file.reset()


def tar_gets(proxy: Any) -> list[tuple[str, str, int]]:
    """(path, range, bytes) of each GET of a shard the server answered."""
    return [
        (e["path"], e["range"], e["bytes"])
        for e in proxy.stats()["log"]
        if e["method"] == "GET" and e["path"].endswith(".tar")
    ]


def loader(
    ds: Any, num_workers: int, method: str = "multiprocessing", batch: int = 16, window: int = 2
) -> Any:
    sampler = seekdata.DistributedSampler(ds, 1, 0, order=Shards(window=window), seed=corpus.SEED)
    return seekdata.StatefulDataLoader(
        ds, batch_size=batch, sampler=sampler, num_workers=num_workers,
        collate_fn=corpus.collate_tar, seed=corpus.SEED, worker_method=method,
    )  # fmt: skip


def test_an_epoch_under_two_thread_workers_fetches_each_sample_once_and_equals_the_others(
    bucket: str, folder: pathlib.Path, proxy: Any, fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch reads its samples' own ranges (no gap read between them, no shard streamed):
    under two thread workers, which read the same shards at once, the server sends each
    sample's bytes once, as with no workers, and the batches are the same bit for bit as
    with no workers and with two worker processes. (What processes fetch twice — the
    chunks of a shard both stream — is the next test's.)"""
    monkeypatch.setattr(_file, "GAP", 0)
    monkeypatch.setattr(_file, "STREAM_MIN", 1 << 30)
    urls = corpus.pattern("tar", f"{bucket}/tar")
    ds = corpus.dataset("tar", urls, storage_options=_servers.s3_options(proxy))
    runs: dict[str, list[Any]] = {}
    sent: dict[str, collections.Counter[tuple[str, int]]] = {}
    for name, workers, method in (
        ("threads", 2, "thread"),
        ("workers 0", 0, "multiprocessing"),
        ("processes", 2, "multiprocessing"),
    ):
        _file.reset()
        proxy.reset()
        runs[name] = corpus.stream(loader(ds, workers, method), epochs=1)
        sent[name] = byte_counts(proxy)
    for name in ("workers 0", "processes"):
        assert len(runs[name]) == len(runs["threads"])
        for step, (x, y) in enumerate(zip(runs["threads"], runs[name], strict=True)):
            assert first_difference(x, y) is None, f"{name}, step {step}: {first_difference(x, y)}"
    assert sent["threads"] == sent["workers 0"] == sent["processes"]  # the same bytes...
    assert set(sent["threads"].values()) == {1}  # ... each once


def test_an_epoch_streamed_under_two_thread_workers_requests_each_chunk_once(
    bucket: str, proxy: Any, fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch with shards streamed in chunks (4 KiB here; no gap read, so that the first
    batches do not bring in whole shards; one shard at a time, batches of 4, streamed from 2
    of its samples in a batch, so that each worker's consecutive batches stream the small
    shards): two thread workers ask for the chunks of the shards they both read, and each is
    requested once; two worker processes request some twice (each into its own memory)."""
    monkeypatch.setattr(_file, "GAP", 0)
    monkeypatch.setattr(_file, "STREAM_MIN", 2)
    urls = corpus.pattern("tar", f"{bucket}/tar")
    ds = corpus.dataset("tar", urls, storage_options=_servers.s3_options(proxy))
    chunks: dict[str, collections.Counter[tuple[str, str]]] = {}
    for name, method in (("threads", "thread"), ("processes", "multiprocessing")):
        _file.reset()
        proxy.reset()
        corpus.stream(loader(ds, 2, method, batch=4, window=1), epochs=1)
        _file.settle()
        chunks[name] = collections.Counter(
            (path, span) for path, span, n in tar_gets(proxy) if is_chunk(span, n)
        )
    assert chunks["threads"] and set(chunks["threads"].values()) == {1}, chunks["threads"]
    assert max(chunks["processes"].values()) == 2  # (what the test would see without sharing)


def is_chunk(span: str, nbytes: int) -> bool:
    """Whether a GET of ``span`` (``bytes=a-b``) answered with ``nbytes`` was a chunk: from a
    chunk's start to the next one's, or to the end of its object (fewer bytes)."""
    start, stop = (int(x) for x in span.removeprefix("bytes=").split("-"))
    return start % CHUNK == 0 and ((stop + 1) % CHUNK == 0 or nbytes < CHUNK)


def byte_counts(proxy: Any) -> collections.Counter[tuple[str, int]]:
    """How many times the server sent each byte of each shard (GETs of ``.tar`` objects)."""
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    for path, span, _ in tar_gets(proxy):
        a, b = (int(x) for x in span.removeprefix("bytes=").split("-"))
        counts.update((path, i) for i in range(a, b + 1))
    return counts


def two_threads(*work: Any) -> None:
    """Run each of ``work`` in a thread of its own, all at once; raise the first error."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(work))

    def run(fn: Any) -> None:
        start.wait()
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]


def test_two_threads_streaming_one_object_fetch_each_chunk_once(
    bucket: str, proxy: Any, fresh: None
) -> None:
    """Two workers streaming the same object in a shard-local order (each its own previous
    batch, as two worker processes): the chunks either asks for, and the read-ahead of the
    rest, are each requested once, whichever thread asks first."""
    f = RemoteFile(Stores(_servers.s3_options(proxy)), f"{bucket}/data.bin")
    chunks = len(DATA) // CHUNK

    def worker(offset: int) -> None:
        for step in range(0, chunks, 2):  # batches of 4 ranges, each in two chunks
            at = [(step + i // 2) * CHUNK + offset + 300 * i for i in range(4)]
            got = _file.read_batch([(f, a, a + 100) for a in at], shards=True)
            assert got == [DATA[a : a + 100] for a in at]

    two_threads(lambda: worker(0), lambda: worker(1500))
    _file.settle()
    asked = collections.Counter(e["range"] for e in proxy.stats()["log"] if e["method"] == "GET")
    chunk = {f"bytes={c * CHUNK}-{(c + 1) * CHUNK - 1}" for c in range(chunks)}
    assert {r: n for r, n in asked.items() if r in chunk} == dict.fromkeys(chunk, 1)
    # besides: only each thread's first batch (no previous batch: its own ranges)
    assert sum(n for r, n in asked.items() if r not in chunk) <= 2, asked


def byte_counts_of(proxy: Any, suffix: str) -> collections.Counter[int]:
    counts: collections.Counter[int] = collections.Counter()
    for e in proxy.stats()["log"]:
        if e["method"] == "GET" and e["path"].endswith(suffix):
            a, b = (int(x) for x in e["range"].removeprefix("bytes=").split("-"))
            counts.update(range(a, b + 1))
    return counts


def test_threads_reading_forward_share_one_read_ahead(bucket: str, proxy: Any, fresh: None) -> None:
    """Reads of one sample at a time (no batch prefetch: ``ds[i]``) by several threads at
    once: a range another thread is fetching is waited for, not requested again."""
    f = RemoteFile(Stores(_servers.s3_options(proxy)), f"{bucket}/data.bin")
    step = 2000

    def reader() -> None:
        for a in range(0, len(DATA), step):
            assert f.read(a, a + step) == DATA[a : a + step]

    two_threads(reader, reader, reader)
    counts = byte_counts_of(proxy, "/data.bin")
    assert len(counts) == len(DATA) and set(counts.values()) == {1}, collections.Counter(
        counts.values()
    )


FORKS = """
import json, os, sys
import seekdata
from seekdata.sources.remote import locate, obstores, stores
from seekdata.wds import TarShards

spec = json.loads(sys.argv[1])
ds = TarShards(spec["urls"], storage_options=spec["options"])  # its index: read with obstore
first = ds[0]["bin"]  # a sample, with obstore
assert obstores.used, "the main process did not read with obstore"
sampler = seekdata.DistributedSampler(ds, 1, 0, order="shards", seed=0)
loader = seekdata.StatefulDataLoader(ds, batch_size=8, sampler=sampler, num_workers=2,
                                     collate_fn=lambda s: [x["__key__"] for x in s], seed=0)
keys = [k for batch in loader for k in batch]  # forked worker processes read, with fsspec
assert sorted(keys) == sorted(ds[i]["__key__"] for i in range(len(ds)))
pid = os.fork()  # a forked child asked for obstore by name: an error, not a hang
if pid == 0:
    status = 4
    try:
        url = spec["urls"].replace("{00..05}", "00")
        stores.Stores({**spec["options"], "backend": "obstore"}).backend(locate(url))
    except RuntimeError as err:
        status = 0 if "forked from one that used it" in str(err) else 3
    finally:
        os._exit(status)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
print("done", len(keys))
"""


@pytest.mark.skipif(not obstores.installed(), reason="obstore is not installed")
def test_worker_processes_forked_after_obstore_was_used_read_with_fsspec_and_end(
    bucket: str, proxy: Any
) -> None:
    """obstore hangs in a process forked after it was used: the main process reads with it
    (the index, a sample), then forks two DataLoader workers, which read the epoch through
    fsspec and end — a real process, bounded in wall time."""
    urls = corpus.pattern("tar", f"{bucket}/tar")
    spec = {"urls": urls, "options": _servers.s3_options(proxy)}
    done = subprocess.run(
        [sys.executable, "-c", FORKS, json.dumps(spec)],
        capture_output=True, text=True, timeout=180, cwd=pathlib.Path(__file__).parents[3],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "done"


def test_the_backend_option_is_checked_and_the_choice_given_wins(
    proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seekdata.sources.remote import check_options, locate, stores

    with pytest.raises(ValueError, match=r"storage_options\['backend'\] must be one of"):
        check_options({"backend": "boto"}, "TarShards")
    options = _servers.s3_options(proxy)
    url = f"s3://{BUCKET}/data.bin"
    fsspec = stores.Stores({**options, "backend": "fsspec"}).backend(locate(url))
    assert stores.backend_name(fsspec) == "fsspec"
    with pytest.raises(ValueError, match="reads s3:// URLs only"):
        stores.Stores({"backend": "obstore"}).backend(locate("https://host/x.tar"))
    if obstores.installed():
        chosen = stores.Stores({**options, "backend": "obstore"}).backend(locate(url))
        assert stores.backend_name(chosen) == "obstore"
        assert stores.backend_name(stores.Stores(options).backend(locate(url))) == "obstore"
        profile = {"profile": "default", "endpoint_url": proxy.url}  # boto's chain: fsspec
        assert obstores.config(profile) is None
        with pytest.raises(ValueError, match="takes explicit credentials"):
            stores.Stores({**profile, "backend": "obstore"}).backend(locate(url))
    assert obstores.config(options) is not None
    monkeypatch.setenv("AWS_SESSION_TOKEN", "of-another-job")  # obstore would send it too
    assert obstores.config(options) is None


def test_datasets_with_the_same_options_share_one_client(bucket: str, proxy: Any) -> None:
    options = _servers.s3_options(proxy)
    a = RemoteFile(Stores(options), f"{bucket}/data.bin")
    b = RemoteFile(Stores(dict(options)), f"{bucket}/data.bin")
    assert a.stores.backend(a.loc) is b.stores.backend(b.loc)
    c = RemoteFile(Stores({**options, "backend": "fsspec"}), f"{bucket}/data.bin")
    assert c.stores.backend(c.loc) is not a.stores.backend(a.loc)
