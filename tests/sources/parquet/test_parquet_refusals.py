"""ParquetRows refuses what it cannot read truly, naming the file, the row group and a fix
that exists for Parquet (tests/sources/parquet/test_parquet.py: the rows themselves).

- a remote file replaced under the footer kept for it under ``index_dir``: the fix is
  ``rebuild_index=True`` (which exists, and works), never `seekdata index` (tar and tokens);
- a kept footer swapped for another file's, or a corrupt column chunk: a ``ValueError`` naming
  the file and the row group, not a bare pyarrow error;
- a kept footer whose header line is JSON nested too deep to parse: read again, as any
  unreadable one.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from seekdata import _servers
from seekdata.parquet import ParquetRows
from seekdata.sources.files import indexes as _indexes
from seekdata.sources.parquet import footers as _footers
from seekdata.sources.remote import Memory
from seekdata.sources.remote import file as _file
from tests.helpers import remote_corpus as corpus

BUCKET = "parquet-refusals"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("parquet-refusals")
    corpus.write("parquet", out)
    return out


@pytest.fixture
def remote(
    folder: pathlib.Path, s3_server: Any, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> dict[str, Any]:
    """The files in a bucket folder of this test's own, and what a dataset over them takes."""
    prefix = f"{request.node.name}/"
    _servers.upload(s3_server, BUCKET, folder, prefix)
    return {
        "urls": corpus.pattern("parquet", f"s3://{BUCKET}/{prefix}"),
        "prefix": prefix,
        "index_dir": tmp_path / "footers",
        "storage_options": _servers.s3_options(s3_server),
    }


def open_rows(remote: dict[str, Any], **options: Any) -> ParquetRows:
    return ParquetRows(
        remote["urls"],
        storage_options=remote["storage_options"],
        index_dir=remote["index_dir"],
        **options,
    )


def all_rows(ds: ParquetRows) -> list[int]:
    return ds.__getitems__(list(range(len(ds))))["id"].tolist()


@pytest.fixture
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_file, "_memory", Memory())  # what earlier reads kept is gone


def test_a_file_replaced_under_its_kept_footer_names_rebuild_index_which_works(
    folder: pathlib.Path, remote: dict[str, Any], s3_server: Any, fresh_memory: None
) -> None:
    local = ParquetRows(corpus.pattern("parquet", str(folder)))
    open_rows(remote)  # the footers kept under index_dir
    name = sorted(folder.glob("*.parquet"))[1].name
    replacement = sorted(folder.glob("*.parquet"))[0].read_bytes()  # another valid file
    _servers.s3_client(s3_server).put_object(
        Bucket=BUCKET, Key=remote["prefix"] + name, Body=replacement
    )
    ds = open_rows(remote)  # the kept footers again: no request
    with pytest.raises(ValueError) as err:
        all_rows(ds)
    message = str(err.value)
    assert f"s3://{BUCKET}/{remote['prefix']}{name} changed after its footer was read" in message
    assert "rebuild_index=True" in message and "seekdata index" not in message
    kept = _indexes.local_index_path(
        f"s3://{BUCKET}/{remote['prefix']}{name}", _footers.FOOTER_SUFFIX, str(remote["index_dir"])
    )
    assert kept in message
    healed = open_rows(remote, rebuild_index=True)
    want = all_rows(local)
    first, second = local.shard_starts[0], local.shard_starts[len(local._part(0).row_groups)]
    assert len(healed) == len(local) - 40  # the second file now holds the first one's 150 rows
    assert all_rows(healed)[:second] == want[:second]
    assert all_rows(healed)[second : second + 150] == want[first:150]
    assert all_rows(open_rows(remote)) == all_rows(healed)  # the new footers were kept


def test_a_kept_footer_swapped_for_another_files_is_refused_naming_the_file(
    folder: pathlib.Path, remote: dict[str, Any], fresh_memory: None
) -> None:
    urls = [f"s3://{BUCKET}/{remote['prefix']}{p.name}" for p in sorted(folder.glob("*.parquet"))]
    open_rows(remote)
    paths = [
        pathlib.Path(_indexes.local_index_path(u, _footers.FOOTER_SUFFIX, str(remote["index_dir"])))
        for u in urls
    ]
    heads = [p.read_bytes().partition(b"\n") for p in paths]
    for k in (0, 1):  # a larger file's footer, then a smaller one's: each under the other's head
        other = 1 - k
        paths[k].write_bytes(heads[k][0] + b"\n" + heads[other][2])
        with pytest.raises(ValueError) as err:
            all_rows(open_rows(remote))
        message = str(err.value)
        assert urls[k] in message and "row group" in message, message
        assert "rebuild_index=True" in message and str(paths[k]) in message, message
        paths[k].write_bytes(heads[k][0] + b"\n" + heads[k][2])
    assert all_rows(open_rows(remote)) == all_rows(
        ParquetRows(corpus.pattern("parquet", str(folder)))
    )


def test_a_kept_footer_of_deeply_nested_json_is_read_again(
    folder: pathlib.Path, remote: dict[str, Any]
) -> None:
    ds = open_rows(remote)
    for path in pathlib.Path(remote["index_dir"]).iterdir():
        path.write_bytes(b"[" * 100_000 + b"\n" + b"footer")
    assert all_rows(open_rows(remote)) == all_rows(ds)


def test_a_corrupt_column_chunk_names_the_file_and_the_row_group(
    folder: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    source = sorted(folder.glob("*.parquet"))[0]
    metadata = pq.read_metadata(source)
    chunk = metadata.row_group(1).column(0)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    data = bytearray(source.read_bytes())
    data[start : start + 8] = b"\xff" * 8  # its first page header, unreadable
    path = tmp_path / "corrupt.parquet"
    path.write_bytes(bytes(data))
    ds = ParquetRows(str(path))
    assert ds[0]["id"] == 0  # row group 0 reads on
    with pytest.raises(
        ValueError,
        match=r"ParquetRows: row group 1 of .*corrupt\.parquet cannot be decoded \(OSError: "
        r".*\); the file is corrupt.*; rewrite the file",
    ):
        ds[40]
    assert np.array_equal(ds[0]["x"], ParquetRows(str(source))[0]["x"])
