"""Cheap checks that a shard index still describes its tar file.

An index is trusted when the shard's size and mtime match its stamp, so an edited index (or a
shard rewritten in place with its old mtime restored) would otherwise return another member's
bytes silently. Two checks make that impossible at almost no cost:

- :func:`index_problem`, when an index is loaded: every member's data lies inside the shard,
  on a 512-byte block after a header, and members do not overlap, in tar order.
- :func:`header_problem`, at every read: the 512-byte tar header just before the data is a
  regular file's and records the member's name and size (its checksum names the failure).
"""

from __future__ import annotations

import tarfile
from typing import Any

import numpy as np
from webdataset.tariterators import base_plus_ext

_BLOCK = tarfile.BLOCKSIZE
_REGULAR = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_MAX_OCTAL_SIZE = 8**11 - 1  # larger sizes live in a pax record, not in the header


def index_problem(index: Any) -> str | None:
    """What is wrong with the offsets and sizes of ``index`` (a ShardIndex), or None."""
    offsets, sizes = index.offsets, index.sizes
    if len(offsets) == 0:
        return None
    checks = (
        (sizes < 0, "a negative size"),
        (offsets < _BLOCK, "an offset before the first data block"),
        (offsets % _BLOCK != 0, "an offset off a 512-byte block"),
        (offsets > index.size - sizes, f"data past the shard's end ({index.size} bytes)"),
    )
    for bad, what in checks:
        if bad.any():
            m = int(np.argmax(bad))
            return f"member {m} has {what}: offset {int(offsets[m])}, size {int(sizes[m])}"
    blocks = -(-sizes[:-1] // _BLOCK) * _BLOCK
    overlap = offsets[1:] < offsets[:-1] + blocks + _BLOCK
    if overlap.any():
        m = int(np.argmax(overlap)) + 1
        return f"member {m} (offset {int(offsets[m])}) overlaps or precedes member {m - 1}"
    return None


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
