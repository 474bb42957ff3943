"""Parquet footers: each file's row groups and schema, read once; the family's manifest entry.

A Parquet file ends with its footer (the row groups, their rows and the byte range of every
column chunk) and the footer's length. :func:`describe` reads it once per file:

- a local file: with pyarrow, through one Python ``open`` of the file;
- a remote file: with ``index_dir``, from the copy kept there (``<name>.<digest>
  .seekdata-parquet``: a line of JSON with the object's size and ``ETag``, then the footer),
  so building the dataset sends no request at all; else with one request for the object's
  last 64 KiB (a second one when the footer is longer), which also gives its size and
  ``ETag`` — and then keeps the copy under ``index_dir`` when one is given. Reading a footer
  already costs a single request, so nothing is written beside the data.

The ``ETag`` (or, for local files, size and mtime) is checked at every read afterwards: a file
rewritten under a built dataset is refused, never read as another table's rows. A kept footer
whose column chunks do not fit before the file's footer (another file's, swapped in) is refused
when the dataset is built, and any row group's at its read; ``rebuild=True`` (``ParquetRows(...,
rebuild_index=True)``) reads every footer from its file again and keeps it anew.

The corpus manifest (:mod:`seekdata.sources.files.manifest`, written by ``seekdata index``)
holds what building a dataset needs of each file, so that no footer is read then:
:func:`manifest_entry` gives a file's entry — its rows per row group (``row_groups``), its
schema (:func:`schema_description`; :func:`intern_schemas` keeps each distinct one once, in the
manifest's top-level ``schemas``) and :func:`file_digest`, the digest of what decides its rows,
which the footer gives the same. A dataset built from a manifest reads a file's footer when it
first reads one of its rows, and :func:`describe` (``check=``) refuses a file whose size, stamp
or footer digest is not its entry's, naming the file, the manifest and the fix.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seekdata.sources import remote
from seekdata.sources.files import indexes as _indexes
from seekdata.sources.files import manifest as _manifest

#: The family's name in a corpus manifest (``seekdata-manifest-parquet.json``).
FAMILY = "parquet"
#: Bumped when what a file's digest covers changes (its rows per row group, its schema).
DIGEST_VERSION = 1
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
    #: a remote file's footer kept under ``index_dir`` (the file later datasets read it from)
    kept: str | None = None
    footer_bytes: int = 0  #: length of the footer (its Thrift bytes)

    @property
    def row_groups(self) -> list[int]:
        """Rows in each row group."""
        md = self.metadata
        return [md.row_group(i).num_rows for i in range(md.num_row_groups)]

    @property
    def stamp(self) -> str:
        """What tells that the file changed, as a manifest records it: a remote object's
        ``ETag``, a local file's mtime."""
        if self.remote is not None:
            return _etag(self.remote.etag)
        return f"mtime_ns:{self.mtime_ns}"

    @functools.cached_property
    def schema(self) -> dict[str, Any]:
        """The file's schema as a manifest keeps it (:func:`schema_description`)."""
        return schema_description(self.metadata)

    @functools.cached_property
    def digest(self) -> str:
        """What decides the file's rows (:func:`file_digest`)."""
        return file_digest(self.name, self.row_groups, self.schema)

    def entry(self) -> dict[str, Any]:
        """The file's entry in a corpus manifest (:func:`manifest_entry`)."""
        rows = self.row_groups
        return {
            "name": _basename(self.name),
            "size": self.size,
            "stamp": self.stamp,
            "items": sum(rows),
            "digest": self.digest,
            "row_groups": rows,
            "schema": self.schema,
        }


#: What a dataset built from a manifest checks a footer read later against: the manifest table
#: of its files and the file's number there.
Check = tuple[_manifest.Table, int]


def _basename(name: str) -> str:
    """A file's name without its folder, bucket or scheme: what signs it and names it in a
    manifest (the same files copied elsewhere are the same data)."""
    return os.path.basename(name)


def schema_description(metadata: Any) -> dict[str, Any]:
    """A file's Arrow schema as JSON: ``fields`` (name, type, nullable: readable, and what
    its digest covers) and ``arrow`` (the schema's IPC bytes, base64: the exact types back).
    The schema-level metadata (pandas' index, the writer's) is dropped: it varies from file
    to file of one table and decides no row."""
    raw = metadata.schema.to_arrow_schema().remove_metadata().serialize().to_pybytes()
    return _described(raw)


