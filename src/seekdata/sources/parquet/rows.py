"""The rows of many Parquet files as one map-style dataset, row groups as its shards."""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, SupportsIndex

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seekdata._core.checks import check_bool, check_int
from seekdata.sources import remote
from seekdata.sources.files import handles as _handles
from seekdata.sources.files import manifest as _manifest
from seekdata.sources.files import paths as _paths
from seekdata.sources.files.lazy import PerProcess
from seekdata.sources.files.source import FileSource
from seekdata.sources.parquet import columns as _columns
from seekdata.sources.parquet import footers as _footers
from seekdata.sources.parquet.footers import Part

#: Bumped when what decides an item changes; part of ``ParquetRows.stream_signature``.
ROWS_VERSION = 1
#: Most Parquet files one process keeps open (the floor's one limit).
MAX_OPEN_FILES = _handles.MAX_OPEN_FILES

_Urls = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class ParquetRows(FileSource[dict[str, Any]]):
    """Map-style dataset over the rows of Parquet files, local or remote, in file order.

    Args:
        urls: a path or URL, a brace pattern (``"s3://b/train-{00000..00009}.parquet"``), or a
            list of them, in order. Local paths, ``file://``, ``s3://``, ``gs://``, ``az://``,
            ``http(s)://`` and ``hf://datasets/org/name/...`` (docs/remote.md).
        columns: the columns to read (top-level names), default all; every file must have
            them, with the same types.
        format: ``"torch"`` (numbers as tensors, default), ``"numpy"`` or ``"arrow"``;
            see :mod:`seekdata.sources.parquet.columns`.
        storage_options: the back-end's options for remote URLs (credentials, endpoint).
        index_dir: a local directory where remote files' footers are kept, so a later
            dataset is built without a request; the folders' manifests are looked for there
            too (``seekdata index --index-dir``), not beside the files.
        rebuild_index: read every remote file's footer from the file again, not from the copy
            kept under ``index_dir``, and keep it anew: after a file was replaced on purpose.
        cache: a :class:`seekdata.remote.Cache` for remote bytes, or None.
        keep_row_groups: decoded row groups each process keeps (least recently used dropped);
            with ``order="shards"`` keep at least its window (4 by default), so each row
            group is read once per epoch and process.
        manifest: None (default): each folder's ``seekdata-manifest-parquet.json``, written by
            ``seekdata index``, if it has one; False: none, every footer read now; a path or
            URL: that manifest, for every file. From a manifest the dataset is built in one
            read per folder (``len``, row groups, schemas, signature) and each file's footer is
            read when a process first reads one of its rows, checked against its entry
            (docs/remote.md, "Thousands of files: the manifest").

    Item ``i`` is row ``i`` of the files' concatenation, a dict of column values;
    :meth:`__getitems__` reads a batch as a dict of columns (a tensor per numeric column),
    decoding each row group it needs once and taking the batch's rows from it in one Arrow
    call per column — pass ``collate_fn=dict`` to the loader to keep that batch as is. The
    shards are the row groups (:attr:`shard_sizes`), so ``order="shards"`` reads a few row
    groups at a time while the epoch is still shuffled; a global shuffle reads a row group
    per row in the worst case (docs/remote.md: the cost).
    """

    _where = "ParquetRows"
    #: Source protocol: the loader reads a batch with one :meth:`__getitems__` call (a dict of
    #: columns), its randomness keyed by the batch.
    reads_batches = True

    def __init__(
        self,
        urls: _Urls,
        columns: Sequence[str] | None = None,
        *,
        format: str = "torch",
        storage_options: dict[str, Any] | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        cache: remote.Cache | None = None,
        keep_row_groups: int = 8,
        rebuild_index: bool = False,
        manifest: str | os.PathLike[str] | bool | None = None,
    ) -> None:
        where = "ParquetRows"
        check_bool(rebuild_index, "rebuild_index", where)
        if format not in _columns.FORMATS:
            raise ValueError(
                f"{where}: format must be one of {', '.join(map(repr, _columns.FORMATS))}; "
                f"got {format!r}"
            )
        keep_row_groups = check_int(
            keep_row_groups, "keep_row_groups", where, 1, fix="pass e.g. keep_row_groups=8"
        )
        if index_dir is not None and not isinstance(index_dir, (str, os.PathLike)):
            raise TypeError(f"{where}: index_dir must be a path or None; got {index_dir!r}")
        self.format = format
        self.keep_row_groups = keep_row_groups
        self._stores = remote.Stores(remote.check_options(storage_options, where))
        self._cache = remote.check_cache(cache, where)
        self._names = _paths.expand(
            urls, where, noun="Parquet file", example="train-{00..09}.parquet"
        )
        self._index_dir = None if index_dir is None else os.fspath(index_dir)
        self._rebuild = rebuild_index
        choice = _manifest.check_choice(manifest, where)
        self._table = _manifest.for_files(
            self._names,
            _footers.FAMILY,
            stores=self._stores,
            index_dir=self._index_dir,
            manifest=choice,
            columns=("row_groups", "schema"),
            where=where,
            pattern=urls if isinstance(urls, str) else None,
        )
        layout = self._layout()
        self._described = layout.parts  # footers read now, kept with the dataset
        self._lazy: PerProcess[Part] = PerProcess()  # the others, read when first needed
        self._digests = layout.digests
        self._signature: str | None = None
        self.columns, self._schema = _select(layout, self._names, columns, where)
        self._leaves: dict[int, list[int]] = {}  # per file: the selected leaf columns
        self._sizes = layout.sizes
        self._first = layout.first  # file → its first row group (and the count, last)
        self._starts = np.concatenate(([0], np.cumsum(self._sizes, dtype=np.int64)))
        if self._starts[-1] == 0:
            raise ValueError(f"{where}: the files hold no rows; pass files with rows")
        self._reset_local()

    def _layout(self) -> _Layout:
        """Rows per row group, schemas and digests of every file: from the manifests of their
        folders where there are some (no file read), else from each file's footer, read now
        (concurrently when remote) — today's way, kept with the dataset."""
        table, n = self._table, len(self._names)
        todo = list(range(n)) if table is None else np.flatnonzero(~table.covered()).tolist()
        found = remote.map_objects(self._describe, todo, [self._names[k] for k in todo])
        parts: dict[int, Part] = dict(zip(todo, found, strict=True))
        if table is None:
            digests = np.zeros((n, _manifest.DIGEST_BYTES), dtype=np.uint8)
            for k, part in parts.items():
                digests[k] = np.frombuffer(bytes.fromhex(part.digest), dtype=np.uint8)
            return _Layout.of(
                [p.row_groups for p in found], [p.schema for p in found], digests, parts
            )
        for k, part in parts.items():
            entry = part.entry()
            table.fill(
                k, size=entry["size"], stamp=entry["stamp"], items=entry["items"],
                digest=entry["digest"],
            )  # fmt: skip
        groups, ids = table.columns["row_groups"], table.columns["schema"]
        row_groups = [parts[k].row_groups if k in parts else groups[k] for k in range(n)]
        schemas = [parts[k].schema if k in parts else self._schema_of(k, ids[k]) for k in range(n)]
        table.drop_columns()  # what is left: ~48 bytes per file, for the checks of later reads
        return _Layout.of(row_groups, schemas, table.digests, parts)

    def _schema_of(self, k: int, schema: Any) -> dict[str, Any]:
        """File ``k``'s schema from its manifest: an index into the manifest's ``schemas``."""
        assert self._table is not None
        if isinstance(schema, dict):
            return schema
        manifest = self._table.manifest_of(k)
        listed = self._table.sections[int(self._table.source[k])].get("schemas")
        if (
            not isinstance(schema, int)
            or not isinstance(listed, list)
            or not 0 <= schema < len(listed)
        ):
            raise ValueError(
                f"{self._where}: the manifest {manifest} gives {self._names[k]} the schema "
                f"{schema!r}, which its 'schemas' list does not hold; it was not written by "
                "`seekdata index`, or was cut short; run `seekdata index` again, or pass "
                "manifest=False"
            )
        return listed[schema]

    def _describe(self, k: int) -> Part:
        """File ``k``'s footer, read from it (or its kept copy), checked against its manifest
        entry when one describes it."""
        table = self._table
        check = None if table is None or table.manifest_of(k) is None else (table, k)
        return _footers.describe(
            self._names[k],
            stores=self._stores,
            index_dir=self._index_dir,
            cache=self._cache,
            where=self._where,
            rebuild=self._rebuild,
            check=check,
        )

    def _known(self, k: int) -> Part | None:
        """File ``k``'s footer if this process has it, else None (nothing read)."""
        part = self._described.get(k)
        return self._lazy.peek(k) if part is None else part

    def _part(self, k: int) -> Part:
        """File ``k``'s footer: read at construction, or by the first thread of this process
        that needs it."""
        part = self._described.get(k)
        if part is None:
            part = self._lazy.get(k, lambda: self._describe(k))
        return part

    def _reset_local(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._decoded: OrderedDict[int, pa.Table] = OrderedDict()
        self._open: _handles.OpenFiles[Any] = _handles.OpenFiles()

    # -- sizes and layout ------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def files(self) -> list[str]:
        """The files, as given (after brace expansion), in order."""
        return list(self._names)

    @property
    def shard_sizes(self) -> list[int]:
        """Rows of each row group, in file order (the shards of ``order="shards"``)."""
        return self._sizes.tolist()

    @property
    def shard_starts(self) -> list[int]:
        """Index of each row group's first row."""
        return self._starts[:-1].tolist()

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the selected columns."""
        return self._schema

    @property
    def stream_signature(self) -> str:
        """What decides the items, for a loader's state: the selected columns and their types,
        the number of rows and, for each file in order, the digest of its name (not its folder,
        bucket or scheme: the same files moved to a bucket keep their signature), rows per row
        group and schema (:func:`seekdata.sources.parquet.footers.file_digest`) — a digest of
        digests, the same whether they came from the footers or from a manifest."""
        if self._signature is None:  # a pass over 16 bytes per file: once
            params = {
                "family": "ParquetRows",
                "version": ROWS_VERSION,
                "columns": [[f.name, str(f.type)] for f in self._schema],
            }
            digest = _manifest.signature(params, len(self), self._digests)
            self._signature = (
                f"ParquetRows(rows={len(self)}, row_groups={len(self._sizes)}, {digest})"
            )
        return self._signature

    def accepts_signature(self, signature: str, n: int) -> bool:
        """Source protocol: whether ``signature``, written by a release before signatures were
        digests of digests, is this dataset's (all ``n`` rows): a checkpoint it wrote still
        resumes. Computed from the layout, without reading a footer."""
        return n == len(self) and signature == self.legacy_signature()

    def legacy_signature(self) -> str:
        """The :attr:`stream_signature` of the release before digests of digests (the names
        and rows per row group come from the layout, so no footer is read)."""
        groups = [self._sizes[a:b].tolist() for a, b in itertools.pairwise(self._first.tolist())]
        spec = repr(
            (
                "ParquetRows",
                ROWS_VERSION,
                [(_footers._basename(n), g) for n, g in zip(self._names, groups, strict=True)],
                [(f.name, str(f.type)) for f in self._schema],
            )
        )
        digest = hashlib.sha256(spec.encode()).hexdigest()[:16]
        return f"ParquetRows(rows={len(self)}, row_groups={len(self._sizes)}, {digest})"

    def _owner(self, group: int) -> tuple[int, int]:
        """Row group ``group`` as (its file, its number in that file)."""
        k = int(np.searchsorted(self._first, group, side="right")) - 1
        return k, group - int(self._first[k])

    # -- reading -----------------------------------------------------------------------------

    def __getitem__(self, index: SupportsIndex) -> dict[str, Any]:
        return _columns.row(self.__getitems__([self._check_index(index)]), 0)

    def __getitems__(self, indices: Sequence[int]) -> dict[str, Any]:
        """The rows ``indices`` as a dict of columns, in that order."""
        rows = np.fromiter((self._check_index(i) for i in indices), np.int64, len(indices))
        groups = np.searchsorted(self._starts, rows, side="right") - 1
        needed = list(dict.fromkeys(groups.tolist()))  # in order of first use
        tables = self._row_groups(needed)
        offsets = dict(
            zip(needed, itertools.accumulate((t.num_rows for t in tables), initial=0), strict=False)
        )
        starts = self._starts
        at = np.fromiter((offsets[g] for g in groups.tolist()), np.int64, len(groups))
        take = pa.array(at + rows - starts[groups])
        out = {}
        for name in self.columns:
            chunks = [chunk for t in tables for chunk in t.column(name).chunks]
            column = pa.chunked_array(chunks, type=self._schema.field(name).type).take(take)
            out[name] = _columns.convert(column, self.format)
        return out

    def _row_groups(self, groups: list[int]) -> list[pa.Table]:
        """The decoded row groups ``groups``: kept ones as they are, the others read (remote
        ones: all their column chunks fetched at once, concurrently) and kept."""
        if self._pid != os.getpid():
            self._reset_local()
        with self._lock:
            have = {g: self._decoded[g] for g in groups if g in self._decoded}
        missing = [g for g in groups if g not in have]
        owners = {g: self._owner(g) for g in missing}
        files = list(dict.fromkeys(k for k, _ in owners.values()))  # the files read
        parts = {k: p for k in files if (p := self._known(k)) is not None}
        unread = [k for k in files if k not in parts]  # footers to read: concurrently if remote
        found = remote.map_objects(self._part, unread, [self._names[k] for k in unread])
        parts.update(zip(unread, found, strict=True))
        wanted = []
        for g in missing:
            k, local = owners[g]
            part = parts[k]
            if part.remote is not None:
                ranges = _footers.column_ranges(part.metadata, local, self._leaves_of(k, part))
                problem = _footers.range_problem(part, local, ranges)
                if problem is not None:
                    raise ValueError(f"ParquetRows: {problem}")
                wanted += [(part.remote, a, b) for a, b in ranges]
        try:
            remote.prefetch(wanted)  # into memory, where pyarrow's reads find them
        except ValueError as exc:
            for k in files:
                self._refuse_if_changed(parts[k], exc)
            raise
        for g in missing:
            have[g] = self._decode(g)
        with self._lock:
            for g in groups:
                self._decoded[g] = have[g]
                self._decoded.move_to_end(g)
            while len(self._decoded) > self.keep_row_groups:
                self._decoded.popitem(last=False)
        return [have[g] for g in groups]

    def _decode(self, group: int) -> pa.Table:
        k, local = self._owner(group)
        part = self._part(k)
        pf = self._file(k)
        try:
            return pf.read_row_group(local, columns=self.columns, use_threads=False)
        except Exception as exc:
            if isinstance(exc, ValueError | OSError) and str(exc).startswith(part.name):
                self._refuse_if_changed(part, exc)  # a remote read's own error, naming the URL
                raise
            # pyarrow's: an OSError ("Couldn't deserialize thrift"), ArrowInvalid, ...
            detail = " ".join(str(exc).split())[:300]
            raise ValueError(
                f"ParquetRows: row group {local} of {part.name} cannot be decoded "
                f"({type(exc).__name__}: {detail}); the file is corrupt, or its footer is not "
                f"its own (the file changed since the footer was read); {_footers.fix(part)}"
            ) from exc

    def _refuse_if_changed(self, part: Part, exc: BaseException) -> None:
        """Raise, naming the fix that exists for Parquet, when the remote ``part`` is no longer
        the object its footer was read from (one HEAD, on this error path only)."""
        if part.remote is None:
            return
        try:
            now = part.remote.head()
        except (ValueError, OSError):
            return  # the read's own error says more
        if now == (part.size, part.remote.etag):
            return
        raise ValueError(
            f"ParquetRows: {part.name} changed after its footer was read (size {part.size} → "
            f"{now[0]} bytes, ETag {part.remote.etag} → {now[1]}); its rows are no longer where "
            f"the footer says, and positions saved in a checkpoint may now name other rows. If "
            f"the change is intended, {_footers.fix(part)}; else restore the file"
        ) from exc

    def _file(self, k: int) -> Any:
        return self._open.get(k, lambda: self._open_file(self._part(k)))

    def _leaves_of(self, k: int, part: Part) -> list[int]:
        """The leaf columns of file ``k`` that hold the selected columns (what a remote read
        fetches), worked out once per file and process."""
        leaves = self._leaves.get(k)
        if leaves is None:
            flat = part.metadata.schema
            chosen = set(self.columns)
            leaves = [j for j in range(len(flat)) if flat.column(j).path.split(".")[0] in chosen]
            self._leaves[k] = leaves
        return leaves

    def _open_file(self, part: Part) -> Any:
        if part.remote is not None:
            source: Any = part.remote.open()
        else:
            assert part.path is not None
            try:  # a Python open: what a process opens is visible to audit hooks
                source = open(part.path, "rb")  # noqa: SIM115 (the ParquetFile holds it)
                now = _handles.changed(source.fileno(), part.size, part.mtime_ns)
            except OSError as exc:
                raise ValueError(f"Parquet file {part.name}: cannot open it ({exc})") from exc
            if now is not None:
                source.close()
                raise ValueError(
                    f"Parquet file {part.name} changed after this dataset read its footer (size "
                    f"{part.size} → {now[0]} bytes); its rows may now be others; build the "
                    "dataset again"
                )
        pf = pq.ParquetFile(source, metadata=part.metadata, pre_buffer=False)
        if part.remote is None:
            weakref.finalize(pf, source.close)  # closed when the LRU's last reference goes
        return pf

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_lock", "_decoded", "_open"):
            del state[name]  # per process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_local()

    def __repr__(self) -> str:
        return (
            f"ParquetRows({len(self._names)} files, {len(self)} rows, "
            f"{len(self._sizes)} row groups, columns={self.columns})"
        )


@dataclass(frozen=True)
class _Layout:
    """What building a dataset needs of its files, from their footers or from a manifest:
    rows of each row group (``sizes``, flat; ``first``: each file's first row group, then their
    count), each file's schema (``schema_of``: an index into the distinct ``schemas``), each
    file's digest (``(files, 16)`` uint8), and the footers read to find them."""

    sizes: np.ndarray
    first: np.ndarray
    schema_of: np.ndarray
    schemas: list[dict[str, Any]]
    digests: np.ndarray
    parts: dict[int, Part]

    @classmethod
    def of(
        cls,
        row_groups: list[list[int]],
        schemas: list[dict[str, Any]],
        digests: np.ndarray,
        parts: dict[int, Part],
    ) -> _Layout:
        """The layout of files described one by one (each with its schema inline)."""
        ids: dict[str, int] = {}
        schema_of = np.array([ids.setdefault(s["arrow"], len(ids)) for s in schemas], np.int64)
        distinct = list({s["arrow"]: s for s in schemas}.values())
        counts = np.fromiter(map(len, row_groups), np.int64, len(row_groups))
        first = np.concatenate(([0], np.cumsum(counts)))
        sizes = np.fromiter(itertools.chain.from_iterable(row_groups), np.int64, int(first[-1]))
        return cls(sizes, first, schema_of, distinct, digests, parts)


def _select(
    layout: _Layout, names_given: list[str], columns: Sequence[str] | None, where: str
) -> tuple[list[str], pa.Schema]:
    """The selected columns and their schema; every file must have them with the same types
    (checked once per distinct schema, the first file of each named)."""
    firsts: dict[int, int] = {}  # schema → the first file that has it
    for k, s in enumerate(layout.schema_of.tolist()):
        firsts.setdefault(s, k)
    arrows = {s: _footers.arrow_schema(layout.schemas[s]) for s in firsts}
    order = sorted(firsts, key=firsts.__getitem__)
    first = arrows[order[0]]
    if columns is None:
        names = list(first.names)
    else:
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise TypeError(f"{where}: columns must be a list of column names; got {columns!r}")
        names = list(columns)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"{where}: columns must name distinct columns; got {names}")
    schema = None
    for s in order:
        arrow, name = arrows[s], names_given[firsts[s]]
        missing = [c for c in names if c not in arrow.names]
        if missing:
            raise ValueError(
                f"{where}: {name} has no column {missing[0]!r} (it has {arrow.names}); "
                "pass columns= that every file has"
            )
        chosen = pa.schema([arrow.field(c) for c in names])
        if schema is None:
            schema = chosen
        elif not chosen.equals(schema):
            raise ValueError(
                f"{where}: {name} holds columns {chosen} but {names_given[0]} holds "
                f"{schema}; every file must have the same types; pass columns= that agree"
            )
    assert schema is not None
    return names, schema
