"""TarShards on the corpus manifest: the same samples and signature with and without it, built
from one read per folder, each shard's index read by its first reader (counted with Python's
audit events), stale shards refused naming the file and the manifest, and a checkpoint signed
in the earlier form still resuming."""

from __future__ import annotations

import json
import os
import pathlib
import threading

import pytest
import webdataset as wds

import seekdata
from seekdata.sources.files import manifest as mf
from seekdata.sources.wds import tarindex
from seekdata.testing import assert_exact_resume
from seekdata.tools.cli import main
from seekdata.wds import TarShards
from tests.helpers import opens

SIZES = (5, 3, 6, 4)


def write(folder: pathlib.Path, sizes: tuple[int, ...] = SIZES, start: int = 0) -> str:
    i = start
    for s, size in enumerate(sizes):
        with wds.TarWriter(str(folder / f"shard-{s:03d}.tar")) as sink:
            for _ in range(size):
                sink.write({"__key__": f"s{i:04d}", "bin": i.to_bytes(2, "little") * 3, "cls": i})
                i += 1
    return str(folder / f"shard-{{000..{len(sizes) - 1:03d}}}.tar")


def indexed(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> str:
    pattern = write(tmp_path)
    assert main(["index", pattern]) == 0
    capsys.readouterr()
    return pattern


def test_the_same_samples_and_signature_with_and_without_a_manifest(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = write(tmp_path)
    before = TarShards(pattern)  # no manifest yet: every index read now
    assert main(["index", pattern]) == 0
    ds, bare = TarShards(pattern), TarShards(pattern, manifest=False)
    assert not ds._eager and len(bare._eager) == len(SIZES)
    assert ds.stream_signature == bare.stream_signature == before.stream_signature
    assert ds.stream_signature.startswith(f"TarShards(samples={sum(SIZES)}, d2:")
    assert ds.signature_of_first(8) == bare.signature_of_first(8)
    assert ds.shard_sizes == list(SIZES) and len(ds) == sum(SIZES)
    assert [ds[i] for i in range(len(ds))] == [bare[i] for i in range(len(bare))]
    assert [ds.key_of(i) for i in range(len(ds))] == [f"s{i:04d}" for i in range(len(ds))]
    named = TarShards(pattern, manifest=tmp_path / mf.manifest_name("tar"))
    assert named.stream_signature == ds.stream_signature
    # a subset of the folder, in another order: its own order, looked up by name
    sub = [str(tmp_path / "shard-002.tar"), str(tmp_path / "shard-000.tar")]
    assert TarShards(sub).shard_sizes == [6, 5] and not TarShards(sub)._eager
    assert TarShards(sub).stream_signature == TarShards(sub, manifest=False).stream_signature


def test_construction_reads_the_manifest_and_a_read_its_shards_index(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = indexed(tmp_path, capsys)
    with opens.counting() as opened:
        ds = TarShards(pattern)
    assert [os.path.basename(p) for p in opened] == ["seekdata-manifest-tar.json"]
    with opens.counting() as opened:
        ds[6]  # shard 1
        ds[7]
    assert sorted(os.path.basename(p) for p in opened) == [
        "shard-001.tar",
        "shard-001.tar" + tarindex.INDEX_SUFFIX,
    ]


def test_each_index_is_read_once_by_many_threads(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = TarShards(indexed(tmp_path, capsys))
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def read() -> None:
        start.wait()
        try:
            for i in range(len(ds)):
                assert ds[i]["__key__"] == f"s{i:04d}"
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and ds._lazy.made == len(SIZES)


def test_a_stale_manifest_is_refused_naming_the_file(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = indexed(tmp_path, capsys)
    manifest = str(tmp_path / "seekdata-manifest-tar.json")
    # added after indexing: at construction
    (tmp_path / "more").mkdir()
    write(tmp_path / "more", (2,), start=100)
    added = tmp_path / "shard-004.tar"
    os.replace(tmp_path / "more" / "shard-000.tar", added)
    with pytest.raises(ValueError, match=f"{added} is not in the manifest {manifest}"):
        TarShards(pattern.replace("003", "004"))
    # changed: at its first read, by the open's fstat
    ds = TarShards(pattern)
    shard = tmp_path / "shard-002.tar"
    data = shard.read_bytes()
    shard.write_bytes(data + bytes(1024))
    with pytest.raises(
        ValueError, match=rf"{shard}: it is {len(data) + 1024} bytes now.*{manifest}"
    ):
        ds[9]
    shard.write_bytes(data)
    # missing: at its first read
    ds = TarShards(pattern)
    gone = tmp_path / "shard-003.tar"
    gone.unlink()
    with pytest.raises(ValueError, match=rf"{gone}: it cannot be opened.*missing.*{manifest}"):
        ds[len(ds) - 1]


def test_an_index_rebuilt_after_the_manifest_is_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = indexed(tmp_path, capsys)
    ipath = tmp_path / ("shard-001.tar" + tarindex.INDEX_SUFFIX)
    doc = json.loads(ipath.read_text())
    doc["keys"][0] = "other"
    ipath.write_text(json.dumps(doc))
    ds = TarShards(pattern)
    assert ds[0]["__key__"] == "s0000"  # other shards read
    with pytest.raises(ValueError, match="index was rebuilt after the manifest"):
        ds[5]


def test_a_checkpoint_signed_in_the_earlier_form_still_resumes(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = TarShards(indexed(tmp_path, capsys))
    loader = seekdata.StatefulDataLoader(ds, batch_size=3, shuffle=True, seed=2, collate_fn=list)
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    old = ds._older_signature(len(ds))
    assert old.startswith(f"TarShards(samples={len(ds)}, ") and "d2:" not in old
    state["dataset"] = old  # as an earlier release wrote it
    again = seekdata.StatefulDataLoader(ds, batch_size=3, shuffle=True, seed=2, collate_fn=list)
    with pytest.warns(UserWarning, match="form earlier releases wrote"):
        again.load_state_dict(state)
    state["dataset"] = old.replace(old[-4:], "0000")  # another old signature: refused
    with pytest.raises(seekdata.StateMismatchError), pytest.warns(UserWarning):
        seekdata.StatefulDataLoader(
            ds, batch_size=3, shuffle=True, seed=2, collate_fn=list
        ).load_state_dict(state)


def test_exact_resume_on_a_manifest_with_workers(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = TarShards(indexed(tmp_path, capsys))

    def make(**kw: object) -> seekdata.StatefulDataLoader:
        sampler = seekdata.DistributedSampler(ds, 1, 0, order="shards", seed=4)
        return seekdata.StatefulDataLoader(
            ds, batch_size=4, sampler=sampler, collate_fn=lambda b: [s["__key__"] for s in b],
            **kw,
        )  # fmt: skip

    assert_exact_resume(
        lambda **kw: make(**{"num_workers": 2, **kw}),
        epochs=2,
        stop_at=(1, 3),
        resume_kwargs={"num_workers": 0},
    )