@functools.lru_cache(maxsize=64)
def _described(raw: bytes) -> dict[str, Any]:
    """The description of the schema whose IPC bytes are ``raw``: made once per distinct
    schema (the files of one table share one), so describing 10^4 files costs one each. The
    files share the dict: never changed (a manifest entry copies what it rewrites)."""
    arrow = pa.ipc.read_schema(pa.py_buffer(raw))
    fields = [[f.name, str(f.type), f.nullable] for f in arrow]
    return {"fields": fields, "arrow": base64.b64encode(raw).decode("ascii")}


def arrow_schema(description: dict[str, Any]) -> pa.Schema:
    """The Arrow schema a :func:`schema_description` describes."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(description["arrow"])))


def file_digest(name: str, row_groups: Sequence[int], schema: dict[str, Any]) -> str:
    """What decides a file's rows, as 32 hex digits: its name (not its folder: a copy
    elsewhere is the same data), rows per row group and schema fields. The same from a
    manifest and from the footer, so a dataset signs the same data the same either way."""
    return _manifest.digest_of(
        f"parquet-{DIGEST_VERSION}",
        _basename(name),
        np.asarray(row_groups, dtype="<i8").tobytes(),
        json.dumps(schema["fields"], separators=(",", ":")),
    )


def manifest_entry(
    url: str,
    *,
    stores: remote.Stores,
    index_dir: str | None = None,
    cache: remote.Cache | None = None,
) -> dict[str, Any]:
    """The manifest entry of the Parquet file ``url`` (``seekdata index`` calls this for
    ``*.parquet`` files): ``name`` (basename), ``size``, ``stamp``, ``items`` (rows),
    ``digest`` (:func:`file_digest`), ``row_groups`` (rows of each) and ``schema`` (a
    :func:`schema_description`, which the manifest holds once per distinct schema). Reads the
    footer as :func:`describe` does (and keeps a remote one under ``index_dir``)."""
    part = describe(url, stores=stores, index_dir=index_dir, cache=cache, where="seekdata index")
    return part.entry()


def describe(
    name: str,
    *,
    stores: remote.Stores,
    index_dir: str | None,
    cache: remote.Cache | None,
    where: str,
    rebuild: bool = False,
    check: Check | None = None,
) -> Part:
    """Read (or find kept) the footer of one Parquet file; ``ValueError`` naming it when it
    is not one. ``rebuild``: read a remote file's footer from it even when one is kept.
    ``check``: the manifest entry the file must agree with; a file that differs (size,
    stamp, or a footer of other rows) is refused naming the file, the manifest and the fix."""
    if not remote.is_remote(name):
        part = _local(name, where, check)
        _check_digest(part, check, where)
        return part
    kept = None if rebuild else _kept(stores, name, index_dir)
    if kept is not None and check is not None and not _agrees(check, kept[0], _etag(kept[1])):
        kept = None  # kept for another version of the object: the file's own footer decides
    place = None if index_dir is None else _indexes.local_index_path(name, FOOTER_SUFFIX, index_dir)
    if kept is not None:
        size, etag, footer = kept
        file = remote.RemoteFile(stores, name, size=size, etag=etag, cache=cache)
    else:
        file, tail = remote.RemoteFile.with_tail(stores, name, _TAIL, cache=cache)
        if check is not None:
            _check_stamp(name, check, file.size, _etag(file.etag), where)
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
    part = Part(name, None, file, metadata, file.size, 0, place, len(footer))
    if kept is not None and metadata.num_row_groups:  # the last row group lies furthest
        last = metadata.num_row_groups - 1
        leaves = list(range(metadata.num_columns))
        problem = range_problem(part, last, column_ranges(metadata, last, leaves))
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
    _check_digest(part, check, where)
    return part


def _etag(etag: Any) -> str:
    """A remote object's stamp: its ``ETag`` as the store gives it."""
    return str(etag or "")


def _agrees(check: Check, size: int, stamp: str) -> bool:
    table, k = check
    return int(table.size[k]) == size and int(table.stamp[k]) == _manifest.stamp_hash(stamp)


def _check_stamp(name: str, check: Check, size: int, stamp: str, where: str) -> None:
    """Refuse the file ``name``, found with ``size`` bytes and ``stamp``, when it is not the
    one its manifest entry describes: its rows may now be others."""
    table, k = check
    try:
        table.check_stamp(k, name, size, stamp)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _check_digest(part: Part, check: Check | None, where: str) -> None:
    """Refuse a footer whose rows per row group or schema are not the manifest's."""
    if check is None:
        return
    table, k = check
    try:
        table.check_digest(k, part.name, part.digest)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def fix(part: Part) -> str:
    """How to make ``part`` readable again, for messages: what exists for its kind of file."""
    if part.remote is None:
        return "rewrite the file, or build the dataset again if it was replaced on purpose"
    if part.kept is None:
        return "build the dataset again (it reads the file's footer) if it was replaced on purpose"
    return (
        f"build the dataset again with rebuild_index=True (it reads the file's footer, not the "
        f"copy kept at {part.kept}), or delete that copy"
    )


