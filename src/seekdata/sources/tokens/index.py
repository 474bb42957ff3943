"""Document-boundary indexes of token files: one vectorised scan, kept beside the file.

Finding the end-of-document tokens of a corpus is a pass over its bytes, so it is done once per
file and stored as ``<file>.seekdata-docs`` (or under ``index_dir``): one line of JSON (the
file's size and mtime, dtype, eos id, token and document counts, smallest and largest token
id, a digest of the token count, the smallest and largest id and the offsets), padded to 64
bytes, then the documents' end offsets in the file
as little-endian int64 (the position after each end-of-document token). The rules are
:mod:`seekdata.sources.wds.tarindex`'s: missing, unreadable, or written for another eos id or dtype:
built. Same stamp: used without reading the token file. Same size, new mtime: rescanned, kept
if no boundary moved. Otherwise the file changed: a ``ValueError`` naming it, unless
``rebuild``. An index whose offsets do not match its own header (edited, truncated) is
refused too; and :class:`seekdata.tokens.PackedDocuments` checks, as it reads each document,
that its last token is the end-of-document token and so is the token before its first (unless
it starts a file): an edited index with its digest recomputed is caught before its documents
are served.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seekdata.sources.files import indexes as _indexes
from seekdata.sources.files import processes as _processes
from seekdata.sources.tokens import packing as _packing
from seekdata.sources.tokens.files import TokenFile, describe, token_array

#: ``format`` field of every index header.
INDEX_FORMAT = "seekdata-token-docs"
#: Bumped whenever the layout changes; other versions are rebuilt. 2: the digest covers the
#: token count and the smallest and largest id too (an edit of them skipped the vocabulary check).
INDEX_VERSION = 2
#: Appended to a token file's name to name its index.
INDEX_SUFFIX = ".seekdata-docs"
_ALIGN = 64  # the header is padded to this, so the offsets are aligned for memmap
_CHUNK = 1 << 24  # tokens per step of the scan
_MAX_HEADER = 1 << 16


@dataclass(frozen=True, eq=False)
class DocIndex:
    """The end-of-document offsets of one token file, and the stamp they were found under."""

    size: int  #: token file size when indexed
    mtime_ns: int  #: token file mtime when indexed
    dtype: str  #: numpy dtype string, e.g. ``"<u2"``
    eos_id: int
    tokens: int
    min_id: int  #: smallest token id in the file
    max_id: int  #: largest token id in the file
    ends: np.ndarray  #: int64: one past each end-of-document token, increasing
    etag: str | None = None  #: a remote file's ETag when indexed

    @functools.cached_property
    def digest(self) -> str:
        """What the header's ``blake2b`` holds: the digest of what decides the file's
        documents (a corpus manifest's per-file ``digest``)."""
        return _digest(self.tokens, self.min_id, self.max_id, self.ends)

    @property
    def tail(self) -> bool:
        """The file ends inside a document (its tokens after the last eos_id are one too)."""
        return len(self.ends) == 0 or int(self.ends[-1]) != self.tokens

    @property
    def documents(self) -> int:
        """Documents of the file: one per eos_id, and the tail."""
        return len(self.ends) + self.tail

    def header(self, name: str, digest: str) -> dict[str, Any]:
        return {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "file": name,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "dtype": self.dtype,
            "eos_id": self.eos_id,
            "tokens": self.tokens,
            "documents": len(self.ends),
            "min_id": self.min_id,
            "max_id": self.max_id,
            "blake2b": digest,
            **({} if self.etag is None else {"etag": self.etag}),
        }


def index_path(path: str, index_dir: str | None) -> str:
    """Where the index of the token file ``path`` lives (the floor's rule, this suffix)."""
    return _indexes.index_path(path, INDEX_SUFFIX, index_dir)


def index_flags(eos_id: int | str, dtype: np.dtype[Any]) -> str:
    """The options of ``seekdata index`` for token files of ``eos_id`` and ``dtype``."""
    return f" --eos-id {eos_id}" + ("" if dtype == np.uint16 else f" --dtype {dtype.name}")


def rebuild_hint(name: str, eos_id: int, dtype: np.dtype[Any]) -> str:
    """How to rebuild the index of ``name``, for error messages."""
    flag = "" if dtype == np.uint16 else f" --dtype {dtype.name}"
    return (
        f"rebuild its index with `seekdata index --eos-id {eos_id}{flag} {name!r} --force` or "
        "PackedDocuments(..., rebuild_index=True)"
    )


def rescan_hint(name: str, eos_id: int, dtype: np.dtype[Any]) -> str:
    """How to rebuild the index of ``name`` when its stamp still matches (found wrong by a
    read): ``rebuild_index=True`` keeps such an index, ``--force`` scans the file again."""
    flag = "" if dtype == np.uint16 else f" --dtype {dtype.name}"
    return (
        f"rebuild its index with `seekdata index --eos-id {eos_id}{flag} {name!r} --force` "
        "(rebuild_index=True rebuilds only the index of a file whose size or mtime changed)"
    )


def _digest(tokens: int, min_id: int, max_id: int, ends: np.ndarray) -> str:
    """What the header's ``blake2b`` covers: every field the index is trusted for."""
    h = hashlib.blake2b(np.array([tokens, min_id, max_id], dtype="<i8").data, digest_size=16)
    h.update(np.ascontiguousarray(ends, dtype="<i8").data)
    return h.hexdigest()


def scan(f: TokenFile, dtype: np.dtype[Any], eos_id: int) -> DocIndex:
    """Find the end-of-document tokens of one file, a chunk of tokens at a time (a remote
    file: one forward pass of range reads)."""
    tokens = token_array(f, dtype)
    ends, low, high = [], None, None
    for start in range(0, f.tokens, _CHUNK):
        chunk = np.asarray(tokens[start : start + _CHUNK])
        ends.append(np.flatnonzero(chunk == eos_id).astype(np.int64) + (start + 1))
        lo, hi = int(chunk.min()), int(chunk.max())
        low, high = lo if low is None else min(low, lo), hi if high is None else max(high, hi)
    del tokens
    assert low is not None and high is not None  # a described file holds a token
    size, mtime_ns = (f.size, 0) if f.remote is not None else _stamp(f.path)
    return DocIndex(
        size=size,
        mtime_ns=mtime_ns,
        dtype=dtype.str,
        eos_id=eos_id,
        tokens=f.tokens,
        min_id=low,
        max_id=high,
        ends=np.concatenate(ends),
        etag=f.etag,
    )


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


class _Unsound(Exception):
    """The index's header is ours, but its offsets do not match it."""


class Untrusted(ValueError):
    """A kept index that does not match its own header (edited or corrupted)."""


def _read(ipath: str, dtype: np.dtype[Any], eos_id: int) -> DocIndex | None:
    """The index at ``ipath``; None when missing, unreadable, or for another eos id or dtype.
    Raises :class:`_Unsound` when its offsets do not match its header."""
    try:
        fp = open(ipath, "rb")  # noqa: SIM115 -- closed below; opened once, offsets mapped from it
    except OSError:
        return None
    with fp:
        try:
            line = fp.readline(_MAX_HEADER)
            size = os.fstat(fp.fileno()).st_size
        except OSError:
            return None
        return _parse(line, size, dtype, eos_id, lambda count: np.memmap(
            fp, dtype="<i8", mode="r", offset=len(line), shape=(count,)
        ))  # fmt: skip


def _parse(
    line: bytes,
    size: int,
    dtype: np.dtype[Any],
    eos_id: int,
    offsets: Callable[[int], np.ndarray],
) -> DocIndex | None:
    """The index whose header line is ``line`` and whose whole is ``size`` bytes, its ``count``
    offsets read by ``offsets(count)``; None or :class:`_Unsound` as :func:`_read` says."""
    try:
        head = _indexes.parse_json(line)  # None (not JSON, or nested too deep): a TypeError
        if (head["format"], head["version"]) != (INDEX_FORMAT, INDEX_VERSION):
            return None
        if (head["dtype"], head["eos_id"]) != (dtype.str, eos_id):
            return None  # an index for other arguments: rebuilt for these
        count, tokens = int(head["documents"]), int(head["tokens"])
        stamp = (int(head["size"]), int(head["mtime_ns"]), int(head["min_id"]))
        high, digest = int(head["max_id"]), str(head["blake2b"])
        etag = None if head.get("etag") is None else str(head["etag"])
    except (ValueError, KeyError, TypeError):
        return None
    if size != len(line) + 8 * count or len(line) % _ALIGN:
        raise _Unsound(f"its header says {count} documents, but it holds {size - len(line)} bytes")
    ends = offsets(count)
    if count and not (ends[0] >= 1 and ends[-1] <= tokens and bool((ends[1:] > ends[:-1]).all())):
        raise _Unsound(f"its offsets are not increasing within the file's {tokens} tokens")
    if _digest(tokens, stamp[2], high, ends) != digest:
        raise _Unsound("its offsets or recorded ids do not match the digest in its header")
    return DocIndex(stamp[0], stamp[1], dtype.str, eos_id, tokens, stamp[2], high, ends, etag)


def _encode(index: DocIndex, name: str) -> bytes:
    """The index file's bytes: its header line, padded, then the offsets."""
    digest = _digest(index.tokens, index.min_id, index.max_id, index.ends)
    line = json.dumps(index.header(name, digest), separators=(",", ":")).encode()
    pad = -(len(line) + 1) % _ALIGN
    return line + b" " * pad + b"\n" + np.ascontiguousarray(index.ends, dtype="<i8").tobytes()


def _write(ipath: str, index: DocIndex, name: str) -> None:
    _indexes.write_atomic(ipath, _encode(index, name))


def _read_remote(
    f: TokenFile, dtype: np.dtype[Any], eos_id: int, index_dir: str | None
) -> DocIndex | None:
    """The kept index of the remote file ``f``, read in one request (or from ``index_dir``)."""
    data = _indexes.load(f.remote.stores, f.name, INDEX_SUFFIX, index_dir)
    if data is None:
        return None
    line = data[: data.find(b"\n") + 1] if b"\n" in data[:_MAX_HEADER] else b""
    return _parse(line, len(data), dtype, eos_id, lambda count: np.frombuffer(
        data, dtype="<i8", count=count, offset=len(line)
    ))  # fmt: skip


def kept(f: TokenFile, dtype: np.dtype[Any], eos_id: int, index_dir: str | None) -> DocIndex | None:
    """The kept boundary index of ``f`` as it is, or None (missing, unreadable, for another eos
    id or dtype); a ``ValueError`` when its offsets do not match its own header."""
    remote = f.remote is not None
    try:
        if remote:
            return _read_remote(f, dtype, eos_id, index_dir)
        return _read(index_path(f.path, index_dir), dtype, eos_id)
    except _Unsound as exc:
        where = (
            _indexes.where(f.name, INDEX_SUFFIX, index_dir)
            if remote
            else index_path(f.path, index_dir)
        )
        raise Untrusted(
            f"token file {f.name}: its document index {where} cannot be trusted ({exc}); "
            f"it was edited or corrupted. {rebuild_hint(f.name, eos_id, dtype)}"
        ) from None


def document_lengths(index: DocIndex) -> np.ndarray:
    """The token counts of the file's documents, in order (its tail included): what
    :func:`seekdata.sources.tokens.packing.block_counts` takes, a file at a time."""
    return np.diff(file_ends(index, 0, index.documents), prepend=0)


def file_ends(index: DocIndex, lo: int, hi: int) -> np.ndarray:
    """Where documents ``lo .. hi - 1`` of the file stop (token positions in the file; the
    tail's is the file's end)."""
    ends = np.asarray(index.ends[lo : min(hi, len(index.ends))], dtype=np.int64)
    if hi > len(index.ends):  # the tail
        ends = np.append(ends, index.tokens)
    return ends


def load_or_build(
    f: TokenFile,
    dtype: np.dtype[Any],
    eos_id: int,
    *,
    index_dir: str | None,
    rebuild: bool = False,
    force: bool = False,
) -> DocIndex:
    """The validated boundary index of one token file; see the module docstring for the rules.
    A remote file's index is kept beside it (or under ``index_dir``) and stamped with its
    ``ETag`` instead of its mtime."""
    remote = f.remote is not None
    ipath = (
        _indexes.where(f.name, INDEX_SUFFIX, index_dir) if remote else index_path(f.path, index_dir)
    )
    hint = rebuild_hint(f.name, eos_id, dtype)
    try:
        old = None if force else kept(f, dtype, eos_id, index_dir)
    except Untrusted:
        if not rebuild:
            raise
        old = None
    if old is not None and (old.size, old.mtime_ns, old.etag) == (f.size, f.mtime_ns, f.etag):
        return old
    if old is not None and old.size != f.size and not rebuild:
        raise _changed(f, old, hint)
    if remote:  # before a pass over the file: somewhere to keep the index
        _indexes.check_place(f.remote.stores, f.name, INDEX_SUFFIX, index_dir)
    new = scan(f, dtype, eos_id)
    unchanged = old is not None and np.array_equal(old.ends, new.ends)
    if old is not None and not unchanged and not rebuild:
        raise _changed(f, old, hint)
    try:
        if remote:
            _indexes.save(f.remote.stores, f.name, INDEX_SUFFIX, index_dir, _encode(new, f.name))
        else:
            _write(ipath, new, f.name)
    except OSError as exc:
        if not unchanged:  # an unchanged index with a stale stamp still describes the file
            raise ValueError(
                f"token file {f.name}: cannot write its document index to {ipath} ({exc}); "
                "pass index_dir= (--index-dir) a writable directory"
            ) from exc
    return new


def _changed(f: TokenFile, old: DocIndex, hint: str) -> ValueError:
    how = (
        f"size {old.size} → {f.size} bytes"
        if old.size != f.size
        else "same size, but its document boundaries moved"
    )
    return ValueError(
        f"token file {f.name} changed since its document index was built ({how}); positions "
        f"saved in a checkpoint may now name other sequences. If the change is intended, {hint}"
    )


def first_out_of_vocab(tokens: np.ndarray, vocab_size: int) -> int | None:
    """The first position of ``tokens`` holding an id outside ``[0, vocab_size)``, or None."""
    for start in range(0, len(tokens), _CHUNK):
        chunk = np.asarray(tokens[start : start + _CHUNK])
        bad = np.flatnonzero((chunk < 0) | (chunk >= vocab_size))
        if len(bad):
            return start + int(bad[0])
    return None


def vocab_error(name: str, position: int, token: int, vocab_size: int) -> ValueError:
    return ValueError(
        f"token file {name}: token {position} of the file is id {token}, outside "
        f"[0, vocab_size={vocab_size}); the file was tokenized with another vocabulary, holds "
        f"another dtype, or is corrupt; check dtype= and vocab_size="
    )


def check_vocab(
    f: TokenFile, min_id: int, max_id: int, dtype: np.dtype[Any], vocab_size: int
) -> None:
    """Refuse ``f`` when its recorded ids (its index's, or its manifest row's) leave
    ``[0, vocab_size)``, naming the first such token."""
    if min_id >= 0 and max_id < vocab_size:
        return
    tokens = token_array(f, dtype)
    position = first_out_of_vocab(tokens, vocab_size)
    where = 0 if position is None else position  # None: the file changed since it was indexed
    raise vocab_error(f.name, where, int(tokens[where : where + 1][0]), vocab_size)


def manifest_params(dtype: np.dtype[Any], eos_id: int) -> dict[str, Any]:
    """The tokens family's manifest ``params``: what decides every file's documents."""
    return {"dtype": np.dtype(dtype).str, "eos_id": int(eos_id)}


def stamp(index: DocIndex) -> str:
    """The stamp the index was built under, as a manifest writes it: a remote object's ETag,
    a local file's ``mtime_ns:<int>``."""
    return index.etag if index.etag is not None else f"mtime_ns:{index.mtime_ns}"


def manifest_entry(index: DocIndex, name: str) -> dict[str, Any]:
    """One file's row of a tokens manifest (``seekdata index --eos-id``), from its index:
    the common columns (``items``: tokens; ``digest``: the index's, what decides the file's
    documents) and the family's (``documents``, ``min_id``, ``max_id``, ``tail``)."""
    return {
        "name": name.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1],
        "size": index.size,
        "stamp": stamp(index),
        "items": index.tokens,
        "digest": index.digest,
        "documents": index.documents,
        "min_id": index.min_id,
        "max_id": index.max_id,
        "tail": int(index.tail),
    }


