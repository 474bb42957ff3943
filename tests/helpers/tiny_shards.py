"""Many tiny tar shards, their indexes and their manifest, written fast: the scale tests and
benchmarks/scale.py need 10^4–10^5 of them, and ``tarfile`` plus ``seekdata index`` would take
minutes. Each shard holds one sample (``k<i>.bin``, 8 bytes): a real tar (header, data, the
end-of-archive marker) that ``TarShards`` reads and checks as any other; its index is the one
``seekdata index`` would write (the same offsets), and the manifest is written by the manifest
module from the indexes' entries."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tarfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from seekdata.sources.files import manifest as mf
from seekdata.sources.wds import tarindex

DATA = 8  # bytes of each sample's one member
SHARD_BYTES = 512 + 512 + 1024  # header, data padded to a block, end-of-archive marker


def name(i: int, n: int) -> str:
    return f"shard-{i:0{max(5, len(str(n - 1)))}d}.tar"


def pattern(prefix: str, n: int) -> str:
    width = max(5, len(str(n - 1)))
    return f"{prefix.rstrip('/')}/shard-{{{0:0{width}d}..{n - 1:0{width}d}}}.tar"


def shard_bytes(i: int) -> bytes:
    info = tarfile.TarInfo(f"k{i:07d}.bin")
    info.size = DATA
    data = i.to_bytes(DATA, "little")
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + bytes(512 - DATA) + bytes(1024)


def shard_index(i: int, size: int, mtime_ns: int, etag: str | None = None) -> Any:
    one = np.ones(1, dtype=np.int64)
    return tarindex.ShardIndex(
        size=size, mtime_ns=mtime_ns, keys=[f"k{i:07d}"], exts=["bin"],
        starts=np.array([0, 1], dtype=np.int64), member_ext=0 * one, offsets=512 * one,
        sizes=DATA * one, headers=512 * one, end=1024, etag=etag,
    )  # fmt: skip


def _many(fn: Callable[[int], Any], n: int) -> Iterator[Any]:
    with ThreadPoolExecutor(4) as pool:
        yield from pool.map(fn, range(n), chunksize=512)


#: What every tiny shard's index holds but its key (JSON, and as the manifest digests it).
_LAYOUT = (
    '"exts":["bin"],"members_per_sample":[1],"member_ext":[0],"offsets":[512],'
    f'"sizes":[{DATA}],"headers":[[512,1]],"end":1024'
)
_CHUNKS = [np.array(a, dtype="<i8").tobytes() for a in ([0, 1], [0], [512], [DATA], [512])]


def _entry(i: int, url: str, size: int, stamp: str) -> dict[str, Any]:
    """The shard's manifest row: ``tarindex.manifest_entry`` of its index (the same digest,
    fed the same bytes, without building the index object)."""
    key = f"k{i:07d}"
    digest = mf.digest_of(key, "bin", *_CHUNKS, "1024")
    name = url.rsplit("/", 1)[-1]
    return {"name": name, "size": size, "stamp": stamp, "items": 1, "digest": digest,
            "first_key": key, "last_key": key}  # fmt: skip


def _index_json(i: int, url: str, size: int, mtime_ns: int, etag: str | None = None) -> bytes:
    tag = "" if etag is None else f',"etag":{json.dumps(etag)}'
    return (
        f'{{"format":"{tarindex.INDEX_FORMAT}","version":{tarindex.INDEX_VERSION},'
        f'"shard":{json.dumps(url)},"size":{size},"mtime_ns":{mtime_ns},"keys":["k{i:07d}"],'
        f"{_LAYOUT}{tag}}}"
    ).encode()


def _put(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def write_local(folder: pathlib.Path, n: int, manifest: bool = True) -> str:
    """``n`` shards in ``folder``, each with its index beside it, and the folder's manifest;
    returns their brace pattern."""
    folder.mkdir(parents=True, exist_ok=True)

    def one(i: int) -> dict[str, Any]:
        url = str(folder / name(i, n))
        _put(url, shard_bytes(i))
        st = os.stat(url)
        _put(url + tarindex.INDEX_SUFFIX, _index_json(i, url, st.st_size, st.st_mtime_ns))
        return _entry(i, url, st.st_size, mf.local_stamp(st))

    entries = list(_many(one, n))
    if manifest:
        mf.write(str(folder), "tar", entries, {})
    return pattern(str(folder), n)


def write_s3(
    client: Any, bucket: str, prefix: str, n: int, stores: Any, *, upload: Any = None
) -> str:
    """The same corpus in ``s3://bucket/prefix``: its manifest (one PUT, the ETags moto
    gives: the MD5 of each object) and the shards ``upload`` names (all by default) with their
    indexes, put in threads; returns the brace pattern."""
    import contextlib

    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    folder = f"s3://{bucket}/{prefix.strip('/')}"
    wanted = set(range(n)) if upload is None else set(upload)

    def one(i: int) -> dict[str, Any]:
        data = shard_bytes(i)
        etag = f'"{hashlib.md5(data).hexdigest()}"'
        url = f"{folder}/{name(i, n)}"
        if i in wanted:
            key = f"{prefix.strip('/')}/{name(i, n)}"
            client.put_object(Bucket=bucket, Key=key, Body=data)
            body = _index_json(i, url, len(data), 0, etag)
            client.put_object(Bucket=bucket, Key=key + tarindex.INDEX_SUFFIX, Body=body)
        return _entry(i, url, len(data), etag)

    entries = list(_many(one, n))
    mf.write(folder, "tar", entries, {}, stores=stores)
    return pattern(folder, n)
