"""Cheap checks that a shard index still describes its tar file.

An index is trusted when the shard's size and mtime match its stamp, so an edited index (or a
shard rewritten in place with its old mtime restored) would otherwise return another member's
bytes silently, and an index with a sample's entries deleted would renumber every later
sample. These checks make both impossible at almost no cost:

- :func:`index_problem`, when an index is loaded: every member's data lies inside the shard,
  on a 512-byte block after its headers, and members do not overlap, in tar order.
- :func:`end_problem`, when an index is loaded: the 512 bytes at the index's ``end`` are the
  end-of-archive marker (a zero block: where tarfile, and so webdataset, stops reading), so a
  sample dropped from the end of an index, with ``end`` moved back to where its headers begin,
  is seen. One small read per shard (a range request for a remote shard), not per sample.
- :func:`unlisted_member`, when an index is loaded: the byte ranges between one listed
  member's data and the next one's headers (and before the first, and after the last up to the
  end-of-archive marker; :func:`unlisted_regions`). In a shard of samples only there are none,
  and nothing is read; any other range is read header by header, and a sample's member there (a
  deleted entry) refuses the index.
- :func:`header_problem`, at every read: the 512-byte tar header just before the data is a
  regular file's and records the member's name and size (its checksum names the failure).
"""

from __future__ import annotations

import contextlib
import io
import re
import tarfile
from typing import Any, BinaryIO

import numpy as np

#: A member name as webdataset splits it (``webdataset.tariterators.base_plus_ext``): the key
#: up to the first dot of its last path component, and the extensions after it. The same
#: pattern, here so that indexing shards does not import webdataset, and with it torch.
_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


def base_plus_ext(name: str) -> tuple[str, str] | tuple[None, None]:
    """``(key, extensions)`` of a member name as webdataset reads it; ``(None, None)`` for a
    name webdataset skips (no extension)."""
    match = _KEY_EXT.match(name)
    if not match:
        return None, None
    return match.group(1), match.group(2)


#: webdataset.tariterators.tar_file_iterator's default ``skip_meta``: members it skips
SKIP_META = re.compile(r"__[^/]*__($|/)")
_BLOCK = tarfile.BLOCKSIZE
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_MAX_OCTAL_SIZE = 8**11 - 1  # larger sizes live in a pax record, not in the header


def index_problem(index: Any) -> str | None:
    """What is wrong with the offsets and sizes of ``index`` (a ShardIndex), or None."""
    offsets, sizes = index.offsets, index.sizes
    if len(offsets) == 0:
        return None
    headers = index.headers
    checks = (
        (sizes < 0, "a negative size"),
        (offsets < _BLOCK, "an offset before the first data block"),
        (offsets % _BLOCK != 0, "an offset off a 512-byte block"),
        (offsets > index.size - sizes, f"data past the shard's end ({index.size} bytes)"),
        ((headers < _BLOCK) | (headers % _BLOCK != 0), "headers that are not whole blocks"),
        (headers > offsets, "headers before the shard's start"),
    )
    for bad, what in checks:
        if bad.any():
            m = int(np.argmax(bad))
            return f"member {m} has {what}: offset {int(offsets[m])}, size {int(sizes[m])}"
    ends = _ends(index)
    overlap = offsets[1:] - headers[1:] < ends[:-1]
    if overlap.any():
        m = int(np.argmax(overlap)) + 1
        return f"member {m} (offset {int(offsets[m])}) overlaps or precedes member {m - 1}"
    if not ends[-1] <= index.end <= index.size - _BLOCK:
        return f"an end of archive at byte {index.end}, before the last member or the shard's end"
    return None