def packing_section(
    indexes: Iterable[DocIndex], seq_lens: Iterable[int], jobs: int = 1
) -> dict[str, Any]:
    """A tokens manifest's ``packing``: per ``seq_len``, the sequences of each packing block
    of the documents of ``indexes`` — every file of the folder, in the manifest's (name)
    order. A dataset over exactly those files in that order takes its counts from here."""
    indexes = list(indexes)
    return {
        str(n): {
            "version": _packing.PACKING_VERSION,
            "block": _packing.BLOCK,
            "files": len(indexes),
            "sequences": _packing.block_counts(map(document_lengths, indexes), n, jobs),
        }
        for n in sorted(set(seq_lens))
    }


@dataclass(frozen=True)
class Indexed:
    """What ``seekdata index`` reports for one token file."""

    name: str
    tokens: int
    documents: int


def index_files(
    names: Sequence[str],
    *,
    dtype: np.dtype[Any],
    eos_id: int,
    vocab_size: int | None = None,
    index_dir: str | None = None,
    force: bool = False,
    jobs: int = 1,
    progress: Callable[[Iterator[Indexed], int], Iterable[Indexed]] | None = None,
    stores: Any = None,
) -> list[Indexed]:
    """Load or build the boundary index of every token file (``seekdata index --eos-id``).
    Remote files are read through ``stores`` (their ``storage_options``)."""
    one = functools.partial(
        _index_one, dtype=dtype, eos_id=eos_id, vocab_size=vocab_size,
        index_dir=index_dir, force=force, stores=stores,
    )  # fmt: skip
    # the scan is numpy over each file: processes give one core per file
    pool = _processes.pool(jobs) if jobs > 1 else None
    try:
        results: Iterator[Indexed] = pool.map(one, names) if pool else map(one, names)
        return list(progress(results, len(names)) if progress else results)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def _index_one(
    name: str,
    *,
    dtype: np.dtype[Any],
    eos_id: int,
    vocab_size: int | None,
    index_dir: str | None,
    force: bool,
    stores: Any = None,
) -> Indexed:
    f = describe(name, dtype, stores=stores)
    index = load_or_build(f, dtype, eos_id, index_dir=index_dir, force=force)
    if vocab_size is not None:
        check_vocab(f, index.min_id, index.max_id, dtype, vocab_size)
    return Indexed(name, f.tokens, len(index.ends) + (int(index.ends[-1:].sum()) != f.tokens))
