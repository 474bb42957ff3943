"""An edited tar index is refused when the index is loaded: nothing it drops, nothing it hides.

tests/sources/wds/test_wds.py checks every member's header at each read and the gaps between
listed members at load; here, what lies at the index's ``end`` (the end-of-archive marker, so a
sample dropped from the end of an index is seen), local and remote, and indexes of JSON that
cannot be parsed (too deeply nested) rebuilt as any unreadable index is.
"""

from __future__ import annotations

import io
import json
import pathlib
import tarfile
from typing import Any

import pytest

import seekdata.sources.wds.tarindex as tarindex
from seekdata.wds import TarShards
from tests.helpers.shards import N_SHARDS, PER_SHARD, write_shards

_BLOCK = 512


@pytest.fixture
def shards(tmp_path: pathlib.Path) -> str:
    return write_shards(tmp_path)


def _drop_last_sample(doc: dict[str, Any]) -> None:
    """Remove the last sample's entries and move ``end`` back to where its headers began: the
    index tiles the shard without a gap, as if the sample had never been written."""
    counts = doc["members_per_sample"]
    k = counts.pop()
    doc["keys"].pop()
    for field in ("member_ext", "offsets", "sizes"):
        del doc[field][-k:]
    headers = [value for value, count in doc["headers"] for _ in range(count)]
    del headers[-k:]
    doc["headers"] = [[value, 1] for value in headers]
    offset, size = doc["offsets"][-1], doc["sizes"][-1]
    doc["end"] = offset + -(-size // _BLOCK) * _BLOCK  # the next header: the dropped sample's


def _edit(path: pathlib.Path, edit: Any) -> bytes:
    """Edit the JSON index at ``path`` in place; its stamp still matches. Returns its bytes."""
    doc = json.loads(path.read_bytes())
    edit(doc)
    data = json.dumps(doc).encode()
    path.write_bytes(data)
    return data


def test_a_sample_dropped_from_the_end_of_an_index_is_refused(
    shards: str, scans: list[str]
) -> None:
    """Else the dataset has one sample less and every later sample is renumbered, silently."""
    ds = TarShards(shards)
    want = [ds[i] for i in range(len(ds))]
    ipath = pathlib.Path(ds.urls[1] + tarindex.INDEX_SUFFIX)
    edited = _edit(ipath, _drop_last_sample)
    del scans[:]
    with pytest.raises(
        ValueError,
        match=r"shard .*shard-001\.tar: its index .*shard-001\.tar\.seekdata-index\.json cannot "
        r"describe this shard \(no end-of-archive marker at byte \d+, the end the index "
        r"records: a tar header .* is there, of members the index does not list\); "
        r".*`seekdata index .*shard-001\.tar' --force`",
    ):
        TarShards(shards)
    assert scans == []  # found from the index alone and one read at its end
    assert ipath.read_bytes() == edited  # a refusal changes nothing
    healed = TarShards(shards, rebuild_index=True)
    assert len(healed) == N_SHARDS * PER_SHARD
    assert [healed[i] for i in range(len(healed))] == want


def test_an_end_before_the_last_listed_member_is_refused(shards: str) -> None:
    ds = TarShards(shards)
    ipath = pathlib.Path(ds.urls[2] + tarindex.INDEX_SUFFIX)
    _edit(ipath, lambda doc: doc.__setitem__("end", doc["offsets"][-1]))
    with pytest.raises(ValueError, match=r"shard-002\.tar: its index .* before the last member"):
        TarShards(shards)


def _tar(path: pathlib.Path, members: list[tuple[str, bytes]], tail: bytes) -> str:
    """A tar of ``members`` (ustar headers), ended by ``tail`` instead of tarfile's ending."""
    with open(path, "wb") as f:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            f.write(info.tobuf(tarfile.USTAR_FORMAT))
            f.write(data + bytes(-len(data) % _BLOCK))
        f.write(tail)
    return str(path)


@pytest.mark.parametrize(
    "tail",
    [bytes(2 * _BLOCK), bytes(_BLOCK), bytes(2 * _BLOCK) + b"trailing bytes after the end"],
    ids=["two-zero-blocks-unpadded", "one-zero-block", "junk-after-the-marker"],
)
def test_endings_tarfile_accepts_are_accepted(tmp_path: pathlib.Path, tail: bytes) -> None:
    """The marker is the first zero block, as tarfile (and so webdataset) reads it: one block,
    two, no padding to a record, or bytes after it that no reader looks at."""
    path = _tar(tmp_path / "a.tar", [("k1.txt", b"a" * 700), ("k2.txt", b"b")], tail)
    for _ in range(2):  # built, then trusted and checked
        ds = TarShards(path)
        assert [ds[i]["txt"] for i in range(len(ds))] == [b"a" * 700, b"b"]


def test_a_shard_with_a_sample_after_its_end_of_archive_is_read_as_tarfile_reads_it(
    tmp_path: pathlib.Path,
) -> None:
    """A sample after the marker is not in the archive for tarfile or webdataset: not listed,
    and an index that lists it is refused (it lies past ``end``)."""
    extra = io.BytesIO()
    info = tarfile.TarInfo("k9.txt")
    info.size = 1
    extra.write(info.tobuf(tarfile.USTAR_FORMAT) + b"z" + bytes(_BLOCK - 1))
    path = _tar(tmp_path / "a.tar", [("k1.txt", b"a")], bytes(2 * _BLOCK) + extra.getvalue())
    ds = TarShards(path)
    assert len(ds) == 1

    def list_it(doc: dict[str, Any]) -> None:
        doc["keys"].append("k9")
        doc["members_per_sample"].append(1)
        doc["member_ext"].append(0)
        doc["offsets"].append(doc["end"] + 3 * _BLOCK)
        doc["sizes"].append(1)
        doc["headers"].append([_BLOCK, 1])

    _edit(pathlib.Path(path + tarindex.INDEX_SUFFIX), list_it)
    with pytest.raises(ValueError, match=r"a\.tar: its index .*before the last member"):
        TarShards(path)


@pytest.mark.parametrize("depth", [100_000])
def test_an_index_of_deeply_nested_json_is_rebuilt(
    shards: str, scans: list[str], depth: int
) -> None:
    """As any unreadable index: no RecursionError from the JSON parser."""
    ds = TarShards(shards)
    ipath = pathlib.Path(ds.urls[0] + tarindex.INDEX_SUFFIX)
    ipath.write_bytes(b"[" * depth + b"]" * depth)
    del scans[:]
    again = TarShards(shards)
    assert scans == [ds.urls[0]]
    assert [again[i] for i in range(PER_SHARD)] == [ds[i] for i in range(PER_SHARD)]


# -- remote shards: the same checks, the index kept beside the shard in the bucket ---------------

BUCKET = "tar-index-checks"


@pytest.fixture
def bucket(tmp_path: pathlib.Path, s3_server: Any, request: pytest.FixtureRequest) -> str:
    """Shards in a bucket folder of this test's own; returns their brace pattern."""
    from seekdata import _servers

    folder = tmp_path / "shards"
    folder.mkdir()
    write_shards(folder, n=3 * 6, per_shard=6)
    prefix = f"{request.node.name}/"
    _servers.upload(s3_server, BUCKET, folder, prefix)
    return f"s3://{BUCKET}/{prefix}shard-{{000..002}}.tar"


def _remote_edit(server: Any, key: str, edit: Any) -> None:
    from seekdata import _servers

    client = _servers.s3_client(server)
    body = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    client.put_object(Bucket=BUCKET, Key=key, Body=edit(body))


def test_a_remote_index_with_its_last_sample_dropped_is_refused(
    bucket: str, s3_server: Any, request: pytest.FixtureRequest
) -> None:
    from seekdata import _servers

    options = {"storage_options": _servers.s3_options(s3_server)}
    ds = TarShards(bucket, **options)  # the indexes are written beside the shards
    want = [ds[i]["bin"] for i in range(len(ds))]
    key = f"{request.node.name}/shard-001.tar{tarindex.INDEX_SUFFIX}"

    def drop(body: bytes) -> bytes:
        doc = json.loads(body)
        _drop_last_sample(doc)
        return json.dumps(doc).encode()

    _remote_edit(s3_server, key, drop)
    with pytest.raises(
        ValueError,
        match=r"shard s3://.*shard-001\.tar: its index s3://.*shard-001\.tar\.seekdata-index\.json "
        r"cannot describe this shard \(no end-of-archive marker at byte \d+.*--force",
    ):
        TarShards(bucket, **options)
    healed = TarShards(bucket, rebuild_index=True, **options)
    assert [healed[i]["bin"] for i in range(len(healed))] == want


def test_a_remote_index_of_deeply_nested_json_is_rebuilt(
    bucket: str, s3_server: Any, request: pytest.FixtureRequest
) -> None:
    from seekdata import _servers

    options = {"storage_options": _servers.s3_options(s3_server)}
    ds = TarShards(bucket, **options)
    key = f"{request.node.name}/shard-000.tar{tarindex.INDEX_SUFFIX}"
    _remote_edit(s3_server, key, lambda body: b"[" * 100_000 + b"]" * 100_000)
    again = TarShards(bucket, **options)
    assert [again[i]["bin"] for i in range(len(again))] == [ds[i]["bin"] for i in range(len(ds))]


@pytest.mark.parametrize(
    "name",
    ["a.jpg", "a.b.c", "dir/a.jpg", "dir.x/a.b.json", "a", "dir/a", ".hidden", "dir/.x",
     "a.", "a..b", "x/y/z.seg.png", "__key__.txt", "d/__meta__.json", "a/b.c/d", "", "./a.b"],
)  # fmt: skip
def test_member_names_split_into_key_and_extension_as_webdataset_splits_them(name: str) -> None:
    from webdataset.tariterators import base_plus_ext

    from seekdata.sources.wds import tarcheck

    assert tarcheck.base_plus_ext(name) == base_plus_ext(name)
