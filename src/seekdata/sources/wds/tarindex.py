"""Byte-offset indexes of webdataset tar shards (scanned with :mod:`tarfile`).

An index lists each sample's ``__key__`` and each member's extension, data offset, size and
header bytes (its tar header, with any pax or long-name headers before it), grouped as
webdataset groups them, and where the archive ends. It is a JSON file beside the shard
(``<shard>.seekdata-index.json``) or under ``index_dir``, stamped with the shard's size
and mtime. Missing or unreadable: built. Same stamp: used after cheap checks (tarcheck: its
offsets tile the shard, the end-of-archive marker is at its ``end``; one small read). Same
size, new mtime: rescanned, and kept if no sample moved. Otherwise the shard changed: a
``ValueError`` naming it, unless ``rebuild=True``.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from seekdata.sources.files import indexes as _indexes
from seekdata.sources.files import manifest as _manifest
from seekdata.sources.files import processes as _processes
from seekdata.sources.files.paths import is_remote, url_scheme
from seekdata.sources.wds import tarcheck as _tarcheck
from seekdata.sources.wds.urls import local_path

#: ``format`` field of every index file.
INDEX_FORMAT = "seekdata-wds-index"
#: Bumped whenever the index layout changes; other versions are rebuilt.
INDEX_VERSION = 2
#: Appended to a shard's file name to name its index.
INDEX_SUFFIX = ".seekdata-index.json"

_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
_BLOCK = tarfile.BLOCKSIZE


@dataclass(frozen=True, eq=False)
class ShardIndex:
    """Samples of one shard: keys, and each member's extension, data offset and size."""

    size: int  #: shard size in bytes when indexed
    mtime_ns: int  #: shard mtime when indexed
    keys: list[str]  #: ``__key__`` of each sample, in tar order
    exts: list[str]  #: table of extensions; ``member_ext`` indexes into it
    starts: np.ndarray  #: int64, ``len(keys) + 1``: sample i owns members starts[i]:starts[i+1]
    member_ext: np.ndarray  #: int64 index into ``exts``
    offsets: np.ndarray  #: int64 data offset of each member
    sizes: np.ndarray  #: int64 data size of each member
    #: int64 bytes of each member's headers: its data starts this far after its first header
    #: (stored as runs of equal values)
    headers: np.ndarray
    end: int  #: offset of the end-of-archive marker
    etag: str | None = None  #: a remote shard's ETag when indexed (None: a local file)

    def same_layout(self, other: ShardIndex) -> bool:
        """Whether both describe the same samples at the same offsets (stamps aside)."""
        mine, theirs = self.to_json(""), other.to_json("")
        stamps = ("size", "mtime_ns", "etag")
        return all(mine.get(k) == theirs.get(k) for k in mine.keys() | theirs if k not in stamps)

    def to_json(self, shard: str) -> dict[str, Any]:
        return {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "shard": shard,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "keys": self.keys,
            "exts": self.exts,
            "members_per_sample": np.diff(self.starts).tolist(),
            "member_ext": self.member_ext.tolist(),
            "offsets": self.offsets.tolist(),
            "sizes": self.sizes.tolist(),
            "headers": _runs(self.headers),
            "end": self.end,
            **({} if self.etag is None else {"etag": self.etag}),
        }

    @classmethod
    def from_json(cls, doc: Any) -> ShardIndex | None:
        """The index in ``doc``, or None when it is not a readable index of this version."""
        try:
            if doc["format"] != INDEX_FORMAT or doc["version"] != INDEX_VERSION:
                return None
            counts = np.asarray(doc["members_per_sample"], dtype=np.int64)
            index = cls(
                size=int(doc["size"]),
                mtime_ns=int(doc["mtime_ns"]),
                keys=[str(k) for k in doc["keys"]],
                exts=[str(e) for e in doc["exts"]],
                starts=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                member_ext=np.asarray(doc["member_ext"], dtype=np.int64),
                offsets=np.asarray(doc["offsets"], dtype=np.int64),
                sizes=np.asarray(doc["sizes"], dtype=np.int64),
                headers=_unruns(doc["headers"]),
                end=int(doc["end"]),
                etag=None if doc.get("etag") is None else str(doc["etag"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        n = int(index.starts[-1])
        members = (index.member_ext, index.offsets, index.sizes, index.headers)
        sound = (
            len(index.keys) == len(counts)
            and bool((counts >= 1).all())
            and all(len(column) == n for column in members)
            and all(0 <= e < len(index.exts) for e in set(index.member_ext.tolist()))
        )
        return index if sound else None


def _runs(values: np.ndarray) -> list[list[int]]:
    """``[[value, count], ...]``: a shard's members mostly have headers of one size."""
    cut = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate([[0], cut]) if len(values) else cut
    counts = np.diff(np.append(starts, len(values)))
    return [[int(values[i]), int(c)] for i, c in zip(starts, counts, strict=True)]


def _unruns(runs: Any) -> np.ndarray:
    """The values :func:`_runs` wrote, one per member; ``ValueError`` for anything else."""
    if not all(isinstance(r, list) and len(r) == 2 and r[1] >= 1 for r in runs):
        raise ValueError("headers must be [value, count] runs")
    return np.repeat(*np.asarray(runs, dtype=np.int64).reshape(-1, 2).T)


@dataclass(frozen=True, eq=False)
class Shard:
    """One shard: its URL as given, the local file read (absolute), and its index."""

    url: str
    path: str
    index: ShardIndex
    #: ``__local_path__`` of its samples, as webdataset sets it: None for ``pipe:`` shards
    local_path: str | None
    #: a remote shard's object (``seekdata.sources.remote.RemoteFile``), read by byte range
    remote: Any = None


def digest(index: ShardIndex) -> str:
    """The shard's digest in a manifest (:func:`seekdata.sources.files.manifest.digest_of`):
    of everything its index says but its stamps — keys, extensions, member offsets, sizes and
    headers, the archive's end — so an index that matches the manifest's digest is the one
    the manifest was written from."""
    layout = (index.starts, index.member_ext, index.offsets, index.sizes, index.headers)
    return _manifest.digest_of(
        "\0".join(index.keys),
        "\0".join(index.exts),
        *(np.ascontiguousarray(a, dtype="<i8").tobytes() for a in layout),
        str(index.end),
    )


def stamp(index: ShardIndex) -> str:
    """What tells that the shard changed since it was indexed: a remote shard's ETag, a local
    one's mtime (the manifest's ``stamp``)."""
    return index.etag if index.etag is not None else f"mtime_ns:{index.mtime_ns}"


def manifest_entry(shard: Shard) -> dict[str, Any]:
    """The shard's row in its folder's manifest (family ``tar``): the base columns, and its
    first and last keys, which the split-sample check between shards reads."""
    index = shard.index
    name = shard.url.rsplit("/", 1)[-1] if is_remote(shard.url) else os.path.basename(shard.url)
    return {
        "name": name,
        "size": index.size,
        "stamp": stamp(index),
        "items": len(index.keys),
        "digest": digest(index),
        "first_key": index.keys[0] if index.keys else None,
        "last_key": index.keys[-1] if index.keys else None,
    }


def index_path(path: str, index_dir: str | None) -> str:
    """Where the index of the local shard ``path`` lives (the floor's rule, this suffix)."""
    return _indexes.index_path(path, INDEX_SUFFIX, index_dir)


def scan_shard(path: str, url: str) -> ShardIndex:
    """Index one local tar shard by reading its headers with :mod:`tarfile`."""
    st = os.stat(path)
    with open(path, "rb") as f:
        return scan_tar(f, url, st.st_size, st.st_mtime_ns)


def scan_tar(f: Any, url: str, size: int, mtime_ns: int, etag: str | None = None) -> ShardIndex:
    """Index one tar shard read from the binary file ``f`` (a local file, or a remote one
    read by range), in one forward pass over its headers."""
    keys: list[str] = []
    exts: dict[str, int] = {}
    starts: list[int] = []  # member index where each sample starts, then the end
    member_ext: list[int] = []
    offsets: list[int] = []
    sizes: list[int] = []
    headers: list[int] = []
    current: set[str] = set()
    magic = f.read(8)
    for prefix, kind in _COMPRESSED.items():
        if magic.startswith(prefix):
            raise ValueError(
                f"shard {url}: random access needs an uncompressed tar, but this one is "
                f"{kind}-compressed; decompress it (e.g. `gunzip`) and index the .tar"
            )
    f.seek(0)
    try:
        tar = tarfile.open(fileobj=f, mode="r:")  # noqa: SIM115 - the open must be in try
    except tarfile.TarError as exc:
        raise ValueError(
            f"shard {url} is not a readable tar file ({exc}): it is truncated, corrupt, "
            "or not a tar; check the path, or rewrite the shard"
        ) from exc
    with tar:
        for info in _sample_members(tar, url):
            key, ext = _tarcheck.base_plus_ext(info.name)
            if key is None or ext is None:  # both or neither
                continue
            ext = ext.lower()
            if not keys or key != keys[-1]:
                keys.append(key)
                starts.append(len(offsets))
                current = set()
            if ext in current:
                raise ValueError(
                    f"shard {url}: sample {key!r} has two members with extension {ext!r} "
                    f"(at {info.name!r}); each extension may appear once per sample"
                )
            current.add(ext)
            member_ext.append(exts.setdefault(ext, len(exts)))
            offsets.append(info.offset_data)
            sizes.append(info.size)
            headers.append(info.offset_data - info.offset)
            tar.members = []  # type: ignore[attr-defined]  # not in typeshed; keeps memory flat
        end = tar.offset
    f.seek(end)
    if f.read(_BLOCK) != bytes(_BLOCK):
        raise ValueError(_truncated(url, f"no end-of-archive marker at byte {end}"))
    starts.append(len(offsets))
    return ShardIndex(
        size=size,
        mtime_ns=mtime_ns,
        keys=keys,
        exts=list(exts),
        starts=np.asarray(starts, dtype=np.int64),
        member_ext=np.asarray(member_ext, dtype=np.int64),
        offsets=np.asarray(offsets, dtype=np.int64),
        sizes=np.asarray(sizes, dtype=np.int64),
        headers=np.asarray(headers, dtype=np.int64),
        end=end,
        etag=etag,
    )


def _sample_members(tar: tarfile.TarFile, url: str) -> Iterator[tarfile.TarInfo]:
    """The members webdataset's ``tar_file_iterator`` keeps, in tar order."""
    while True:
        try:
            info = tar.next()
        except tarfile.TarError as exc:
            raise ValueError(_truncated(url, str(exc))) from exc
        if info is None:
            return
        name = info.name
        if _tarcheck.ignored(info):
            continue
        if info.issparse():
            raise ValueError(
                f"shard {url}: member {name!r} is a sparse file, whose bytes are not stored "
                "contiguously; rewrite the shard without sparse members"
            )
        if not _tarcheck.SKIP_META.match(name):
            yield info


def rebuild_hint(url: str) -> str:
    """How to rebuild the index of the shard ``url``, for error messages."""
    return (
        f"rebuild its index with `seekdata index {url!r} --force` "
        "or TarShards(..., rebuild_index=True)"
    )


def _truncated(url: str, detail: str) -> str:
    return (
        f"shard {url} is truncated or corrupt ({detail}); a complete tar ends with an "
        "end-of-archive marker. Rewrite or re-download the shard"
    )


def read_index(ipath: str) -> ShardIndex | None:
    try:
        with open(ipath, "rb") as f:
            data = f.read()
    except OSError:
        return None  # missing: built
    return ShardIndex.from_json(_indexes.parse_json(data))  # None when unreadable: rebuilt


def _loaded_problem(path: str, index: ShardIndex) -> str | None:
    """What makes the trusted ``index`` of the local shard ``path`` impossible, or None: its
    offsets (:func:`tarcheck.index_problem`), then what lies at its end and in its gaps."""
    problem = _tarcheck.index_problem(index)
    if problem is not None:
        return problem
    with open(path, "rb") as f:
        f.seek(index.end)
        return _tarcheck.end_problem(f.read(_BLOCK), index) or _tarcheck.unlisted_member(f, index)


def _write_index(ipath: str, index: ShardIndex, url: str) -> None:
    data = json.dumps(index.to_json(url), separators=(",", ":")).encode()
    _indexes.write_atomic(ipath, data)


def load_or_build(
    url: str, path: str, *, index_dir: str | None, rebuild: bool = False, force: bool = False
) -> ShardIndex:
    """The validated index of one local shard; see the module docstring for the rules."""
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        where = "" if path == url else f" (looked for {path})"
        hint = "; globs are not expanded, pass sorted(glob.glob(...))" if "*" in url else ""
        raise ValueError(
            f"shard {url} does not exist{where}; check the path or pattern{hint}"
        ) from exc
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"shard {url}: expected a tar file, got a directory or device")
    ipath = index_path(path, index_dir)
    old = None if force else read_index(ipath)
    if old is not None and (old.size, old.mtime_ns) == (st.st_size, st.st_mtime_ns):
        problem = _loaded_problem(path, old)
        if problem is None:
            return old
        if not rebuild:
            raise ValueError(
                f"shard {url}: its index {ipath} cannot describe this shard ({problem}); "
                "the index was edited or corrupted. " + rebuild_hint(url)
            )
        old = None
    if old is not None and old.size != st.st_size and not rebuild:
        raise _changed(url, old, st)
    new = scan_shard(path, url)
    unchanged = old is not None and old.same_layout(new)
    if old is not None and not unchanged and not rebuild:
        raise _changed(url, old, st)
    try:
        _write_index(ipath, new, url)
    except OSError as exc:
        if not unchanged:  # an unchanged layout with a stale stamp still reads fine
            raise ValueError(
                f"shard {url}: cannot write its index to {ipath} ({exc}); "
                "pass index_dir= (--index-dir) a writable directory"
            ) from exc
    return new


def _changed(url: str, old: ShardIndex, st: os.stat_result) -> ValueError:
    how = (
        f"size {old.size} → {st.st_size} bytes"
        if old.size != st.st_size
        else "same size, but its members moved"
    )
    return ValueError(
        f"shard {url} changed since its index was built ({how}); positions saved in a "
        "checkpoint may now name other samples. If the change is intended, " + rebuild_hint(url)
    )


def load_or_build_remote(
    url: str, *, stores: Any, cache: Any, index_dir: str | None, rebuild: bool, force: bool
) -> Shard:
    """The index of a remote shard: kept beside it (or under ``index_dir``) and read in one
    request, else built by one forward pass of range reads and kept. It records the object's
    ``ETag``, and every read of the shard carries it (``If-Match``): a shard replaced under its
    index is refused at its first read, naming it. ``rebuild`` compares the stamp now (one HEAD)
    and builds the index again when the object changed."""
    from seekdata.sources import remote

    kept = None if force else _indexes.load(stores, url, INDEX_SUFFIX, index_dir)
    old = None if kept is None else ShardIndex.from_json(_indexes.parse_json(kept))
    if old is not None and old.etag is not None:
        problem = _tarcheck.index_problem(old)
        file = remote.RemoteFile(stores, url, size=old.size, etag=old.etag, cache=cache)
        if problem is None and not (rebuild and file.head() != (old.size, old.etag)):
            # one small request (512 bytes, If-Match: also a shard replaced since), never
            # through the cache, whose block would be megabytes; then the gaps, if any
            problem = _tarcheck.end_problem(file.get(old.end, old.end + _BLOCK), old)
            problem = problem or _tarcheck.unlisted_member(file.open(), old)
            if problem is None:
                return Shard(url, url, old, None, file)
            if not rebuild:
                raise ValueError(
                    f"shard {url}: its index {_indexes.where(url, INDEX_SUFFIX, index_dir)} cannot "
                    f"describe this shard ({problem}); the index was edited or corrupted. "
                    + rebuild_hint(url)
                )
    _indexes.check_place(stores, url, INDEX_SUFFIX, index_dir)  # before a pass over the shard
    file = remote.RemoteFile(stores, url, cache=cache)  # one HEAD: its size and ETag
    new = scan_tar(file.open(), url, file.size, 0, file.etag)
    data = json.dumps(new.to_json(url), separators=(",", ":")).encode()
    _indexes.save(stores, url, INDEX_SUFFIX, index_dir, data)
    return Shard(url, url, new, None, file)


def index_shards(
    urls: Sequence[str],
    *,
    index_dir: str | None = None,
    allow_pipe: bool = False,
    rebuild: bool = False,
    force: bool = False,
    jobs: int = 1,
    progress: Callable[[Iterator[Shard], int], Iterable[Shard]] | None = None,
    stores: Any = None,
    cache: Any = None,
    check_keys: bool = True,
) -> list[Shard]:
    """Load or build the index of every shard, then check that no sample spans two shards
    (unless ``check_keys`` is False: ``urls`` are some of a dataset's shards, not
    consecutive ones, and the caller checks them all). Remote shards (``s3://``,
    ``https://``, ...) are read through ``stores`` (their ``storage_options``) and ``cache``."""

    one = functools.partial(
        _index_one, index_dir=index_dir, allow_pipe=allow_pipe, rebuild=rebuild, force=force,
        stores=stores, cache=cache,
    )  # fmt: skip
    shards = _map_urls(one, urls, jobs, progress)
    if check_keys:
        check_split_keys(shards)
    return shards


def index_entries(
    urls: Sequence[str],
    *,
    index_dir: str | None = None,
    allow_pipe: bool = False,
    force: bool = False,
    jobs: int = 1,
    progress: Callable[[Iterator[dict[str, Any]], int], Iterable[dict[str, Any]]] | None = None,
    stores: Any = None,
    check_keys: bool = True,
) -> list[dict[str, Any]]:
    """:func:`index_shards` for ``seekdata index``: each shard's manifest entry
    (:func:`manifest_entry`) rather than its whole index, so that with ``jobs`` processes the
    one collecting the results unpickles a few fields per shard (not every member's offsets)
    and holds them, not the indexes."""
    one = functools.partial(
        _entry_one, index_dir=index_dir, allow_pipe=allow_pipe, force=force, stores=stores
    )
    entries = _map_urls(one, urls, jobs, progress)
    if check_keys:
        check_split(urls, [e["first_key"] for e in entries], [e["last_key"] for e in entries])
    return entries


_T = TypeVar("_T")


def _map_urls(
    one: Callable[[str], _T],
    urls: Sequence[str],
    jobs: int,
    progress: Callable[[Iterator[_T], int], Iterable[_T]] | None,
) -> list[_T]:
    """``one(url)`` for every url, in order: in ``jobs`` processes, or (one job, remote
    files) many requests at once in threads."""
    # tarfile parses headers in Python: scanning is CPU-bound, so jobs are processes
    pool = _processes.pool(jobs) if jobs > 1 else None
    try:
        if pool is None and any(map(is_remote, urls)):  # remote: many requests at once
            from seekdata.sources.remote import map_objects

            results: Iterator[_T] = iter(map_objects(one, urls, urls))
        else:
            # in chunks: each task unpickles ``one`` and with it a new remote client (about
            # 0.3 s each), so one task per URL made a client per shard
            chunk = max(1, len(urls) // (8 * jobs))
            results = pool.map(one, urls, chunksize=chunk) if pool else map(one, urls)
        return list(progress(results, len(urls)) if progress else results)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def _entry_one(url: str, **options: Any) -> dict[str, Any]:
    return manifest_entry(_index_one(url, rebuild=False, **options))


def _index_one(
    url: str,
    *,
    index_dir: str | None,
    allow_pipe: bool,
    rebuild: bool,
    force: bool,
    stores: Any = None,
    cache: Any = None,
) -> Shard:
    if is_remote(url):
        if stores is None:
            from seekdata.sources.remote import Stores

            stores = Stores({})  # the back-end's usual places only
        return load_or_build_remote(
            url, stores=stores, cache=cache, index_dir=index_dir, rebuild=rebuild, force=force
        )
    path = local_path(url, index_dir=index_dir, allow_pipe=allow_pipe)
    index = load_or_build(url, path, index_dir=index_dir, rebuild=rebuild, force=force)
    # read by absolute path: a later chdir must not change which file a worker opens
    return Shard(url, os.path.abspath(path), index, None if url_scheme(url) == "pipe" else path)


def check_split_keys(shards: Sequence[Shard]) -> None:
    """Refuse a sample whose members straddle two consecutive shards."""
    check_split(
        [s.url for s in shards],
        [s.index.keys[0] if s.index.keys else None for s in shards],
        [s.index.keys[-1] if s.index.keys else None for s in shards],
    )


def check_split(urls: Sequence[str], firsts: Sequence[Any], lasts: Sequence[Any]) -> None:
    """Refuse a sample whose members straddle two consecutive shards, from each shard's first
    and last key (None for a shard without samples), as a manifest gives them."""
    previous = -1
    for k, first in enumerate(firsts):
        if first is None:
            continue
        if previous >= 0 and lasts[previous] == first:
            raise ValueError(
                f"sample key {first!r} is split across shards: it ends {urls[previous]} and "
                f"starts {urls[k]}. webdataset would yield two half samples; rewrite the shards "
                "so each sample's files are in one shard (webdataset.ShardWriter does this)"
            )
        previous = k
