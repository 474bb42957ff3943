"""Atomic, verified checkpoint files; step rotation; the DDP rank-0 write.

File format
-----------
:func:`save` writes a plain ``torch.save`` zip archive whose zip *comment* is a one-line
footer::

    seekdata-checkpoint/1 sha256=<64 hex digits> size=<20 digits>

``size`` is the number of bytes before the footer and ``sha256`` their hash. A zip comment is
part of the zip format, so ``torch.load(path, weights_only=True)`` reads the file as it
reads any checkpoint; :func:`load` checks the footer first and raises
:class:`CheckpointCorruptError` when the file is truncated, extended or has any byte changed.

Atomicity
---------
The archive is written to a temporary file in the same folder (``.<name>.<pid>.<hex>.tmp``),
fsynced, renamed over ``path`` with ``os.replace`` and the folder is fsynced: a reader sees the
old file or the new one, never half of one, even if the writer is killed. A killed writer can
leave its temporary file behind; it is never mistaken for a checkpoint.

DDP
---
:func:`save_on_rank0` writes on rank 0 while every rank waits; the wait is an ``all_reduce``
of rank 0's success, so when rank 0 fails every rank raises instead of waiting forever.
:func:`load_on_every_rank` maps tensors to the rank's own device. :class:`CheckpointManager`
does both, and keeps the last K step checkpoints of a folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from seekdata import _dist
from seekdata.rng import check_counter

__all__ = [
    "CheckpointCorruptError",
    "CheckpointManager",
    "load",
    "load_on_every_rank",
    "save",
    "save_on_rank0",
    "verify",
]

_EOCD = b"PK\x05\x06"  # zip end-of-central-directory signature
_EOCD_LEN = 22  # its length with an empty comment; the last 2 bytes are the comment length
_FOOTER = re.compile(rb"\nseekdata-checkpoint/1 sha256=([0-9a-f]{64}) size=([0-9]{20})\n\Z")
_FOOTER_LEN = len(b"\nseekdata-checkpoint/1 sha256= size=\n") + 64 + 20
_CHUNK = 1 << 22
_T = TypeVar("_T")


class CheckpointCorruptError(ValueError):
    """A checkpoint file is truncated, extended or corrupt; ``path`` names it."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


def _as_path(path: Any, where: str) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"{where}: path must be a str or os.PathLike; got {type(path).__name__} {path!r}; "
            f"pass a file path such as 'ckpt/last.pt'"
        )
    return Path(path)


class _HashingWriter:
    """The file object ``torch.save`` writes to: hashes and writes everything but the last
    22 bytes, which ``finish`` patches (zip comment length) before appending the footer."""

    def __init__(self, f: Any) -> None:
        self._f, self._hash, self._tail, self._size = f, hashlib.sha256(), b"", 0

    def _emit(self, data: bytes | memoryview) -> None:
        self._hash.update(data)
        self._f.write(data)
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


def save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``obj`` with ``torch.save`` to ``path`` atomically, with a checksum footer.

    Creates missing parent folders. Returns ``path`` as a ``Path``. The file also loads with
    a plain ``torch.load``; :func:`load` verifies it first.
    """
    path = _as_path(path, "save")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
    try:
        with os.fdopen(fd, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(obj, writer)  # type: ignore[arg-type]  # a write/flush file object
            writer.finish()
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def verify(path: str | os.PathLike[str]) -> None:
    """Raise :class:`CheckpointCorruptError` unless ``path``'s footer matches its bytes."""
    _verify(_as_path(path, "verify"), "verify")


def _verify(path: Path, where: str) -> None:
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
                + (
                    "(it looks like a plain torch.save file); load it with "
                    "torch.load(path, weights_only=True), or write it with "
                    "seekdata.checkpoint.save"
                    if plain
                    else f"(the file is truncated or corrupt, {total} bytes); "
                    f"load an earlier checkpoint"
                ),
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


def _tail_is_plain_zip(f: Any, total: int) -> bool:
    f.seek(total - _EOCD_LEN)
    tail = f.read(_EOCD_LEN)
    return bool(tail.startswith(_EOCD) and tail[-2:] == b"\0\0")


def load(
    path: str | os.PathLike[str], map_location: Any = None, *, weights_only: bool = True
) -> Any:
    """Verify ``path`` (see :func:`save`), then ``torch.load`` it.

    Raises :class:`CheckpointCorruptError` (a ``ValueError``) naming the file when it is
    truncated or corrupt, ``FileNotFoundError`` when it is missing.
    """
    path = _as_path(path, "load")
    _verify(path, "load")
    return torch.load(path, map_location=map_location, weights_only=weights_only)


# --- DDP ------------------------------------------------------------------------------------


