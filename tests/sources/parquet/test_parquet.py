"""seekdata.parquet.ParquetRows: rows of Parquet files, row groups as shards, local and remote.

Rows and columns as pyarrow reads them; refusals that name the file; ``order="shards"`` reads
each row group once per epoch; the same stream from local files, from the S3 server and from
the Hugging Face Hub's layout served over HTTP, bit for bit, resumed at every step, on another
number of workers and another world size.
"""

from __future__ import annotations

import itertools
import pathlib
import shutil
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from seekdata import _servers
from seekdata.parquet import ParquetRows
from seekdata.testing import assert_exact_resume, first_difference, run_loop
from tests.helpers import remote_corpus as corpus


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("parquet")
    corpus.write("parquet", out)
    return out


@pytest.fixture(scope="module")
def local(folder: pathlib.Path) -> ParquetRows:
    return ParquetRows(corpus.pattern("parquet", str(folder)))


@pytest.fixture(scope="module")
def bucket(s3_server: Any, folder: pathlib.Path) -> str:
    _servers.upload(s3_server, "parquet-tests", folder)
    return "s3://parquet-tests"


def remote_rows(proxy: Any, bucket: str, **kwargs: Any) -> ParquetRows:
    return ParquetRows(
        corpus.pattern("parquet", bucket), storage_options=_servers.s3_options(proxy), **kwargs
    )


def table(folder: pathlib.Path) -> pa.Table:
    files = sorted(folder.glob("rows-*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files])


# -- what it reads -----------------------------------------------------------------------


def test_rows_columns_and_shards_are_the_files(local: ParquetRows, folder: pathlib.Path) -> None:
    reference = table(folder)
    assert len(local) == reference.num_rows == 150 + 190 + 230
    assert local.columns == ["id", "x", "text", "vec", "pad"]
    assert sum(local.shard_sizes) == len(local) and max(local.shard_sizes) == 32
    assert local.shard_starts[:3] == [0, 32, 64]
    picks = [5, 149, 150, 569, 300, 5]
    batch = local.__getitems__(picks)
    assert torch.equal(batch["id"], torch.tensor(reference["id"].take(picks).to_numpy()))
    assert batch["x"].dtype == torch.float32
    assert batch["text"] == reference["text"].take(picks).to_pylist()
    assert batch["vec"].shape == (6, 4) and batch["vec"].dtype == torch.int16
    assert torch.equal(
        batch["vec"][2], torch.tensor(reference["vec"][150].as_py(), dtype=torch.int16)
    )
    row = local[-1]
    assert row["id"].item() == reference["id"][-1].as_py() and row["text"] == "row 2229"


def test_columns_and_formats(folder: pathlib.Path) -> None:
    pattern = corpus.pattern("parquet", str(folder))
    two = ParquetRows(pattern, ["text", "id"], format="numpy")
    batch = two.__getitems__([3, 4])
    assert list(batch) == ["text", "id"] and isinstance(batch["id"], np.ndarray)
    assert batch["text"].tolist() == ["row 3", "row 4"]
    arrow = ParquetRows(pattern, ["id"], format="arrow").__getitems__([7])
    assert isinstance(arrow["id"], pa.ChunkedArray) and arrow["id"].to_pylist() == [7]
    assert two.stream_signature != ParquetRows(pattern).stream_signature  # columns decide


def test_refusals_name_the_file(folder: pathlib.Path, tmp_path: pathlib.Path) -> None:
    pattern = corpus.pattern("parquet", str(folder))
    with pytest.raises(ValueError, match=r"has no column 'label'"):
        ParquetRows(pattern, ["id", "label"])
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int32())}), other)
    with pytest.raises(ValueError, match=r"other.parquet holds columns .* same types"):
        ParquetRows([str(folder / "rows-00000-of-00003.parquet"), str(other)], ["id"])
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=r"bad.parquet is not a readable Parquet file"):
        ParquetRows(str(bad))
    with pytest.raises(ValueError, match=r"format must be one of"):
        ParquetRows(pattern, format="pandas")


