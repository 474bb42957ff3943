"""The checkpoint file itself: its checksum footer, the atomic write and its temporary files.

:mod:`seekdata.checkpoint` documents the format and the rules; this module implements them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from seekdata.checkpoint import pickles as _pickles

_EOCD = b"PK\x05\x06"  # zip end-of-central-directory signature
_EOCD_LEN = 22  # its length with an empty comment; the last 2 bytes are the comment length
_FOOTER = re.compile(rb"\nseekdata-checkpoint/1 sha256=([0-9a-f]{64}) size=([0-9]{20})\n\Z")
_FOOTER_LEN = len(b"\nseekdata-checkpoint/1 sha256= size=\n") + 64 + 20
_CHUNK = 1 << 22
_TEMP = re.compile(r"\.(.+)\.([A-Za-z0-9-]+)\.([0-9]+)\.[0-9a-f]{8}\.tmp\Z")
_STALE_AFTER = 600.0  # seconds without a write before a dead writer's temp may be removed
_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


class CheckpointCorruptError(ValueError):
    """A checkpoint file is truncated, extended or corrupt, or not a seekdata checkpoint at all
    (a plain ``torch.save`` file, a pickle); ``path`` names it."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


CheckpointCorruptError.__module__ = "seekdata.checkpoint"  # where users import it from


class _HashingWriter:
    """The file object ``torch.save`` writes to: hashes and writes everything but the last
    22 bytes, which ``finish`` patches (zip comment length) before appending the footer."""

    def __init__(self, f: Any) -> None:
        self._f, self._hash, self._tail, self._size = f, hashlib.sha256(), b"", 0
        self.error: OSError | None = None  # torch turns it into a RuntimeError; save re-raises

    def _emit(self, data: bytes | memoryview) -> None:
        self._hash.update(data)
        try:
            self._f.write(data)
        except OSError as e:
            self.error = e
            raise
        self._size += len(data)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if len(view) >= _EOCD_LEN:
            self._emit(self._tail)
            self._emit(view[:-_EOCD_LEN])
            self._tail = bytes(view[-_EOCD_LEN:])
        else:
            joined = self._tail + bytes(view)
            self._emit(joined[:-_EOCD_LEN])
            self._tail = joined[-_EOCD_LEN:]
        return len(view)

    def flush(self) -> None:
        self._f.flush()

    def finish(self) -> None:
        tail = self._tail
        if len(tail) != _EOCD_LEN or not tail.startswith(_EOCD) or tail[-2:] != b"\0\0":
            raise RuntimeError(
                "seekdata.checkpoint.save: torch.save must end its archive with a zip "
                "end-of-central-directory record and no comment; this torch version did not; "
                "save with torch.save and load with torch.load instead, and report it"
            )
        footer_len = _FOOTER_LEN.to_bytes(2, "little")
        self._emit(tail[:-2] + footer_len)
        digest = self._hash.hexdigest().encode()
        self._f.write(b"\nseekdata-checkpoint/1 sha256=%s size=%020d\n" % (digest, self._size))


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds (Windows)
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32] or "host"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; a pid out of range
        return True
    return True


def remove_stale_temps(directory: Path, ours: Callable[[str], bool]) -> None:
    """Remove orphaned temporary files of :func:`save` in ``directory`` whose target name
    ``ours`` accepts (see the module's docstring for when a temp is provably orphaned)."""
    host, now = _host(), time.time()
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            m = _TEMP.match(entry.name)
            if m is None or m.group(2) != host or not ours(m.group(1)):
                continue
            pid = int(m.group(3))
            with contextlib.suppress(OSError):  # best effort: never fail a save over it
                st = entry.stat(follow_symlinks=False)
                if (
                    stat.S_ISREG(st.st_mode)
                    and now - st.st_mtime > _STALE_AFTER
                    and pid != os.getpid()
                    and not _running(pid)
                ):
                    os.unlink(entry.path)