def range_problem(part: Part, row_group: int, ranges: list[tuple[int, int]]) -> str | None:
    """What is wrong with the column chunk ``ranges`` of ``row_group`` of a remote ``part``:
    each must lie between the file's magic and its footer, else the footer is not the file's."""
    data_end = part.size - 8 - part.footer_bytes
    bad = [(a, b) for a, b in ranges if not 4 <= a <= b <= data_end]
    if not bad:
        return None
    a, b = bad[0]
    return (
        f"{part.name}: its footer places a column chunk of row group {row_group} at bytes "
        f"{a}-{b}, outside the file's data (bytes 4-{data_end} of {part.size}): the footer is "
        f"not this file's (another file's, or the file changed); {fix(part)}"
    )


def _local(name: str, where: str, check: Check | None = None) -> Part:
    """Read a local file's footer through one Python ``open`` (what a process opens is then
    visible to audit hooks, and the size and mtime checked are the open file's own)."""
    path = name[len("file://") :] if name.startswith("file://") else name
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below, after the footer is read)
    except FileNotFoundError as exc:
        if check is not None:
            table, k = check
            gone = _manifest.stale_error(name, table.manifest_of(k) or "", "it does not exist")
            raise ValueError(f"{where}: {gone}") from exc
        raise ValueError(f"{where}: Parquet file {name} does not exist; check the path") from exc
    except IsADirectoryError as exc:
        raise ValueError(f"{where}: {name} is not a file (a directory); pass files") from exc
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{where}: {name} is not a file (a directory or device); pass files")
        if check is not None:
            _check_stamp(name, check, st.st_size, _manifest.local_stamp(st), where)
        try:
            metadata = _local_footer(f, st.st_size)
        except Exception as exc:  # ours, or pyarrow's ArrowInvalid / OSError subclasses
            raise ValueError(
                f"{where}: {name} is not a readable Parquet file ({exc}); check the path, or "
                "rewrite the file"
            ) from exc
    return Part(name, os.path.abspath(path), None, metadata, st.st_size, st.st_mtime_ns)


def _local_footer(f: Any, size: int) -> Any:
    """The metadata of the open Parquet file ``f`` of ``size`` bytes, in two reads (its last 8
    bytes, then its footer), parsed by pyarrow from a buffer of its own: as fast as pyarrow
    opening the path, where a Python file object handed to pyarrow is read call by call."""
    if size < 12:
        raise ValueError(f"{size} bytes, too short for a Parquet file")
    f.seek(size - 8)
    tail = f.read(8)
    if tail[4:] != _MAGIC:
        raise ValueError("it does not end with PAR1")
    length = int.from_bytes(tail[:4], "little")
    if length + 12 > size:
        raise ValueError(f"its footer claims {length} bytes, more than the file")
    f.seek(size - 8 - length)
    footer = f.read(length)
    return pq.read_metadata(pa.BufferReader(_MAGIC + footer + tail))


def _kept(stores: remote.Stores, url: str, index_dir: str | None) -> tuple[int, Any, bytes] | None:
    if index_dir is None:
        return None
    data = _indexes.load(stores, url, FOOTER_SUFFIX, index_dir)
    if data is None:
        return None
    line, _, footer = data.partition(b"\n")
    try:
        head = _indexes.parse_json(line)  # None (not JSON, or nested too deep): a TypeError
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
        return pq.read_metadata(pa.BufferReader(blob))
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


def intern_schemas(
    entries: Sequence[dict[str, Any]], schemas: Sequence[dict[str, Any]] = ()
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each distinct schema of a folder's entries once: ``entries`` (from
    :func:`manifest_entry`, their ``schema`` inline; or from a manifest read back, their
    ``schema`` an index into its ``schemas``) with ``schema`` an index into one list, in
    order of first appearance over the entries sorted by name (so a build split across
    machines writes the same bytes), and the manifest section ``{"schemas": [...]}``."""
    ids: dict[str, int] = {}
    listed: list[dict[str, Any]] = []
    out = []
    for entry in sorted(entries, key=lambda e: str(e["name"]).encode()):
        schema = entry["schema"]
        if not isinstance(schema, dict):
            schema = schemas[int(schema)]
        key = json.dumps(schema, sort_keys=True)
        if key not in ids:
            ids[key] = len(listed)
            listed.append(schema)
        out.append({**entry, "schema": ids[key]})
    return out, {"schemas": listed}
