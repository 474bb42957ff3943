"""Parquet footers: each file's row groups and schema, read once.

A Parquet file ends with its footer (the row groups, their rows and the byte range of every
column chunk) and the footer's length. :func:`describe` reads it once per file:

- a local file: with pyarrow, from the file;
- a remote file: with ``index_dir``, from the copy kept there (``<name>.<digest>
  .seekdata-parquet``: a line of JSON with the object's size and ``ETag``, then the footer),
  so building the dataset sends no request at all; else with one request for the object's
  last 64 KiB (a second one when the footer is longer), which also gives its size and
  ``ETag`` — and then keeps the copy under ``index_dir`` when one is given. Reading a footer
  already costs a single request, so nothing is written beside the data.

The ``ETag`` (or, for local files, size and mtime) is checked at every read afterwards: a file
rewritten under a built dataset is refused, never read as another table's rows.
"""

from __future__ import annotations

import io
import json
import os
import stat
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from seekdata.sources import remote
from seekdata.sources.remote import indexes as _indexes

#: ``format`` of a kept footer's header line.
FOOTER_FORMAT = "seekdata-parquet-footer"
#: Bumped when the layout changes; other versions are read again.
FOOTER_VERSION = 1
#: Appended to a remote file's name to name its kept footer under ``index_dir``.
FOOTER_SUFFIX = ".seekdata-parquet"
_MAGIC = b"PAR1"
_TAIL = 64 << 10  # bytes read from a remote file's end: most footers fit


@dataclass(frozen=True, eq=False)
class Part:
    """One Parquet file of a dataset."""

    name: str  #: as given
    path: str | None  #: absolute local path; None for a remote file
    remote: remote.RemoteFile | None  #: the remote object; None for a local file
    metadata: Any  #: pyarrow.parquet.FileMetaData
    size: int  #: bytes when described
    mtime_ns: int  #: local files: mtime when described (0 for remote)

    @property
    def row_groups(self) -> list[int]:
        """Rows in each row group."""
        md = self.metadata
        return [md.row_group(i).num_rows for i in range(md.num_row_groups)]


def describe(
    name: str,
    *,
    stores: remote.Stores,
    index_dir: str | None,
    cache: remote.Cache | None,
    where: str,
) -> Part:
    """Read (or find kept) the footer of one Parquet file; ``ValueError`` naming it when it
    is not one."""
    if not remote.is_remote(name):
        return _local(name, where)
    kept = _kept(stores, name, index_dir)
    if kept is not None:
        size, etag, footer = kept
        file = remote.RemoteFile(stores, name, size=size, etag=etag, cache=cache)
    else:
        file, tail = remote.RemoteFile.with_tail(stores, name, _TAIL, cache=cache)
        file.memory.put(
            file.version, file.size - len(tail), tail
        )  # often the last row group's bytes too
        footer = _footer_from_tail(name, file, tail)
        if index_dir is not None:
            head = {
                "format": FOOTER_FORMAT,
                "version": FOOTER_VERSION,
                "url": name,
                "size": file.size,
                "etag": file.etag,
            }
            line = json.dumps(head, separators=(",", ":")).encode() + b"\n"
            _indexes.save(stores, name, FOOTER_SUFFIX, index_dir, line + footer)
    metadata = _parse(name, footer)
    return Part(name, None, file, metadata, file.size, 0)


def _local(name: str, where: str) -> Part:
    path = name[len("file://") :] if name.startswith("file://") else name
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        raise ValueError(f"{where}: Parquet file {name} does not exist; check the path") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{where}: {name} is not a file (a directory or device); pass files")
    try:
        metadata = pq.read_metadata(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError subclasses
        raise ValueError(
            f"{where}: {name} is not a readable Parquet file ({exc}); check the path, or "
            "rewrite the file"
        ) from exc
    return Part(name, os.path.abspath(path), None, metadata, st.st_size, st.st_mtime_ns)


def _kept(stores: remote.Stores, url: str, index_dir: str | None) -> tuple[int, Any, bytes] | None:
    if index_dir is None:
        return None
    data = _indexes.load(stores, url, FOOTER_SUFFIX, index_dir)
    if data is None:
        return None
    line, _, footer = data.partition(b"\n")
    try:
        head = json.loads(line)
        if (head["format"], head["version"], head["url"]) != (FOOTER_FORMAT, FOOTER_VERSION, url):
            return None
        return int(head["size"]), head["etag"], footer
    except (ValueError, KeyError, TypeError):
        return None  # unreadable: read again


def _footer_from_tail(url: str, file: remote.RemoteFile, tail: bytes) -> bytes:
    if len(tail) < 12 or tail[-4:] != _MAGIC:
        raise ValueError(
            f"{url} is not a Parquet file (it does not end with PAR1); check the URL, or "
            "rewrite the file"
        )
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 > file.size - 4:
        raise ValueError(f"{url}: its Parquet footer claims {length} bytes, more than the file")
    if length + 8 <= len(tail):
        return tail[-8 - length : -8]
    return bytes(file.get(file.size - 8 - length, file.size - 8))


def _parse(url: str, footer: bytes) -> Any:
    blob = _MAGIC + footer + len(footer).to_bytes(4, "little") + _MAGIC
    try:
        return pq.read_metadata(io.BytesIO(blob))
    except Exception as exc:
        raise ValueError(
            f"{url}: its Parquet footer cannot be read ({exc}); the file is corrupt or not "
            "Parquet; rewrite it"
        ) from exc


def column_ranges(metadata: Any, row_group: int, leaves: list[int]) -> list[tuple[int, int]]:
    """The byte ranges of the column chunks ``leaves`` of ``row_group``: what reading it reads."""
    rg = metadata.row_group(row_group)
    out = []
    for j in leaves:
        chunk = rg.column(j)
        start = chunk.data_page_offset
        if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
            start = chunk.dictionary_page_offset
        out.append((start, start + chunk.total_compressed_size))
    return out