def end_problem(block: bytes, index: Any) -> str | None:
    """What the 512 bytes ``block`` read at ``index.end`` (of a sound ``index``, see
    :func:`index_problem`) are instead of the end-of-archive marker, or None when they are it.

    The marker is the first all-zero block, as tarfile reads an archive (a second one, and
    padding to a record of 10,240 bytes, are what writers add after it; nothing reads them), so
    one block is all this reads. Where the index's ``end`` was moved back over samples it no
    longer lists, the first of their headers is there instead.
    """
    if block == bytes(_BLOCK):
        return None
    where = f"no end-of-archive marker at byte {index.end}, the end the index records"
    if len(block) != _BLOCK:
        return f"{where}: the shard ends {len(block)} bytes after it"
    if _checksum_ok(block):
        name = block[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        return f"{where}: a tar header ({name!r}) is there, of members the index does not list"
    return f"{where}: the bytes there are not zero"


def _ends(index: Any) -> np.ndarray:
    """Where each member's data ends, rounded up to a whole block: where the next header is."""
    return index.offsets + -(-index.sizes // _BLOCK) * _BLOCK


def unlisted_regions(index: Any) -> list[tuple[int, int]]:
    """The byte ranges ``[start, stop)`` of the shard that no member of a sound ``index``
    (see :func:`index_problem`) covers with its headers or data; usually none."""
    if len(index.offsets) == 0:
        return [(0, index.end)] if index.end > 0 else []
    starts = np.append(index.offsets - index.headers, index.end)  # the next one's first header
    ends = np.insert(_ends(index), 0, 0)
    gaps = np.flatnonzero(starts != ends)
    return [(int(ends[g]), int(starts[g])) for g in gaps]


def _number(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256, for sizes of 8 GiB and more
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _checksum_ok(header: bytes) -> bool:
    try:
        recorded = _number(header[148:156])
    except ValueError:
        return False
    blanked = header[:148] + b" " * 8 + header[156:]
    unsigned = sum(blanked)
    if recorded == unsigned:
        return True
    return recorded == unsigned - 256 * sum(b > 127 for b in blanked)  # old tars: signed bytes


def header_problem(header: bytes, key: str, ext: str, size: int) -> str | None:
    """What in the tar ``header`` before a member's data contradicts the index, or None.

    The name, type and size are compared first (cheap); the checksum only tells, when they
    differ, whether the bytes there are a header at all.
    """
    name = f"{key}.{ext}".encode()
    if (  # the common case, checked in a few slices: a short name, tarfile's size field
        header[: len(name) + 1] == name + b"\0"
        and header[124:136] == b"%011o\0" % size
        and header[156:157] in _REGULAR
        and header[345:346] in (b"\0", b"")
    ):
        return None
    problem = _mismatch(header, key, ext, size)
    if problem is not None and (len(header) != _BLOCK or not _checksum_ok(header)):
        return "is not a tar header"
    return problem


def _mismatch(header: bytes, key: str, ext: str, size: int) -> str | None:
    if len(header) != _BLOCK:
        return "is missing"
    if header[156:157] not in _REGULAR:
        return f"is a member of type {header[156:157]!r}, not a regular file"
    try:
        recorded = _number(header[124:136])
    except ValueError:
        return "holds no size"
    if recorded != size and size <= _MAX_OCTAL_SIZE:
        return f"records a size of {recorded} bytes, not {size}"
    name = header[:100].split(b"\0", 1)[0]
    if header[257:263] == b"ustar\x00" and header[345] != 0:
        name = header[345:500].split(b"\0", 1)[0] + b"/" + name
    expected = f"{key}.{ext}"
    if name == expected.encode():
        return None
    if not expected.isascii():
        return None  # pax keeps such a name in its own record; the size matched
    try:
        found = name.decode("ascii")
    except UnicodeDecodeError:
        return f"names {name!r}, not {expected!r}"
    k, e = base_plus_ext(found)
    if k == key and e is not None and e.lower() == ext:
        return None  # the index keeps extensions lower-cased
    if len(found) >= 99 and expected.lower().startswith(found.lower()):
        return None  # a long name (GNU or pax) that the header truncates
    return f"names {found!r}, not {expected!r}"


def ignored(info: tarfile.TarInfo) -> bool:
    """Not a file webdataset reads: not regular, or a top-level ``__name__`` member."""
    name = info.name
    return not info.isreg() or (name.startswith("__") and name.endswith("__") and "/" not in name)


def unlisted_member(path: str | BinaryIO | io.RawIOBase, index: Any) -> str | None:
    """A sample's member in the shard at ``path`` (or in the binary file ``path``: a remote
    shard read by range) between the members a sound ``index`` lists (see
    :func:`unlisted_regions`: usually there is no such range, and nothing is read), or bytes
    there that are not tar headers; None when all there is what webdataset skips (a folder, a
    ``__meta__``, a file without an extension)."""
    # a remote shard's file object is its caller's to keep
    opened = open(path, "rb") if isinstance(path, str) else contextlib.nullcontext(path)  # noqa: SIM115
    with opened as f:
        for start, stop in unlisted_regions(index):
            f.seek(start)
            try:
                tar = tarfile.open(fileobj=f, mode="r:")  # noqa: SIM115 - closed below
            except tarfile.TarError:
                return f"no tar header at byte {start}"
            try:
                while (info := tar.next()) is not None and info.offset < stop:
                    name = info.name
                    if not (ignored(info) or SKIP_META.match(name) or not base_plus_ext(name)[0]):
                        return f"member {name!r} at byte {info.offset} is not listed"
                    tar.members = []  # type: ignore[attr-defined]  # not in typeshed
                reached = tar.offset if info is None else info.offset
            except tarfile.TarError as exc:
                return f"no tar header between bytes {start} and {stop} ({exc})"
            finally:
                tar.close()  # leaves f open: tarfile did not open it
            if reached != stop:
                return f"the tar headers from byte {start} reach byte {reached}, not {stop}"
    return None
