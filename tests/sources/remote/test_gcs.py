"""Every file-backed source read over ``gs://`` from a GCS emulator: the local items, exactly.

The server is fake-gcs-server (seekdata._servers: ``gcs_server``), a process of its own
on 127.0.0.1, reached through gcsfs with ``endpoint_url=`` and ``token="anon"``. Tar shards,
token windows, packed documents and Parquet rows give the local items and the local stream; a
loader resumed mid-epoch (2 workers, then 0) continues it exactly; every range read carries the
generation its index recorded (``ifGenerationMatch``), so an object replaced after its index was
built is refused at its first read, naming it; transient faults (a proxy in front of the
server) are retried to the same bytes; a missing gcsfs is one line naming the extra.
"""

from __future__ import annotations

import json
import pathlib
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from seekdata import _servers
from seekdata.testing import assert_exact_resume, first_difference
from tests.helpers import remote_corpus as corpus
from tests.helpers.remote_corpus import stream

KINDS = ("tar", "windows", "packed", "parquet")
BUCKET = "gcs-tests"


@pytest.fixture(scope="module")
def gcs() -> Iterator[_servers.GCSServer]:
    with _servers.gcs_server() as server:
        yield server


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, gcs: Any) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp("gcs")
    out = {}
    for kind in KINDS:
        out[kind] = root / kind
        corpus.write(kind, out[kind])
    _servers.gcs_upload(gcs, BUCKET, root)  # gs://gcs-tests/<kind>/...
    return out