def write_atomic(obj: Any, path: Path) -> Path:
    token = f"{_host()}.{os.getpid()}.{secrets.token_hex(4)}"
    tmp = path.with_name(f".{path.name}.{token}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
    writer = None
    try:
        with os.fdopen(fd, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(obj, writer)  # type: ignore[arg-type]  # a write/flush file object
            writer.finish()
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        full = writer.error if writer is not None and writer.error is not None else e
        if isinstance(full, OSError) and full.errno in _FULL:
            raise OSError(
                full.errno,
                f"save: writing {path} must have room on its file system; "
                f"{full.strerror or os.strerror(full.errno)}; the old file is unchanged; free "
                f"space, raise the quota or the file-size limit, or save elsewhere",
                str(path),
            ) from full
        raise
    _fsync_dir(path.parent)
    return path


def verify_file(path: Path, where: str) -> None:
    with open(path, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        if total >= _FOOTER_LEN:
            f.seek(total - _FOOTER_LEN)
            footer = f.read(_FOOTER_LEN)
        else:
            footer = b""
        match = _FOOTER.match(footer)
        if match is None:
            plain = total >= _EOCD_LEN and _tail_is_plain_zip(f, total)
            raise CheckpointCorruptError(
                path,
                f"{where}: {path} must end with a seekdata checksum footer; it has none "
                + (_no_footer(path, total) if not plain else _PLAIN_TORCH),
            )
        expected, size = match.group(1).decode(), int(match.group(2))
        if size != total - _FOOTER_LEN:
            raise CheckpointCorruptError(
                path,
                f"{where}: {path} must hold {size + _FOOTER_LEN} bytes as its footer records; it "
                f"holds {total} (truncated or extended); load an earlier checkpoint",
            )
        f.seek(0)
        digest, buf, left = hashlib.sha256(), bytearray(_CHUNK), size
        view = memoryview(buf)
        while left:
            n = f.readinto(view[: min(left, _CHUNK)])
            if not n:
                break
            digest.update(view[:n])
            left -= n
    if left or digest.hexdigest() != expected:
        raise CheckpointCorruptError(
            path,
            f"{where}: {path} must match the sha256 in its footer ({expected[:16]}…); its bytes "
            f"hash to {digest.hexdigest()[:16]}… (corrupt on disk or in transfer); load an "
            f"earlier checkpoint",
        )


_PLAIN_TORCH = (
    "(it looks like a plain torch.save file); load it with torch.load(path, weights_only=True), "
    "or write it with seekdata.checkpoint.save"
)


def _no_footer(path: Path, total: int) -> str:
    """What a file without a footer and without a zip's end is, and what to do with it."""
    if _pickles.is_legacy_torch(str(path)):
        return (
            "(it is a torch.save file in the legacy, non-zip format, which "
            "seekdata.checkpoint.save never writes); load it with "
            "torch.load(path, weights_only=True), or write it with seekdata.checkpoint.save"
        )
    names = _pickles.plain_pickle_globals(str(path))
    if names is not None:
        imports = f", importing {', '.join(names[:20])}" if names else ""
        return (
            f"(it is a plain pickle, pickle.dump{imports}, not a checkpoint; refused unread: "
            "unpickling it could run code from the file); if you trust the file, load it with "
            "pickle.load, and write checkpoints with seekdata.checkpoint.save"
        )
    return f"(the file is truncated or corrupt, {total} bytes); load an earlier checkpoint"


def _tail_is_plain_zip(f: Any, total: int) -> bool:
    f.seek(total - _EOCD_LEN)
    tail = f.read(_EOCD_LEN)
    return bool(tail.startswith(_EOCD) and tail[-2:] == b"\0\0")


def is_corrupt(path: Path, where: str) -> bool:
    try:
        verify_file(path, where)
    except CheckpointCorruptError:
        return True
    except FileNotFoundError:
        return False
    return False
