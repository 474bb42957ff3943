"""The corpus manifest: what building a dataset needs of every file, in one object per folder.

A dataset over 10^5 files cannot read 10^5 per-file indexes on every rank at every start. The
manifest of a folder holds, per file, what construction needs — its name, size, stamp (what
tells that it changed), item count and a digest of what decides its items — so a dataset gets
``len``, ``shard_sizes`` and ``stream_signature`` from one request per folder, and reads a
file's own index lazily, when it first reads from that file (DESIGN, "Start in O(1) at any
size"). ``seekdata index`` writes it; a dataset finds it for its own files without being told.

Where it lives (:func:`manifest_url`)
    One manifest per folder and family (``tar``, ``tokens``, ``parquet``):
    ``<folder>/seekdata-manifest-<family>.json``, listing that folder's files by basename (a
    local folder or a remote prefix alike; written with one PUT). With ``index_dir`` (a
    read-only store, or indexes kept elsewhere) the manifest of folder F is
    ``<index_dir>/seekdata-manifest-<family>.<blake2b-8 of F>.json`` instead, as per-file
    indexes go under ``index_dir``.

The format (version :data:`MANIFEST_VERSION`; docs/scale.md, "The manifest, field by field")
    One JSON object, columnar (it parses fast and becomes numpy arrays without an object per
    file)::

        {"format": "seekdata-manifest", "version": 1, "family": "tar",
         "params": {...},            # family parameters that decide the items (tokens: dtype)
         "created": "2026-11-29T05:00:00Z", "tool": "seekdata 0.x",
         "files": {"name": [...],    # basenames, sorted (by their UTF-8 bytes)
                   "size": [...],    # bytes
                   "stamp": [...],   # a remote object's ETag, a local file's "mtime_ns:<int>"
                   "items": [...],   # samples / tokens / rows: the family's unit
                   "digest": [...],  # 16-byte blake2b (hex) of what decides the file's items
                   ...},             # family columns (tar: first_key, last_key)
         "parts": null}              # or, above PART_FILES files, the list of part objects

    plus family sections (tokens: ``"packing"``). Above :data:`PART_FILES` files a folder's
    manifest is a head (``"files"`` absent, ``"parts": [{"name", "files", "digest"}, ...]``) and
    part objects holding ``files`` columns over contiguous name ranges
    (``seekdata-manifest-<family>.part-00000.json``); construction reads the head and the
    parts. A newer ``version`` than this release knows is refused, naming the fix.

What a dataset does with it (:func:`for_files`)
    It groups its files by folder and reads each folder's manifest: one open or GET per folder.
    ``manifest=None`` (the default) looks as above, ``False`` never uses one, a path or URL
    names the manifest of every file. A folder without a manifest keeps today's behaviour (its
    files' indexes read at construction) and, above :data:`MANY_FILES` such files, a warning
    names the ``seekdata index`` command that makes the start O(1). The dataset's files are
    looked up by basename; the manifest may list more (a train/val split of one folder), and
    the dataset keeps its own order, never the manifest's. A manifest that lists none of a
    dataset's files of its folder is another dataset's: those files are read as without one.
    The result, a :class:`Table`, holds the files' columns in the dataset's order, a few numpy
    arrays (about 48 bytes per file).

Stale manifests are refused, naming the file, the manifest and the fix
    A file not in its folder's manifest: at construction (:func:`for_files`). A file changed or
    missing: when it is first opened or read (:meth:`Table.check_stamp`: a local open's
    ``fstat``, a remote index's recorded ETag), at no extra request. A per-file index rebuilt
    after the manifest (its digest another): :meth:`Table.check_digest`.

Signatures (:func:`signature`)
    A digest of the family's parameters, the item count and the per-file digests in the
    dataset's order — computed from the manifest, or from the files' indexes without one, so
    the same data has the same signature either way. Its mark ``d2:`` tells it from the forms
    earlier releases wrote.

Building (the ``seekdata index`` command): :func:`write` (atomic local write, or one PUT),
:func:`merge` (new entries replace same-named ones), :func:`read`, and the part records of a
build split across machines (:func:`part_record_url`, :func:`write_part_record`,
:func:`read_part_record`, :func:`remove`).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import itertools
import json
import os
import shlex
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seekdata.sources.files import indexes as _indexes
from seekdata.sources.remote import faults as _faults
from seekdata.sources.remote.urls import is_remote, locate, url_scheme

__all__ = [
    "BASE_COLUMNS",
    "DIGEST_BYTES",
    "FAMILIES",
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "MANY_FILES",
    "PART_FILES",
    "SIGNATURE_MARK",
    "Manifest",
    "Table",
    "check_choice",
    "digest_of",
    "folder_of",
    "for_files",
    "local_stamp",
    "manifest_name",
    "manifest_url",
    "merge",
    "part_record_url",
    "read",
    "read_part_record",
    "read_url",
    "remove",
    "signature",
    "stale_error",
    "write",
    "write_part_record",
]

#: ``format`` field of every manifest (and of its parts and part records).
MANIFEST_FORMAT = "seekdata-manifest"
#: The format's version; a manifest of a newer one is refused (upgrade, or rebuild).
MANIFEST_VERSION = 1
#: Above this many files a folder's manifest is split into a head and parts.
PART_FILES = 262_144
#: Above this many files without a manifest, a dataset warns that ``seekdata index`` makes the
#: start O(1).
MANY_FILES = 1000
#: The families that write manifests.
FAMILIES = ("tar", "tokens", "parquet")
#: Columns every manifest has, in this order; a family's own columns follow, sorted.
BASE_COLUMNS = ("name", "size", "stamp", "items", "digest")
#: Bytes of a per-file digest (written as 32 hex digits).
DIGEST_BYTES = 16
#: Marks a signature that is a digest of per-file digests (:func:`signature`).
SIGNATURE_MARK = "d2:"


def manifest_name(family: str, part: int | None = None) -> str:
    """The file name of a folder's manifest of ``family`` (or of its part ``part``)."""
    _check_family(family)
    return f"seekdata-manifest-{family}" + ("" if part is None else f".part-{part:05d}") + ".json"