@pytest.fixture
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing read before this test is kept: each read below goes to the server."""
    from seekdata.sources.remote import Memory
    from seekdata.sources.remote import file as _file

    monkeypatch.setattr(_file, "_memory", Memory())


def local_ds(folders: dict[str, pathlib.Path], kind: str) -> Any:
    return corpus.dataset(kind, corpus.pattern(kind, str(folders[kind])))


def gs_ds(server: Any, kind: str, bucket: str = BUCKET, **options: Any) -> Any:
    urls = corpus.pattern(kind, f"gs://{bucket}/{kind}")
    return corpus.dataset(kind, urls, storage_options=_servers.gcs_options(server), **options)


def plain(item: Any) -> Any:
    """A tar sample without the keys that name where it was read from."""
    if isinstance(item, dict) and "__key__" in item:
        return {k: v for k, v in item.items() if k not in ("__url__", "__local_path__")}
    return item


def items(ds: Any, indices: list[int]) -> Any:
    """``ds``'s items at ``indices``, read as a loader's worker reads them (a batch at once)."""
    if hasattr(ds, "__getitems__"):
        return ds.__getitems__(indices)
    return [ds[i] for i in indices]


@pytest.mark.parametrize("kind", KINDS)
def test_gs_sources_give_the_local_items_and_stream(
    folders: dict[str, pathlib.Path], gcs: Any, kind: str
) -> None:
    local, ds = local_ds(folders, kind), gs_ds(gcs, kind)
    assert isinstance(ds, type(local)) and len(ds) == len(local)
    everything = list(range(len(local)))
    got, want = items(ds, everything), items(local, everything)
    if kind == "tar":
        got, want = [plain(x) for x in got], [plain(x) for x in want]
    assert first_difference(got, want) is None
    a, b = stream(corpus.make_loader(kind, local)), stream(corpus.make_loader(kind, ds))
    assert len(a) == len(b)
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert first_difference(x, y) is None, f"step {step}: {first_difference(x, y)}"


@pytest.mark.parametrize("kind", ("tar", "packed", "parquet"))
def test_a_loader_resumed_mid_epoch_on_gs_continues_the_local_stream(
    folders: dict[str, pathlib.Path], gcs: Any, kind: str
) -> None:
    local, ds = local_ds(folders, kind), gs_ds(gcs, kind)
    want = stream(corpus.make_loader(kind, local), 2)
    stop = len(want) // 4 + 1  # mid-epoch 0
    first = corpus.make_loader(kind, ds, num_workers=2)
    it = iter(first)
    got = [next(it) for _ in range(stop)]
    state = json.loads(json.dumps(first.state_dict()))
    del it, first
    resumed = corpus.make_loader(kind, gs_ds(gcs, kind))  # a new dataset: its kept indexes
    resumed.load_state_dict(state)
    got += list(resumed) + list(resumed)  # the rest of epoch 0, then epoch 1
    assert len(got) == len(want)
    for step, (x, y) in enumerate(zip(got, want, strict=True)):
        assert first_difference(x, y) is None, f"step {step}: {first_difference(x, y)}"
    # interrupted at other points, epoch ends included, it resumes exactly too
    assert_exact_resume(
        lambda **kw: corpus.make_loader(kind, ds, **kw), epochs=2, stop_at=(0, 1, len(want) // 2)
    )


def test_every_read_carries_the_generation_its_index_recorded(
    folders: dict[str, pathlib.Path], gcs: Any, fresh_memory: None
) -> None:
    ds = gs_ds(gcs, "tar")
    generation = ds._shards[1].index.etag
    meta = urllib.request.urlopen(f"{gcs.url}/storage/v1/b/{BUCKET}/o/tar%2Ftrain-01.tar")
    assert generation == json.load(meta)["generation"]  # the object's generation, not an ETag
    before = len(gcs.requests())
    ds.__getitems__(list(range(ds.shard_starts[1], ds.shard_starts[2])))
    reads = [
        target
        for method, target, status in gcs.requests()[before:]
        if method == "GET" and "alt=media" in target and status == 206
    ]
    assert reads, "no range read reached the server"
    for target in reads:
        assert urlsplit(target).path.endswith("/o/tar%2Ftrain-01.tar"), target
        assert parse_qs(urlsplit(target).query)["ifGenerationMatch"] == [generation], target


def test_an_object_replaced_after_its_index_was_built_is_refused_naming_it(
    folders: dict[str, pathlib.Path], gcs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seekdata.sources.remote import Memory
    from seekdata.sources.remote import file as _file

    bucket = "gcs-changing"
    _servers.gcs_upload(gcs, bucket, folders["tar"].parent, prefix="")
    tar = gs_ds(gcs, "tar", bucket)  # the indexes written beside the shards
    tokens = gs_ds(gcs, "windows", bucket)
    again = gs_ds(gcs, "tar", bucket)  # the kept indexes, read in one request each
    shard = (folders["tar"] / "train-02.tar").read_bytes()
    tok = (folders["windows"] / "tok-1.bin").read_bytes()
    # the same sizes, other bytes: only the generation tells
    _servers.gcs_put(gcs, bucket, "tar/train-02.tar", shard[::-1])
    _servers.gcs_put(gcs, bucket, "windows/tok-1.bin", tok[::-1])
    monkeypatch.setattr(_file, "_memory", Memory())  # what the builds read ahead is gone
    url = f"gs://{bucket}/tar/train-02.tar"
    for ds in (tar, again):
        assert ds[0]["__key__"] == "k00000"  # the other shards read on
        with pytest.raises(ValueError, match=rf"^{url} changed after its index was built \("):
            ds[ds.shard_starts[2]]
    with pytest.raises(ValueError, match=rf"gs://{bucket}/windows/tok-1.bin changed after"):
        items(tokens, list(range(len(tokens))))  # its windows in tok-1.bin among them
    # an intended change: the index rebuilt on request reads the new bytes
    smaller = (folders["tar"] / "train-00.tar").read_bytes()
    _servers.gcs_put(gcs, bucket, "tar/train-02.tar", smaller)
    rebuilt = gs_ds(gcs, "tar", bucket, rebuild_index=True)
    assert rebuilt.shard_sizes[2] == 9 and rebuilt.shard_sizes[:2] == tar.shard_sizes[:2]
    assert rebuilt[rebuilt.shard_starts[2]]["__key__"] == "k00000"


def test_transient_faults_are_retried_to_the_same_items(
    folders: dict[str, pathlib.Path], gcs: Any, fresh_memory: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seekdata.sources.remote import file as _file

    monkeypatch.setattr(_file, "GAP", 0)  # no neighbours coalesced: each sample a request
    local = local_ds(folders, "tar")
    want = [plain(local[i]) for i in range(len(local))]
    with _servers.fault_proxy(gcs, every=20) as proxy:
        ds = gs_ds(proxy, "tar")
        got = [plain(x) for x in ds.__getitems__(list(range(len(ds))))]
        faults = proxy.stats()["faults"]
    assert first_difference(got, want) is None
    assert faults["drop"] and faults["slowdown"] and faults["truncate"], faults


def test_a_missing_gcsfs_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from seekdata.parquet import ParquetRows
    from seekdata.tokens import TokenWindows
    from seekdata.wds import TarShards

    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as when the extra is not installed
    makes = (
        lambda: TarShards("gs://b/train-{0..1}.tar"),
        lambda: TokenWindows("gs://b/tok.bin", 8),
        lambda: ParquetRows("gs://b/rows.parquet"),
    )
    for make in makes:
        with pytest.raises(ImportError) as caught:
            make()
        message = str(caught.value)
        assert "\n" not in message and message.startswith("gs://b/"), message
        assert "needs the 'remote-gcs' extra" in message, message
        assert "missing: gcsfs" in message and "pip install 'seekdata[remote-gcs]'" in message
