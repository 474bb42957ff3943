"""An optional local disk cache of remote bytes: bounded, shared, and only ever tidying its own.

With ``cache=Cache(directory, max_bytes=...)`` a remote source reads whole blocks of
``block_bytes`` (aligned in the object) and keeps them as files under
``directory/seekdata-cache/``; a later read of the same bytes, by any process on the machine
(DataLoader workers, ranks, the next epoch, the next job), comes from disk.

- **Bounded.** Before a block is written, the oldest blocks (least recently read) are deleted
  until it fits, all under one lock file shared by the processes, so the blocks on disk never
  add up to more than ``max_bytes``.
- **Never deletes what it did not write.** Every block it writes is recorded in its manifest;
  only recorded names are ever deleted. Other files in the directory, even in its subfolder,
  are left alone (and not counted).
- **Never serves stale bytes.** A block's name is a digest of the object's URL, its ``ETag``
  (or size) and the block's number: a changed object has new names, and its old blocks age
  out.
- **Fetched once per machine.** A process about to fetch missing blocks first claims them (a
  ``.claim`` file made with ``O_EXCL``, holding its pid); a process that finds a block claimed
  waits for it to land instead of fetching it too. So DataLoader workers reading the same
  shards in a shard-local order (each streams every shard it reads from) split the download
  instead of each making it. A claim whose process is gone, or that outlives
  :data:`CLAIM_S`, is taken over; a claim is removed when its blocks land or its fetch fails.

The cost: the first read of a block reads all of it (a 4 KiB sample costs a block), so a cache
pays off when data is read again (epochs, jobs), not on the first pass.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from typing import Any

_SUBDIR = "seekdata-cache"
_MANIFEST = "manifest"
_LOCK = "lock"
_TOTAL = "total"
#: Default block size.
BLOCK_BYTES = 4 << 20
#: A claim older than this is taken over even if its process seems to live: a pid seen from
#: another pid namespace (a container sharing the directory) may name some other process, and
#: a fetch this slow is better made twice (the same bytes) than waited for. One request's
#: timeout (stores.py).
CLAIM_S = 120.0
#: How often a process waiting for another's block looks again.
_POLL_S = 0.005


class Cache:
    """A disk cache of remote bytes under ``directory``, at most ``max_bytes`` of blocks.

    Args:
        directory: where the cache lives (its files go to ``directory/seekdata-cache``); may be
            shared by the processes of a machine and by several datasets.
        max_bytes: the most bytes of blocks it holds at any time.
        block_bytes: the unit read and kept (default 4 MiB).
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, max_bytes: int, block_bytes: int = BLOCK_BYTES
    ) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"Cache: directory must be a path; got {type(directory).__name__}")
        for name, value in (("max_bytes", max_bytes), ("block_bytes", block_bytes)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"Cache: {name} must be an int; got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"Cache: {name} must be >= 1 byte; got {value}")
        try:
            import fcntl  # noqa: F401 - the lock between processes
        except ImportError as exc:  # pragma: no cover - Windows
            raise ValueError("Cache: needs POSIX file locks (fcntl); run without cache=") from exc
        self.directory = os.path.abspath(os.fspath(directory))
        self.max_bytes = max_bytes
        self.block_bytes = block_bytes
        self.root = os.path.join(self.directory, _SUBDIR)

    def __repr__(self) -> str:
        return (
            f"Cache({self.directory!r}, max_bytes={self.max_bytes}, block_bytes={self.block_bytes})"
        )

    # -- reading -------------------------------------------------------------------------

    def read(self, file: Any, start: int, stop: int, *, wait: bool = True) -> bytes | None:
        """Bytes ``[start, stop)`` of ``file`` (a RemoteFile): blocks from disk, the missing
        ones fetched (a run of adjacent missing blocks this process could claim in one
        request) and kept; blocks another process has claimed are waited for — or, with
        ``wait=False`` (a read-ahead, which has other blocks to fetch meanwhile), None."""
        bsize = self.block_bytes
        first, last = start // bsize, (stop - 1) // bsize
        blocks: dict[int, bytes] = {}
        while len(blocks) < last - first + 1:
            for b in range(first, last + 1):
                if b not in blocks:
                    data = self._load(self._name(file, b))
                    if data is not None:
                        blocks[b] = data
            mine = [b for b in range(first, last + 1) if b not in blocks and self._claim(file, b)]
            try:
                for run in _runs(mine):
                    self._fetch_run(file, run, blocks)
            finally:
                for b in mine:
                    self._unclaim(file, b)
            missing = [b for b in range(first, last + 1) if b not in blocks]
            if missing and not wait:
                return None
            if missing:  # claimed by others: wait for one to land (or its claim to go)
                self._wait(file, missing[0])
        joined = b"".join(blocks[k] for k in range(first, last + 1))
        return joined[start - first * bsize : stop - first * bsize]

    def _fetch_run(self, file: Any, run: list[int], blocks: dict[int, bytes]) -> None:
        bsize = self.block_bytes
        data = bytes(file.get(run[0] * bsize, min(file.size, (run[-1] + 1) * bsize)))
        for k in run:
            block = data[(k - run[0]) * bsize : (k - run[0] + 1) * bsize]
            blocks[k] = block
            self._store(self._name(file, k), block)

    # -- claims: one process of the machine fetches a block, the others wait for it ---------

    def _claim(self, file: Any, block: int) -> bool:
        """Whether this process may fetch ``block`` (it made the claim, or took over one whose
        process is gone); False while another process holds it."""
        path = self._path(self._name(file, block) + ".claim")
        os.makedirs(self.root, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale(path):
                    return False
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)  # its process is gone: take it over
                continue
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(str(os.getpid()))
            if os.path.exists(self._path(self._name(file, block))):
                self._unclaim(file, block)  # landed between the look and the claim
                return False
            return True
        return False

    def _unclaim(self, file: Any, block: int) -> None:
        path = self._path(self._name(file, block) + ".claim")
        with contextlib.suppress(OSError), open(path, encoding="ascii") as f:
            if f.read().strip() != str(os.getpid()):
                return  # taken over: not ours to remove
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

    @staticmethod
    def _stale(path: str) -> bool:
        """Whether the claim at ``path`` was left by a process that is gone (or is too old)."""
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
            age = time.time() - os.stat(path).st_mtime
        except FileNotFoundError:
            return True
        if not text.isdigit():
            return age > 1.0  # being written, or not ours: give its writer a moment
        if age > CLAIM_S:
            return True
        try:
            os.kill(int(text), 0)
        except ProcessLookupError:
            return True
        except OSError:  # it exists, another user's
            return False
        return False

    def _wait(self, file: Any, block: int) -> None:
        """Until ``block`` is on disk or its claim is gone (landed, failed, or stale)."""
        name = self._name(file, block)
        claim = self._path(name + ".claim")
        while not os.path.exists(self._path(name)):
            if not os.path.exists(claim) or self._stale(claim):
                return
            time.sleep(_POLL_S)

    def _name(self, file: Any, block: int) -> str:
        stamp = file.etag or f"size={file.size}"
        key = f"{file.url}\0{stamp}\0{self.block_bytes}\0{block}".encode()
        return hashlib.sha256(key).hexdigest()[:40] + ".blk"

    def _load(self, name: str) -> bytes | None:
        path = self._path(name)
        try:
            with open(path, "rb") as f:
                data = f.read()
            os.utime(path)  # least recently *read* goes first
        except OSError:
            return None
        return data

    # -- writing, within the bound ---------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        os.makedirs(self.root, exist_ok=True)
        with open(self._path(_LOCK), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _entries(self) -> dict[str, int]:
        """The blocks this cache wrote and has not deleted, by name, with their sizes."""
        entries: dict[str, int] = {}
        with contextlib.suppress(OSError), open(self._path(_MANIFEST), encoding="ascii") as f:
            for line in f:
                name, _, size = line.strip().partition(" ")
                if name.endswith(".blk") and size.isdigit():
                    entries[name] = int(size)
        return entries

    def _total(self) -> int:
        try:
            with open(self._path(_TOTAL), encoding="ascii") as f:
                return int(f.read())
        except (OSError, ValueError):
            return sum(self._entries().values())

    def _path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def _store(self, name: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        with self._locked():
            path = self._path(name)
            if os.path.exists(path):
                return  # another process kept it meanwhile
            total = self._total()
            if total + len(data) > self.max_bytes:
                total = self._evict(self.max_bytes - len(data))
            _write(path, data)
            with open(self._path(_MANIFEST), "a", encoding="ascii") as f:
                f.write(f"{name} {len(data)}\n")
            _write(self._path(_TOTAL), str(total + len(data)).encode())

    def _evict(self, room: int) -> int:
        """Delete recorded blocks, least recently read first, until they take ``room`` bytes
        at most (down to 90 % of the bound, so eviction is not paid per block); the total."""
        entries = self._entries()
        target = min(room, int(self.max_bytes * 0.9))
        by_age = sorted(entries, key=lambda n: _mtime(self._path(n)))
        total = sum(entries.values())
        for name in by_age:
            if total <= target:
                break
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path(name))
            total -= entries.pop(name)
        _write(self._path(_MANIFEST), "".join(f"{n} {s}\n" for n, s in entries.items()).encode())
        return total

    def nbytes(self) -> int:
        """Bytes of blocks this cache holds now."""
        with self._locked():
            return self._total()


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _runs(blocks: list[int]) -> list[list[int]]:
    """``blocks`` (sorted) as runs of consecutive numbers: each run is one request."""
    runs: list[list[int]] = []
    for b in blocks:
        if runs and runs[-1][-1] == b - 1:
            runs[-1].append(b)
        else:
            runs.append([b])
    return runs