def folder_of(url: str) -> str | None:
    """The folder ``url`` lies in, as a manifest names it: a remote prefix
    (``s3://b/corpus``), a local folder's absolute path; None for a ``pipe:`` command, which
    has no folder."""
    scheme = url_scheme(url)
    if is_remote(url):
        return url.rsplit("/", 1)[0]
    if scheme == "file":
        from urllib.parse import urlparse

        url = urlparse(url).path
    elif scheme is not None:
        return None
    return os.path.dirname(os.path.abspath(url))


def _keyed(folder: str, family: str, index_dir: str, tail: str) -> str:
    where = folder if is_remote(folder) else os.path.realpath(folder)
    digest = hashlib.blake2b(where.encode(), digest_size=8).hexdigest()
    return os.path.join(index_dir, f"seekdata-manifest-{family}.{digest}{tail}")


def manifest_url(
    folder: str, family: str, index_dir: str | None = None, part: int | None = None
) -> str:
    """Where the manifest of ``family`` for ``folder`` (a local folder or a remote prefix)
    lives: in the folder, or under ``index_dir``."""
    name = manifest_name(family, part)
    if index_dir is not None:
        return _keyed(folder, family, index_dir, name[len(f"seekdata-manifest-{family}") :])
    return f"{folder}/{name}" if is_remote(folder) else os.path.join(folder, name)


def part_record_url(folder: str, family: str, index_dir: str | None, i: int, n: int) -> str:
    """Where part ``i`` of ``n`` of a build split across machines (``seekdata index --part
    I/N``) records the entries of its files, until the run that finds all ``n`` merges them."""
    tail = f".part-{i}-of-{n}.json"
    if index_dir is not None:
        return _keyed(folder, family, index_dir, tail)
    name = f"seekdata-manifest-{family}{tail}"
    return f"{folder}/{name}" if is_remote(folder) else os.path.join(folder, name)


def local_stamp(st: os.stat_result) -> str:
    """A local file's stamp: what tells that it changed since it was described."""
    return f"mtime_ns:{st.st_mtime_ns}"


def digest_of(*chunks: bytes | str) -> str:
    """A per-file digest (:data:`DIGEST_BYTES` of blake2b, hex) of what decides its items,
    fed in order: every family computes its files' digests with this."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for chunk in chunks:
        data = chunk.encode() if isinstance(chunk, str) else chunk
        h.update(len(data).to_bytes(8, "little"))  # a boundary between chunks: no ambiguity
        h.update(data)
    return h.hexdigest()


def signature(params: Mapping[str, Any], n: int, digests: np.ndarray) -> str:
    """The digest of digests: the family's ``params``, the item count ``n`` and the per-file
    digests (``digests``: an ``(files, 16)`` uint8 array, in the dataset's file order), as
    ``"d2:<16 hex digits>"``. The same with or without a manifest: a per-file digest is
    computed from the file's index when no manifest gives it."""
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps(dict(params), sort_keys=True, separators=(",", ":")).encode())
    h.update(str(int(n)).encode() + b"\0")
    h.update(np.ascontiguousarray(digests, dtype=np.uint8).tobytes())
    return SIGNATURE_MARK + h.hexdigest()