def test_a_file_rewritten_under_the_dataset_is_refused(
    folder: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "one.parquet"
    shutil.copy(folder / "rows-00000-of-00003.parquet", path)
    ds = ParquetRows(str(path))
    pq.write_table(pq.read_table(path).slice(0, 3), path)
    with pytest.raises(ValueError, match=r"one.parquet changed after this dataset read its footer"):
        ds[0]


def test_shard_order_reads_each_row_group_once_per_epoch(
    bucket: str, proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seekdata.sources.remote import Memory
    from seekdata.sources.remote import file as _file

    monkeypatch.setattr(_file, "_memory", Memory())
    ds = remote_rows(proxy, bucket)
    proxy.reset()
    loader = corpus.make_loader("parquet", ds, batch_size=16)
    seen = [i for batch in loader for i in batch["id"].tolist()]
    assert len(seen) == len(set(seen)) == len(ds)
    gets = [e for e in proxy.stats()["log"] if e["method"] == "GET"]
    assert gets  # the files are larger than the tail read with their footers
    # no byte of any file fetched twice in the epoch: each row group read once
    spans: dict[str, list[tuple[int, int]]] = {}
    for e in gets:
        a, b = map(int, e["range"].removeprefix("bytes=").split("-"))
        spans.setdefault(e["path"], []).append((a, b + 1))
    for path, ranges in spans.items():
        ranges.sort()
        assert all(b <= c for (_, b), (c, _) in itertools.pairwise(ranges)), (path, ranges)


# -- local and remote: the same stream ------------------------------------------------------


def stream(loader: Any, epochs: int = 2) -> list[Any]:
    out: list[Any] = []
    run_loop(loader, range(epochs), lambda b, *_: out.append(b) if b is not None else None)
    return out


def assert_same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert first_difference(x, y) is None, f"step {step}: {first_difference(x, y)}"


def test_remote_gives_the_local_stream_and_resumes_exactly(
    local: ParquetRows, bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    ds = remote_rows(proxy, bucket, index_dir=tmp_path / "idx")
    assert ds.stream_signature == local.stream_signature

    def make(dataset: ParquetRows, **kwargs: Any) -> Any:
        return corpus.make_loader("parquet", dataset, batch_size=16, **kwargs)

    assert_same(stream(make(local)), stream(make(ds)))
    # every step, workers 0; then from 2 workers to 0 at a few steps of both epochs (18 each)
    assert_exact_resume(lambda **kw: make(ds, **kw), epochs=2)
    assert_exact_resume(
        lambda **kw: make(ds, **{"num_workers": 2, **kw}),
        epochs=2,
        stop_at=(3, 18, 25),
        resume_kwargs={"num_workers": 0},
    )


def test_resume_on_another_world_size_continues_the_global_stream(
    local: ParquetRows, bucket: str, proxy: Any
) -> None:
    ds = remote_rows(proxy, bucket)
    reference = [
        corpus.rows_of("parquet", b)
        for b in stream(corpus.make_loader("parquet", local, batch_size=16), 1)
    ]
    two = [corpus.make_loader("parquet", ds, batch_size=8, world=2, rank=r) for r in range(2)]
    its = [iter(loader) for loader in two]
    got = []
    for _ in range(5):  # global batch 16 = 2 ranks × 8
        parts = [corpus.rows_of("parquet", next(it)) for it in its]
        got.append([row for pair in zip(*parts, strict=True) for row in pair])
    state = two[0].state_dict()
    del its, two
    one = corpus.make_loader("parquet", ds, batch_size=16, num_workers=2)
    one.load_state_dict(state)
    got += [corpus.rows_of("parquet", b) for b in one]
    assert got == reference


def test_the_hub_layout_reads_by_url(
    local: ParquetRows,
    folder: pathlib.Path,
    http_server: Any,
    http_root: pathlib.Path,
    tmp_path: pathlib.Path,
) -> None:
    # the Hub serves a dataset's files at {endpoint}/datasets/org/name/resolve/main/<path>
    repo = http_root / "datasets" / "org" / "name" / "resolve" / "main" / "data"
    repo.mkdir(parents=True)
    for k, f in enumerate(sorted(folder.glob("rows-*.parquet"))):
        shutil.copy(f, repo / f"train-{k:05d}-of-00003.parquet")
    ds = ParquetRows(
        "hf://datasets/org/name/data/train-{00000..00002}-of-00003.parquet",
        storage_options={"endpoint": http_server.url},
        index_dir=tmp_path / "idx",
    )
    assert len(ds) == len(local) and ds.shard_sizes == local.shard_sizes
    picks = list(range(0, len(ds), 37))
    assert first_difference(ds.__getitems__(picks), local.__getitems__(picks)) is None
    again = ParquetRows(
        "hf://datasets/org/name/data/train-{00000..00002}-of-00003.parquet",
        storage_options={"endpoint": http_server.url},
        index_dir=tmp_path / "idx",
    )  # footers kept under index_dir
    assert again.shard_sizes == ds.shard_sizes


def test_a_loader_state_from_local_files_resumes_on_the_bucket(
    local: ParquetRows, bucket: str, proxy: Any
) -> None:
    loader = corpus.make_loader("parquet", local)
    it = iter(loader)
    for _ in range(4):
        next(it)
    state = loader.state_dict()
    rest_local = [corpus.rows_of("parquet", b) for b in it]
    moved = corpus.make_loader("parquet", remote_rows(proxy, bucket))
    moved.load_state_dict(state)
    assert [corpus.rows_of("parquet", b) for b in moved] == rest_local