def _on_rank0(fn: Callable[[], _T], where: str) -> _T | None:
    """Run ``fn`` on rank 0; every rank returns after it finished, or raises if it failed."""
    if not _dist.pg_initialized():
        return fn()
    result, error = None, None
    if _dist.rank_or_zero() == 0:
        try:
            result = fn()
        except Exception as e:  # re-raised below, after the other ranks know
            error = e
    failed = _dist.any_rank(error is not None)
    if error is not None:
        raise error
    if failed:
        raise RuntimeError(
            f"{where}: rank 0 must finish writing before the ranks go on; it failed (its "
            f"traceback has the cause); every rank raises so that none waits for it"
        )
    return result


def save_on_rank0(obj: Any, path: str | os.PathLike[str]) -> Path:
    """:func:`save` on rank 0; every rank returns once the file is in place (a barrier).

    Call it on every rank. Without a process group the calling process writes.
    """
    path = _as_path(path, "save_on_rank0")
    _on_rank0(lambda: save(obj, path), "save_on_rank0")
    return path


def _local_device() -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    current = torch.cuda.current_device()
    if current != 0:  # set explicitly with torch.cuda.set_device
        return torch.device("cuda", current)
    local = _dist.local_rank()
    if local is not None and 0 <= local < torch.cuda.device_count():
        return torch.device("cuda", local)
    return torch.device("cuda", current)


def load_on_every_rank(path: str | os.PathLike[str], *, weights_only: bool = True) -> Any:
    """:func:`load` with tensors mapped to this rank's device: ``cuda:<local rank>`` (the
    device set with ``torch.cuda.set_device``, else ``LOCAL_RANK``) when CUDA is available,
    else the CPU. Every rank reads the file; it must be on a shared file system."""
    return load(path, map_location=_local_device(), weights_only=weights_only)


# --- rotation ------------------------------------------------------------------------------


class CheckpointManager:
    """Step checkpoints ``<prefix><step:010d><suffix>`` in one folder, the last K kept.

    ``save(step, obj)`` writes on rank 0 (every rank waits) and then deletes all but the
    ``keep_last`` highest steps; ``latest()`` is the path of the highest step, or None.

    >>> manager = CheckpointManager("ckpt", keep_last=3)  # doctest: +SKIP
    >>> manager.save(step, {"model": model.state_dict(), "step": step})  # doctest: +SKIP
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep_last: int | None = None,
        prefix: str = "step_",
        suffix: str = ".pt",
    ) -> None:
        where = "CheckpointManager"
        self.directory = _as_path(directory, where)
        if keep_last is not None and check_counter(keep_last, "keep_last", where) < 1:
            raise ValueError(
                f"{where}: keep_last must be None (keep all) or >= 1; got {keep_last}; "
                f"pass keep_last=1 to keep only the newest checkpoint"
            )
        for name, value in (("prefix", prefix), ("suffix", suffix)):
            if not isinstance(value, str) or "/" in value or os.sep in value:
                raise ValueError(
                    f"{where}: {name} must be a str without path separators; got {value!r}; "
                    f"put folders in directory instead"
                )
        self.keep_last = keep_last
        self.prefix, self.suffix = prefix, suffix
        self._name = re.compile(re.escape(prefix) + r"([0-9]+)" + re.escape(suffix) + r"\Z")

    def __repr__(self) -> str:
        return f"CheckpointManager({str(self.directory)!r}, keep_last={self.keep_last!r})"

    def path(self, step: int) -> Path:
        """The file of ``step``."""
        step = check_counter(step, "step", "CheckpointManager.path")
        return self.directory / f"{self.prefix}{step:010d}{self.suffix}"

    def steps(self) -> list[int]:
        """Steps with a checkpoint in the folder, ascending (temporary files excluded)."""
        if not self.directory.is_dir():
            return []
        found = (self._name.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m is not None)

    def latest(self) -> Path | None:
        """The path of the highest step, or None when the folder has no checkpoint."""
        steps = self.steps()
        return self.path(steps[-1]) if steps else None

    def save(self, step: int, obj: Any) -> Path:
        """Write ``obj`` as ``step`` (rank 0 writes, every rank waits), then rotate."""
        step = check_counter(step, "step", "CheckpointManager.save")
        _on_rank0(lambda: self._save(step, obj), "CheckpointManager.save")
        return self.path(step)

    def _save(self, step: int, obj: Any) -> None:
        steps = self.steps()
        if steps and step < steps[-1]:
            raise ValueError(
                f"CheckpointManager.save: step must be >= the latest step in "
                f"{self.directory} ({steps[-1]}) so that latest() is the newest; got step "
                f"{step}; delete the later checkpoints or use another directory to branch"
            )
        save(obj, self.path(step))
        if self.keep_last is not None:
            for old in self.steps()[: -self.keep_last]:
                self.path(old).unlink(missing_ok=True)

    def load_latest(self, map_location: Any = None, *, weights_only: bool = True) -> Any:
        """:func:`load` the highest step's checkpoint; None when there is none."""
        latest = self.latest()
        if latest is None:
            return None
        return load(latest, map_location, weights_only=weights_only)