def stale_error(url: str, manifest: str, problem: str, fix_args: str = "") -> ValueError:
    """The refusal of a file that differs from its manifest entry: what must hold, what was
    found, and the fix (index it again, or ``manifest=False``)."""
    return ValueError(
        f"{url}: {problem}, so the manifest {manifest} no longer describes it and positions "
        f"saved in a checkpoint could name other items; run `seekdata index "
        f"{shlex.quote(url)}{fix_args}` (it indexes new or changed files and updates the "
        "manifest; --force if the file was rewritten on purpose), or pass manifest=False to "
        "read every file's own index instead"
    )


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"manifest: family must be one of {FAMILIES}, got {family!r}")


# -- the manifest as read ---------------------------------------------------------------------


@dataclass(eq=False)
class Manifest:
    """One folder's manifest, its columns as arrays: ``names`` (``S`` bytes, sorted),
    ``size`` and ``items`` (int64), ``digests`` (``(files, 16)`` uint8), ``stamps`` (str),
    and the family's columns (:meth:`column`); ``sections`` the family's top-level sections
    (tokens: ``"packing"``)."""

    family: str
    params: dict[str, Any]
    names: np.ndarray
    size: np.ndarray
    items: np.ndarray
    digests: np.ndarray
    stamps: list[str]
    columns: dict[str, Any] = field(default_factory=dict)
    sections: dict[str, Any] = field(default_factory=dict)
    url: str = ""
    created: str = ""
    tool: str = ""

    def __len__(self) -> int:
        return len(self.names)

    def column(self, name: str) -> Any:
        """A column by its name: a base one (``size``, ``items``, ``stamp``, ``digest``,
        ``name``) or the family's own (``first_key``...); ``KeyError`` naming the manifest
        when it has none."""
        base = {
            "size": self.size, "items": self.items, "stamp": self.stamps,
            "digest": self.digests, "name": self.names,
        }  # fmt: skip
        if name in base:
            return base[name]
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(
                f"manifest {self.url}: no column {name!r} (it has {sorted(self.columns)}); "
                "rebuild it with this release's `seekdata index`"
            ) from None

    def lookup(self, basenames: Sequence[str]) -> np.ndarray:
        """The row of each of ``basenames`` (int64); ``KeyError`` naming the first not in it."""
        rows, found = _find(self.names, basenames)
        if not found.all():
            missing = basenames[int(np.flatnonzero(~found)[0])]
            raise KeyError(missing)
        return rows

    def entries(self) -> list[dict[str, Any]]:
        """One dict per file (the columns of a row): what :func:`merge` and :func:`write`
        take. For building; a dataset keeps the columns."""
        names = [n.decode() for n in self.names.tolist()]
        hexes = [bytes(d).hex() for d in self.digests]
        out = []
        for k, name in enumerate(names):
            row = {
                "name": name, "size": int(self.size[k]), "stamp": self.stamps[k],
                "items": int(self.items[k]), "digest": hexes[k],
            }  # fmt: skip
            for col, values in self.columns.items():
                row[col] = _plain(values[k])
            out.append(row)
        return out


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _names_array(names: Sequence[str]) -> np.ndarray:
    """``names`` as fixed-width UTF-8 bytes (numpy ``S``): ASCII names at numpy's speed."""
    if not len(names):
        return np.zeros(0, dtype="S1")
    try:
        return np.array(names, dtype=str).astype("S")
    except UnicodeEncodeError:
        encoded = [n.encode() for n in names]
        return np.array(encoded, dtype=f"S{max(1, max(map(len, encoded)))}")


def _find(names: np.ndarray, basenames: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``basenames`` in the sorted ``names``, and which were found."""
    query = _names_array(basenames)
    width = max(names.dtype.itemsize, query.dtype.itemsize)
    table = names if names.dtype.itemsize == width else names.astype(f"S{width}")
    query = query.astype(f"S{width}", copy=False)
    rows = np.searchsorted(table, query)
    inside = rows < len(table)
    found = np.zeros(len(query), dtype=bool)
    found[inside] = table[rows[inside]] == query[inside]
    return rows.astype(np.int64), found


def _digest_array(hexes: Sequence[str], where: str) -> np.ndarray:
    try:
        raw = bytes.fromhex("".join(hexes))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: its digests must be hex strings ({exc})") from None
    if len(raw) != DIGEST_BYTES * len(hexes):
        raise ValueError(
            f"{where}: every digest must be {DIGEST_BYTES} bytes ({2 * DIGEST_BYTES} hex)"
        )
    return np.frombuffer(raw, dtype=np.uint8).reshape(len(hexes), DIGEST_BYTES)


def _columns_of(doc: Any, where: str) -> dict[str, Any]:
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or any(c not in files for c in BASE_COLUMNS):
        raise ValueError(f"{where}: its 'files' must hold the columns {list(BASE_COLUMNS)}")
    n = len(files["name"])
    if any(not isinstance(v, list) or len(v) != n for v in files.values()):
        raise ValueError(f"{where}: every column of 'files' must be a list of {n} values")
    return files


def _corrupt(url: str, problem: str) -> ValueError:
    return ValueError(
        f"manifest {url}: {problem}; it was not written by `seekdata index`, or was cut short; "
        "rebuild it with `seekdata index` on the folder's files, or pass manifest=False"
    )


def _parse(data: bytes, url: str, family: str | None) -> dict[str, Any]:
    doc = _indexes.parse_json(data)
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise _corrupt(url, f"it is not a {MANIFEST_FORMAT} JSON object")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _corrupt(url, f"its version must be an int, got {version!r}")
    if version > MANIFEST_VERSION:
        raise ValueError(
            f"manifest {url}: version {version}, but this release of seekdata reads manifests "
            f"up to version {MANIFEST_VERSION}; upgrade seekdata, or rebuild the manifest with "
            "this release's `seekdata index`"
        )
    if family is not None and doc.get("family") != family:
        raise ValueError(
            f"manifest {url}: it describes {doc.get('family')!r} files, but a {family!r} "
            f"dataset reads it; name the {family} manifest (manifest=), or pass manifest=False"
        )
    return doc


def _from_columns(doc: dict[str, Any], files: dict[str, Any], url: str, family: str) -> Manifest:
    where = f"manifest {url}"
    try:
        names = _names_array([str(n) for n in files["name"]])
        size = np.asarray(files["size"], dtype=np.int64)
        items = np.asarray(files["items"], dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _corrupt(url, f"its sizes and item counts must be integers ({exc})") from None
    if len(names) > 1 and not bool((names[1:] > names[:-1]).all()):
        raise _corrupt(url, "its file names must be sorted and distinct")
    stamps = [str(s) for s in files["stamp"]]
    digests = _digest_array(files["digest"], where)
    extra = {k: v for k, v in files.items() if k not in BASE_COLUMNS}
    sections = {
        k: v for k, v in doc.items()
        if k not in ("format", "version", "family", "params", "created", "tool", "files", "parts")
    }  # fmt: skip
    params = doc.get("params") or {}
    if not isinstance(params, dict):
        raise _corrupt(url, "its params must be an object")
    return Manifest(
        family=family, params=params, names=names, size=size, items=items, digests=digests,
        stamps=stamps, columns=extra, sections=sections, url=url,
        created=str(doc.get("created", "")), tool=str(doc.get("tool", "")),
    )  # fmt: skip


def _load(url: str, stores: Any) -> bytes | None:
    """The bytes of the object or file ``url``; None when it is not there."""
    if not is_remote(url):
        try:
            with open(url, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
    loc = locate(url, stores.options if stores is not None else None)
    backend = _stores(stores).backend(loc)

    def get() -> bytes | None:
        try:
            return backend.whole(loc.key)
        except _faults.Permanent as exc:
            if exc.kind in ("missing", "denied"):  # S3 answers 403 for a missing key too
                return None
            raise

    return _faults.retrying(url, "read the manifest", get)


def _stores(stores: Any) -> Any:
    if stores is None:
        from seekdata.sources.remote import Stores

        return Stores({})
    return stores


def read_url(url: str, family: str | None = None, *, stores: Any = None) -> Manifest | None:
    """The manifest at ``url`` (with its parts, if split); None when there is none."""
    data = _load(url, stores)
    if data is None:
        return None
    doc = _parse(data, url, family)
    fam = str(doc.get("family"))
    parts = doc.get("parts")
    if not parts:
        return _from_columns(doc, _columns_of(doc, f"manifest {url}"), url, fam)
    if not isinstance(parts, list):
        raise _corrupt(url, "its parts must be a list")
    base = url.rsplit("/", 1)[0] if is_remote(url) else os.path.dirname(url)
    columns: dict[str, list[Any]] = {}
    for part in parts:
        name = part.get("name") if isinstance(part, dict) else None
        if not isinstance(name, str) or "/" in name or os.sep in name:
            raise _corrupt(url, f"each part must name a file beside it, got {part!r}")
        purl = f"{base}/{name}" if is_remote(url) else os.path.join(base, name)
        pdata = _load(purl, stores)
        if pdata is None:
            raise _corrupt(url, f"its part {purl} is missing")
        if hashlib.blake2b(pdata, digest_size=DIGEST_BYTES).hexdigest() != part.get("digest"):
            raise _corrupt(url, f"its part {purl} is not the one it lists (another digest)")
        files = _columns_of(_parse(pdata, purl, fam), f"manifest part {purl}")
        for k, v in files.items():
            columns.setdefault(k, []).extend(v)
    return _from_columns(doc, _columns_of({"files": columns}, f"manifest {url}"), url, fam)


def read(
    folder: str, family: str, *, stores: Any = None, index_dir: str | None = None
) -> Manifest | None:
    """The manifest of ``family`` for ``folder``; None when there is none."""
    return read_url(manifest_url(folder, family, index_dir), family, stores=stores)


# -- writing ----------------------------------------------------------------------------------


def _put(url: str, data: bytes, stores: Any) -> None:
    if not is_remote(url):
        _indexes.write_atomic(url, data)
        return
    loc = locate(url, stores.options if stores is not None else None)
    backend = _stores(stores).backend(loc)
    try:
        _faults.retrying(url, "write the manifest", lambda: backend.put(loc.key, data))
    except (ValueError, OSError) as exc:
        raise ValueError(
            f"cannot write the manifest {url} ({exc}); pass --index-dir a local directory for "
            "the manifests of read-only stores"
        ) from None


def remove(url: str, stores: Any = None) -> None:
    """Delete the file or object ``url`` (a part record merged into the manifest); a missing
    one is not an error."""
    if not is_remote(url):
        with contextlib.suppress(FileNotFoundError):
            os.remove(url)
        return
    loc = locate(url, stores.options if stores is not None else None)
    backend = _stores(stores).backend(loc)
    try:
        backend.delete(loc.key)
    except _faults.Permanent as exc:
        if exc.kind != "missing":
            raise


def _dumps(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def _table(entries: Sequence[Mapping[str, Any]], where: str) -> dict[str, list[Any]]:
    """The ``files`` columns of ``entries`` (sorted by name already)."""
    extra = sorted({k for e in entries for k in e} - set(BASE_COLUMNS))
    columns: dict[str, list[Any]] = {c: [] for c in (*BASE_COLUMNS, *extra)}
    for e in entries:
        for c in columns:
            if c not in e:
                raise ValueError(f"{where}: the entry of {e.get('name')!r} has no {c!r}")
            columns[c].append(e[c])
    return columns


def _sorted_entries(entries: Iterable[Mapping[str, Any]], where: str) -> list[Mapping[str, Any]]:
    out = sorted(entries, key=lambda e: str(e["name"]).encode())
    for a, b in itertools.pairwise(out):
        if a["name"] == b["name"]:
            raise ValueError(f"{where}: the file {a['name']!r} is listed twice")
    return out


def write(
    folder: str,
    family: str,
    entries: Iterable[Mapping[str, Any]],
    params: Mapping[str, Any],
    *,
    stores: Any = None,
    index_dir: str | None = None,
    part_files: int = PART_FILES,
    sections: Mapping[str, Any] | None = None,
    tool: str | None = None,
) -> str:
    """Write the manifest of ``family`` for ``folder`` from ``entries`` (one mapping per file:
    the base columns and the family's), sorted by name; split into parts above ``part_files``
    files (parts first, the head last: a reader never finds a head whose parts are not there).
    Atomic locally, one PUT per object remotely. Returns the manifest's URL."""
    _check_family(family)
    url = manifest_url(folder, family, index_dir)
    rows = _sorted_entries(entries, f"manifest {url}")
    head: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "family": family,
        "params": dict(params),
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tool": tool or _tool(),
    }
    if len(rows) <= part_files:
        head["files"] = _table(rows, f"manifest {url}")
        head["parts"] = None
    else:
        parts = []
        for p, start in enumerate(range(0, len(rows), part_files)):
            chunk = rows[start : start + part_files]
            purl = manifest_url(folder, family, index_dir, part=p)
            doc = {
                "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "family": family,
                "files": _table(chunk, f"manifest part {purl}"),
            }  # fmt: skip
            data = _dumps(doc)
            _put(purl, data, stores)
            name = purl.rsplit("/", 1)[-1] if is_remote(purl) else os.path.basename(purl)
            digest = hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()
            parts.append({"name": name, "files": len(chunk), "digest": digest})
        head["parts"] = parts
    head.update(sections or {})
    _put(url, _dumps(head), stores)
    return url


def _tool() -> str:
    try:
        from importlib.metadata import version

        return f"seekdata {version('seekdata')}"
    except Exception:  # not installed (a source checkout on PYTHONPATH)
        return "seekdata"


def merge(
    existing: Manifest | Iterable[Mapping[str, Any]] | None,
    new_entries: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """The entries of ``existing`` (a manifest, or entries) with ``new_entries``: a new entry
    replaces the same-named old one; sorted by name."""
    old = existing.entries() if isinstance(existing, Manifest) else list(existing or [])
    by_name = {str(e["name"]): dict(e) for e in old}
    for e in new_entries:
        by_name[str(e["name"])] = dict(e)
    return [by_name[k] for k in sorted(by_name, key=str.encode)]


def write_part_record(
    url: str, entries: Iterable[Mapping[str, Any]], params: Mapping[str, Any], stores: Any = None,
    sections: Mapping[str, Any] | None = None,
) -> None:  # fmt: skip
    """Record the entries one part of a split build indexed (``seekdata index --part I/N``)."""
    doc = {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "kind": "part-record",
        "params": dict(params), "entries": _sorted_entries(entries, url),
        "sections": dict(sections or {}),
    }  # fmt: skip
    _put(url, _dumps(doc), stores)


def read_part_record(url: str, stores: Any = None) -> dict[str, Any] | None:
    """A part record (``params``, ``entries``, ``sections``); None when it is not there."""
    data = _load(url, stores)
    if data is None:
        return None
    doc = _indexes.parse_json(data)
    if not isinstance(doc, dict) or doc.get("kind") != "part-record":
        raise _corrupt(url, "it is not a part record of `seekdata index --part`")
    if not isinstance(doc.get("entries"), list):
        raise _corrupt(url, "its entries must be a list")
    return doc


# -- what a dataset reads: its files' rows, in its order ----------------------------------------


def check_choice(manifest: Any, where: str) -> str | bool | None:
    """A dataset's ``manifest=`` argument: None (find each folder's), False (none), or the
    path or URL of the manifest of every file."""
    if manifest is None or manifest is False:
        return manifest
    if isinstance(manifest, os.PathLike):
        return os.fspath(manifest)
    if isinstance(manifest, str) and manifest:
        return manifest
    raise TypeError(
        f"{where}: manifest must be None (find the manifest of each folder), False (read every "
        f"file's own index) or the path or URL of a manifest; got {manifest!r}"
    )


@dataclass(eq=False)
class Table:
    """The dataset's files as their manifests describe them, in the dataset's order: per file
    ``size``, ``items`` (int64), ``stamp`` (uint64: a hash of the stamp), ``digests``
    (``(files, 16)`` uint8), ``source`` (int32: which of ``manifests`` describes it, -1 for a
    file of a folder without one, whose row the family fills with :meth:`fill`), and the family
    columns asked for (``columns``, lists). A few arrays: no object per file."""

    family: str
    manifests: list[str]
    params: list[dict[str, Any]]
    sections: list[dict[str, Any]]
    source: np.ndarray
    size: np.ndarray
    items: np.ndarray
    stamp: np.ndarray
    digests: np.ndarray
    columns: dict[str, Any]  # per family column: an object array
    fix_args: str = ""

    @classmethod
    def empty(cls, n: int, family: str, fix_args: str = "") -> Table:
        """A table of ``n`` files no manifest describes (each filled with :meth:`fill`)."""
        return cls(
            family=family, manifests=[], params=[], sections=[],
            source=np.full(n, -1, dtype=np.int32), size=np.zeros(n, dtype=np.int64),
            items=np.zeros(n, dtype=np.int64), stamp=np.zeros(n, dtype=np.uint64),
            digests=np.zeros((n, DIGEST_BYTES), dtype=np.uint8), columns={}, fix_args=fix_args,
        )  # fmt: skip

    def covered(self) -> np.ndarray:
        """Which files a manifest describes (bool)."""
        return self.source >= 0

    def manifest_of(self, k: int) -> str | None:
        """The URL of the manifest that describes file ``k``; None when none does."""
        s = int(self.source[k])
        return None if s < 0 else self.manifests[s]

    def fill(self, k: int, *, size: int, stamp: str, items: int, digest: str, **cols: Any) -> None:
        """Describe file ``k`` of a folder without a manifest (from its own index)."""
        self.size[k], self.items[k], self.stamp[k] = size, items, stamp_hash(stamp)
        self.digests[k] = np.frombuffer(bytes.fromhex(digest), dtype=np.uint8)
        for name, value in cols.items():
            if name not in self.columns:
                self.columns[name] = np.full(len(self.size), None, dtype=object)
            self.columns[name][k] = value

    def drop_columns(self) -> None:
        """Forget the family columns (read at construction, not needed after)."""
        self.columns = {}

    def check_stamp(self, k: int, url: str, size: int, stamp: str) -> None:
        """File ``k`` (at ``url``), found now with ``size`` bytes and ``stamp``, against its
        manifest entry: a ``ValueError`` naming it, the manifest and the fix when it changed."""
        where = self.manifest_of(k)
        if where is None:
            return
        if int(self.size[k]) != size:
            problem = f"it is {size} bytes now but {int(self.size[k])} in the manifest"
        elif int(self.stamp[k]) != stamp_hash(stamp):
            problem = f"it was rewritten since it was indexed (its stamp is {stamp} now)"
        else:
            return
        raise stale_error(url, where, problem, self.fix_args)

    def check_digest(self, k: int, url: str, digest: str) -> None:
        """The digest of file ``k``'s own index against the manifest's: refused when the index
        was rebuilt after the manifest (it may describe other items)."""
        where = self.manifest_of(k)
        if where is None or bytes(self.digests[k]).hex() == digest:
            return
        raise stale_error(
            url, where, "its index was rebuilt after the manifest was written (another digest)",
            self.fix_args,
        )  # fmt: skip


#: Weights of the bytes of a stamp in its hash (:func:`stamp_hash`): odd, so that a change of
#: any one byte changes the hash; fixed, so that every process computes the same.
_WEIGHTS = np.random.Generator(np.random.Philox(key=0x5EEC)).integers(
    0, 2**63, size=256, dtype=np.uint64
) * np.uint64(2) + np.uint64(1)


def stamp_hash(stamp: str) -> int:
    """A stamp as 8 bytes (uint64), compared instead of the string: a changed file has
    another one (a change of the file is an accident, not an attack: a weighted sum of the
    stamp's bytes, computed for 10^5 stamps at once)."""
    return int(_stamp_hashes([stamp])[0])


def _objects(values: Any) -> np.ndarray:
    """``values`` as a 1-D object array, one item per file: ``np.asarray`` would make a column
    of equal-length lists (Parquet's rows per row group) a 2-D array."""
    out = np.empty(len(values), dtype=object)
    for k, value in enumerate(values):
        out[k] = value
    return out


def _stamp_hashes(stamps: Sequence[str]) -> np.ndarray:
    if not len(stamps):
        return np.zeros(0, dtype=np.uint64)
    try:
        raw = np.array(stamps, dtype=str).astype("S")
    except UnicodeEncodeError:
        raw = np.array([s.encode() for s in stamps], dtype="S")
    width = raw.dtype.itemsize
    if width > len(_WEIGHTS):
        raise ValueError(f"a stamp must be at most {len(_WEIGHTS)} bytes; got {width}")
    grid = raw.view(np.uint8).reshape(len(stamps), width).astype(np.uint64)
    with np.errstate(over="ignore"):
        return (grid * _WEIGHTS[:width]).sum(axis=1, dtype=np.uint64)


def for_files(
    urls: Sequence[str],
    family: str,
    *,
    stores: Any = None,
    index_dir: str | None = None,
    manifest: str | bool | None = None,
    columns: Sequence[str] = (),
    where: str = "dataset",
    pattern: str | None = None,
    fix_args: str = "",
) -> Table | None:
    """The rows of the files ``urls`` in their folders' manifests, in ``urls``'s order: one
    read per folder (``manifest=None``), none (``False``), or the one manifest named. None when
    no manifest describes any of them. A file whose folder's manifest lists others of the
    dataset's files but not it (added since) is refused, naming the file, the manifest and the
    fix; a manifest that lists none of them is another dataset's, and is not used. Above
    :data:`MANY_FILES` files without a manifest (and ``manifest=None``), a warning names the
    ``seekdata index`` command
    (``pattern``: the dataset's files as the user wrote them; ``fix_args``: the family's
    options of that command, e.g. ``" --eos-id 0"``)."""
    if manifest is False:
        return None
    n = len(urls)
    found: list[Manifest] = []
    source = np.full(n, -1, dtype=np.int32)
    rows = np.zeros(n, dtype=np.int64)
    if isinstance(manifest, str):
        groups = {manifest: list(range(n))}
        named = True
    else:
        named = False
        groups = _by_folder(urls, stores)
    for place, members in groups.items():
        url = place if named else manifest_url(place, family, index_dir)
        got = read_url(url, family, stores=stores)
        if got is None:
            if named:
                raise ValueError(
                    f"{where}: manifest={place!r} names no manifest (not found); pass the path "
                    "or URL of one `seekdata index` wrote, or None to find each folder's"
                )
            continue
        basenames = [urls[k].rpartition("/")[2] for k in members]
        at, ok = _find(got.names, basenames)
        if not named and not ok.any():
            continue  # none of them: another dataset's folder manifest, not a stale one of theirs
        if not ok.all():
            first = members[int(np.flatnonzero(~ok)[0])]
            raise ValueError(
                f"{where}: {urls[first]} is not in the manifest {url}, which describes "
                f"{len(got)} files of its folder (the file was added after it was written); "
                f"run `seekdata index {shlex.quote(urls[first])}{fix_args}` to add it (it "
                "indexes only new or changed files), or pass manifest=False"
            )
        idx = np.asarray(members, dtype=np.int64)
        source[idx] = len(found)
        rows[idx] = at
        found.append(got)
    uncovered = int((source < 0).sum())
    if manifest is None and uncovered > MANY_FILES:
        hint = pattern if pattern is not None else "<your files>"
        warnings.warn(
            f"{where}: {uncovered} files have no manifest, so each one's index is read at "
            f"construction, on every rank; `seekdata index {shlex.quote(hint)}{fix_args}` "
            "writes one manifest per folder and makes the start O(1) (docs/scale.md)",
            stacklevel=3,
        )
    if not found:
        return None
    table = Table.empty(n, family, fix_args)
    table.manifests = [m.url for m in found]
    table.params = [m.params for m in found]
    table.sections = [m.sections for m in found]
    table.source = source
    table.columns = {c: np.full(n, None, dtype=object) for c in columns}
    for s, m in enumerate(found):
        idx = np.flatnonzero(source == s)
        at = rows[idx]
        table.size[idx] = m.size[at]
        table.items[idx] = m.items[at]
        table.digests[idx] = m.digests[at]
        stamps = m.stamps
        table.stamp[idx] = _stamp_hashes([stamps[r] for r in at.tolist()])
        for c in columns:
            values = _objects(m.column(c))
            table.columns[c][idx] = values[at]
    return table


def _by_folder(urls: Sequence[str], stores: Any) -> dict[str, list[int]]:
    """The files ``urls`` (their positions) grouped by folder: parsed once per distinct
    folder text, not once per file (10^5 files start in well under a second). A remote URL
    that names no object is refused here, before any request."""
    heads: dict[str, list[int]] = {}
    for k, url in enumerate(urls):
        head, sep, base = url.rpartition("/")
        if not sep and ":" not in url:
            head = "."  # a file of the working directory
        elif not sep or not base:
            head = url  # a pipe: command, or a URL without an object: on its own
        heads.setdefault(head, []).append(k)
    groups: dict[str, list[int]] = {}
    for members in heads.values():
        first = urls[members[0]]
        if is_remote(first):
            locate(first, stores.options if stores is not None else None)
        folder = folder_of(first)
        if folder is not None:
            groups.setdefault(folder, []).extend(members)
    return groups
