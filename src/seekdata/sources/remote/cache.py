"""An optional local disk cache of remote bytes: bounded, shared, checked, and kept in its folder.

With ``cache=Cache(directory, max_bytes=...)`` a remote source reads whole blocks of
``block_bytes`` (aligned in the object) and keeps them as files under
``directory/seekdata-cache/``; a later read of the same bytes, by any process on the machine
(DataLoader workers, ranks, the next epoch, the next job), comes from disk.

- **Bounded.** Before a block is written, the oldest blocks (least recently read) are deleted
  until it fits, all under one lock file shared by the processes, so the block files on disk
  never add up to more than the bound. A folder has one bound: the smallest ``max_bytes`` any
  ``Cache`` gave it (recorded in its ``bound`` file), so two jobs sharing a folder with
  different bounds both keep within the smaller; the one given a larger bound warns once.
- **Never deletes what it did not write.** Every block it writes is recorded in its manifest;
  only recorded names of its own form (40 hex digits and ``.blk``, no folder) are ever
  deleted. Other files in the directory, even in its subfolder, are left alone (and not
  counted).
- **Stays in its folder.** ``seekdata-cache`` must be a real directory (not a link) owned by
  this user and not writable by every user; every file in it is opened through the folder's
  descriptor with ``O_NOFOLLOW``, and created with ``O_EXCL`` before it is renamed into place,
  so a planted link is never followed out (a link in place of the cache's own ``manifest``,
  ``lock``, ``total`` or ``bound`` is refused with a ValueError). A folder it cannot write is
  refused when the ``Cache`` is made.
- **Never serves stale or damaged bytes.** A block's name is a digest of the object's URL,
  its ``ETag`` (or size) and the block's number: a changed object has new names, and its old
  blocks age out. A block file starts with a 16-byte header, ``SDB2``, the block's length and
  its CRC-32; a file of another length than the block it names, or whose bytes do not match
  their checksum, is never served: it is dropped and fetched again (one warning per process).
- **A full disk costs the cache, not the read.** When a block cannot be kept (no space, a
  quota, a file size limit), the fetched bytes are served all the same, nothing half-written
  is left behind, and the process warns once.
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
import errno
import hashlib
import os
import re
import stat
import struct
import threading
import time
import warnings
import zlib
from collections.abc import Iterator
from typing import Any

from seekdata._core.checks import check_int

_SUBDIR = "seekdata-cache"
_MANIFEST = "manifest"
_LOCK = "lock"
_TOTAL = "total"
_BOUND = "bound"
#: the files of the cache's own besides blocks and claims: regular files, never links
_OWN_FILES = (_LOCK, _MANIFEST, _TOTAL, _BOUND)
#: the only names the cache deletes from its manifest's say-so
_BLOCK_NAME = re.compile(r"[0-9a-f]{40}\.blk\Z")
#: in every block's name, so that blocks of the unchecked first format are never read (they
#: stay in the manifest and age out)
_FORMAT = "seekdata-cache/2"
#: a block file: this header (magic, the block's length, its CRC-32), then the block
_HEADER = struct.Struct("<4sQI")
_MAGIC = b"SDB2"
#: Bytes a block file holds besides its block (counted in the bound).
HEADER_BYTES = _HEADER.size
#: what a write that found no room raises: the bytes are served, not kept
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW = os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW
_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW  # a planted FIFO never blocks
#: what reading a block gives when its file is damaged and not the cache's to drop
_LEFT = object()
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
        directory: where the cache lives (its files go to ``directory/seekdata-cache``, made
            if missing, readable and writable by this user only); may be shared by the
            processes of a machine and by several datasets.
        max_bytes: the most bytes of block files it holds at any time (each file is its block
            and a 16-byte header). Where several ``Cache`` objects share a folder, the
            smallest bound any of them gave it applies to all.
        block_bytes: the unit read and kept (default 4 MiB).

    Raises:
        ValueError: the folder cannot be the cache's: it is not a directory, or a link, or
            not this process's to write (read-only, another user's, writable by every user).
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, max_bytes: int, block_bytes: int = BLOCK_BYTES
    ) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"Cache: directory must be a path; got {type(directory).__name__}")
        for name, value in (("max_bytes", max_bytes), ("block_bytes", block_bytes)):
            fix = f"pass a number of bytes, e.g. {name}={10**9 if name == 'max_bytes' else 1 << 22}"
            check_int(value, name, "Cache", 1, what="a positive int (bytes)", fix=fix)
        max_bytes, block_bytes = int(max_bytes), int(block_bytes)
        try:
            import fcntl  # noqa: F401 - the lock between processes
        except ImportError as exc:  # pragma: no cover - Windows
            raise ValueError("Cache: needs POSIX file locks (fcntl); run without cache=") from exc
        self.directory = os.path.abspath(os.fspath(directory))
        self.max_bytes = max_bytes
        self.block_bytes = block_bytes
        self.root = os.path.join(self.directory, _SUBDIR)
        self._mutex = threading.Lock()
        self._warned: set[str] = set()
        self._fd: int | None = None
        self._fd = self._open_root(probe=True)
        self._agree_bound()

    def __repr__(self) -> str:
        return (
            f"Cache({self.directory!r}, max_bytes={self.max_bytes}, block_bytes={self.block_bytes})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fd"] = None  # a descriptor is this process's: the receiver opens its own
        del state["_mutex"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._mutex = threading.Lock()

    def __del__(self, _close: Any = os.close) -> None:  # bound now: at exit, globals may be gone
        fd = self.__dict__.get("_fd")
        if fd is not None:
            try:  # noqa: SIM105 - not contextlib.suppress: at exit, it may be gone too
                _close(fd)
            except OSError:
                pass

    # -- the folder: a real directory of this user's, every file opened through it ----------

    def _open_root(self, *, probe: bool) -> int:
        """A descriptor of the root (made if missing), after checking it is the cache's."""
        where = f"Cache: {self.root} must be a directory of this user's that it can write"
        try:
            os.makedirs(self.directory, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.root, 0o700)
            fd = os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW)
        except OSError as exc:
            if os.path.islink(self.root):  # O_DIRECTORY | O_NOFOLLOW: ENOTDIR or ELOOP
                why = "it is a symbolic link (the cache never writes or deletes through one)"
            else:
                why = f"{exc.strerror} ({exc.filename})"
            raise ValueError(
                f"{where}; {why}; pass a directory of your own, or run without cache="
            ) from exc
        try:
            problem = self._foreign(fd)
            if problem is None and probe:
                problem = self._unwritable(fd)
        except BaseException:
            os.close(fd)
            raise
        if problem is not None:
            os.close(fd)
            raise ValueError(f"{where}; {problem}")
        return fd

    def _foreign(self, fd: int) -> str | None:
        """Why the root at ``fd`` is not safe to use, or None."""
        st = os.fstat(fd)
        hint = "pass a folder of your own (e.g. tempfile.mkdtemp(dir='/dev/shm'))"
        if st.st_uid != os.geteuid():
            return (
                f"it belongs to user id {st.st_uid}, not to this process's ({os.geteuid()}), "
                f"and its owner could plant blocks that would be served as data; {hint}"
            )
        if st.st_mode & stat.S_IWOTH:
            return (
                f"every user may write in it (mode {stat.filemode(st.st_mode)}) and could "
                f"plant blocks or links; {hint}, or chmod o-w {self.root}"
            )
        for name in _OWN_FILES:
            try:
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(mode):
                return self._planted(name, mode)
        return None

    def _unwritable(self, fd: int) -> str | None:
        """Why this process cannot create files in the root at ``fd``, or None."""
        probe = f".probe-{os.getpid()}"
        for _ in range(2):
            try:
                os.close(os.open(probe, _NEW, 0o600, dir_fd=fd))
            except FileExistsError:
                os.unlink(probe, dir_fd=fd)  # a leftover of a process of this pid
                continue
            except OSError as exc:
                if exc.errno in _FULL:
                    return None  # writable, full: reads are served uncached (see _store)
                return (
                    f"it cannot create a file there ({exc.strerror}); pass a directory this "
                    f"process can write (not a read-only one), or run without cache="
                )
            os.unlink(probe, dir_fd=fd)
            return None
        return None

    def _planted(self, name: str, mode: int | None = None) -> str:
        what = "a symbolic link" if mode is None or stat.S_ISLNK(mode) else "not a regular file"
        return (
            f"{os.path.join(self.root, name)} is {what}, not the file the cache writes there; "
            f"the cache never writes or reads through one: remove it"
        )

    def _dir(self) -> int:
        """This process's descriptor of the root (opened again after unpickling)."""
        fd = self._fd
        if fd is None:
            with self._mutex:
                if self._fd is None:
                    self._fd = self._open_root(probe=False)
                fd = self._fd
        return fd

    def _open_own(self, name: str, flags: int) -> int:
        """The cache's own file ``name`` opened with ``flags``, never through a link."""
        try:
            fd = os.open(name, flags | _NOFOLLOW, 0o644, dir_fd=self._dir())
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ValueError(f"Cache: {self._planted(name)}") from exc
            raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise ValueError(f"Cache: {self._planted(name, mode)}")
        return fd

    def _read_own(self, name: str) -> str | None:
        try:
            fd = self._open_own(name, _READ)
        except FileNotFoundError:
            return None
        with open(fd, "rb") as f:
            return f.read().decode("ascii", "replace")

    def _exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self._dir(), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def _warn_once(self, key: str, message: str) -> None:
        with self._mutex:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)

    def _full(self, exc: OSError) -> None:
        self._warn_once(
            "full",
            f"Cache: could not keep fetched bytes in {self.root} ({exc.strerror}); they are "
            "served, not kept, and later reads fetch what the cache could not keep (one "
            "warning per process); free space on its disk, or give it a smaller max_bytes",
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
        stuck: set[int] = set()  # damaged on disk and not the cache's to drop: fetched each time
        while len(blocks) < last - first + 1:
            for b in range(first, last + 1):
                if b not in blocks:
                    data = self._load(file, b)
                    if data is _LEFT:
                        stuck.add(b)
                    elif data is not None:
                        blocks[b] = data
            mine = [
                b
                for b in range(first, last + 1)
                if b not in blocks and (b in stuck or self._claim(file, b))
            ]
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

    def _load(self, file: Any, block: int) -> Any:
        """Block ``block`` of ``file`` from disk (bytes), or None: missing, or damaged and
        dropped; or :data:`_LEFT`: damaged, and not the cache's to drop."""
        name = self._name(file, block)
        want = min(file.size, (block + 1) * self.block_bytes) - block * self.block_bytes
        try:
            fd = os.open(name, _READ, dir_fd=self._dir())
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return self._damaged(name, None, "it is a symbolic link")
            return None
        head = data = b""
        try:
            with open(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    problem: str | None = "it is not a regular file"
                elif st.st_size != HEADER_BYTES + want:
                    problem = (
                        f"{st.st_size} bytes where this block's file has {HEADER_BYTES + want}"
                    )
                else:
                    head, data = f.read(HEADER_BYTES), f.read(want)  # (sized: read() is slow)
                    problem = _damage(head, data, want)
                    if problem is None:
                        with contextlib.suppress(OSError):
                            os.utime(f.fileno())  # least recently *read* goes first
        except OSError:
            return None
        if problem is not None:
            return self._damaged(name, st, problem)
        return data

    def _damaged(self, name: str, st: os.stat_result | None, problem: str) -> object:
        """Warn (once per process) and drop the damaged block ``name`` if the cache wrote it:
        None, or :data:`_LEFT` when it is not the cache's (left where it is)."""
        self._warn_once(
            "damaged",
            f"Cache: block {os.path.join(self.root, name)} is damaged ({problem}); it is not "
            "served but dropped and fetched again (so are any others this process finds, "
            "without another warning). A disk fault, or something else writing in the "
            "cache's folder, does this",
        )
        try:
            with self._locked():
                entries = self._entries()
                if name not in entries:
                    return _LEFT  # not written by this cache: left alone
                try:
                    now = os.stat(name, dir_fd=self._dir(), follow_symlinks=False)
                except FileNotFoundError:
                    now = None
                if now is not None:
                    same = (
                        stat.S_ISLNK(now.st_mode)
                        if st is None
                        else (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev)
                    )
                    if not same:
                        return None  # replaced meanwhile (by a sound block, or a damaged one)
                    os.unlink(name, dir_fd=self._dir())
                del entries[name]
                self._rewrite(entries)
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
            self._full(exc)
            return _LEFT  # perhaps not dropped: fetched, unclaimed
        return None

    # -- claims: one process of the machine fetches a block, the others wait for it ---------

    def _claim(self, file: Any, block: int) -> bool:
        """Whether this process may fetch ``block`` (it made the claim, or took over one whose
        process is gone, or the disk has no room for a claim); False while another process
        holds it."""
        name = self._name(file, block)
        claim = name + ".claim"
        d = self._dir()
        for _ in range(2):
            try:
                fd = os.open(claim, _NEW, 0o644, dir_fd=d)
            except FileExistsError:
                if not self._stale(claim):
                    return False
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(claim, dir_fd=d)  # its process is gone: take it over
                continue
            except OSError as exc:
                if exc.errno not in _FULL:
                    raise
                self._full(exc)
                return True  # fetched unclaimed: others may fetch it too
            try:
                _write_all(fd, str(os.getpid()).encode())
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(claim, dir_fd=d)
                if exc.errno not in _FULL:
                    raise
                self._full(exc)
                return True
            finally:
                os.close(fd)
            if self._exists(name):
                self._unclaim(file, block)  # landed between the look and the claim
                return False
            return True
        return False

    def _unclaim(self, file: Any, block: int) -> None:
        claim = self._name(file, block) + ".claim"
        with contextlib.suppress(OSError):
            fd = os.open(claim, _READ, dir_fd=self._dir())
            with open(fd, "rb") as f:
                if f.read(32).strip() != str(os.getpid()).encode():
                    return  # taken over: not ours to remove
        with contextlib.suppress(FileNotFoundError):
            os.unlink(claim, dir_fd=self._dir())

    def _stale(self, claim: str) -> bool:
        """Whether the claim ``claim`` was left by a process that is gone (or is too old)."""
        try:
            fd = os.open(claim, _READ, dir_fd=self._dir())
        except OSError:
            return True  # gone, or a link: no claim of a process's
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            text = f.read(32).decode("ascii", "replace").strip()
        if not stat.S_ISREG(st.st_mode):
            return True
        age = time.time() - st.st_mtime
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
        claim = name + ".claim"
        while not self._exists(name):
            if not self._exists(claim) or self._stale(claim):
                return
            time.sleep(_POLL_S)

    def _name(self, file: Any, block: int) -> str:
        stamp = file.etag or f"size={file.size}"
        key = f"{_FORMAT}\0{file.url}\0{stamp}\0{self.block_bytes}\0{block}".encode()
        return hashlib.sha256(key).hexdigest()[:40] + ".blk"

    # -- writing, within the bound ---------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        fd = self._open_own(_LOCK, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # and with it the lock

    def _entries(self) -> dict[str, int]:
        """The blocks this cache wrote and has not deleted, by name, with their sizes: only
        names of its own form (a name with a folder in it is never the cache's)."""
        entries: dict[str, int] = {}
        for line in (self._read_own(_MANIFEST) or "").splitlines():
            name, _, size = line.strip().partition(" ")
            if _BLOCK_NAME.match(name) and size.isdigit():
                entries[name] = int(size)
        return entries

    def _total(self) -> int:
        try:
            return int(self._read_own(_TOTAL) or "")
        except ValueError:
            return sum(self._entries().values())

    def _limit(self) -> int:
        """The folder's bound: the smallest any Cache gave it, or this one's."""
        try:
            recorded = int(self._read_own(_BOUND) or "")
        except ValueError:
            return self.max_bytes
        if recorded < self.max_bytes:
            self._warn_bound(recorded)
        return min(recorded, self.max_bytes)

    def _agree_bound(self) -> None:
        """Record this cache's bound in the folder when it is the smallest given to it."""
        try:
            with self._locked():
                try:
                    recorded = int(self._read_own(_BOUND) or "")
                except ValueError:
                    recorded = None
                if recorded is None or recorded > self.max_bytes:
                    self._write(_BOUND, str(self.max_bytes).encode())
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
            self._full(exc)
            return
        if recorded is not None and recorded < self.max_bytes:
            self._warn_bound(recorded)

    def _warn_bound(self, recorded: int) -> None:
        self._warn_once(
            "bound",
            f"Cache: {self.root} is bounded at {recorded} bytes by another Cache sharing it "
            f"(the smallest max_bytes given to a folder holds for every job using it); this "
            f"one keeps within that, not its max_bytes={self.max_bytes}. To raise the bound, "
            f"delete {os.path.join(self.root, _BOUND)} while no job uses the folder, or give "
            "this job a folder of its own",
        )

    def _store(self, name: str, data: bytes) -> None:
        """Keep ``data`` as block ``name``, within the bound; on a full disk, not at all."""
        size = HEADER_BYTES + len(data)
        if size > self.max_bytes:
            return
        try:
            with self._locked():
                if self._exists(name):
                    return  # another process kept it meanwhile
                limit = self._limit()
                if size > limit:
                    return
                total = self._total()
                if total + size > limit:
                    total = self._evict(limit, limit - size)
                self._write(name, _HEADER.pack(_MAGIC, len(data), zlib.crc32(data)), data)
                try:
                    self._append(f"{name} {size}\n".encode())
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=self._dir())  # unrecorded: never kept
                    raise
                self._write_total(total + size)
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
            self._full(exc)

    def _evict(self, limit: int, room: int) -> int:
        """Delete recorded blocks, least recently read first, until they take ``room`` bytes
        at most (down to 90 % of ``limit``, so eviction is not paid per block); the total."""
        entries = self._entries()
        target = min(room, int(limit * 0.9))
        by_age = sorted(entries, key=self._mtime)
        total = sum(entries.values())
        for name in by_age:
            if total <= target:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self._dir())
            total -= entries.pop(name)
        self._rewrite(entries)
        return total

    def _rewrite(self, entries: dict[str, int]) -> None:
        """The manifest and total as ``entries`` (lock held)."""
        try:
            self._write(_MANIFEST, "".join(f"{n} {s}\n" for n, s in entries.items()).encode())
        except OSError:
            with contextlib.suppress(OSError):  # the total is counted from the manifest again
                os.unlink(_TOTAL, dir_fd=self._dir())
            raise
        self._write_total(sum(entries.values()))

    def _write_total(self, total: int) -> None:
        try:
            self._write(_TOTAL, str(total).encode())
        except OSError:
            with contextlib.suppress(OSError):  # counted from the manifest again
                os.unlink(_TOTAL, dir_fd=self._dir())
            raise

    def _append(self, line: bytes) -> None:
        """``line`` at the manifest's end, whole or not at all (lock held)."""
        fd = self._open_own(_MANIFEST, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            before = os.fstat(fd).st_size
            try:
                _write_all(fd, line)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, before)
                raise
        finally:
            os.close(fd)

    def _write(self, name: str, *parts: bytes) -> None:
        """``parts`` as the file ``name``: written to a new file (``O_EXCL | O_NOFOLLOW``: a
        leftover or a planted link of that name is removed, never written through), then
        renamed over ``name``; nothing is left behind when it fails (lock held)."""
        d = self._dir()
        tmp = f"{name}.tmp-{os.getpid()}"
        try:
            fd = os.open(tmp, _NEW, 0o644, dir_fd=d)
        except FileExistsError:
            os.unlink(tmp, dir_fd=d)
            fd = os.open(tmp, _NEW, 0o644, dir_fd=d)
        try:
            try:
                for part in parts:
                    _write_all(fd, part)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=d)
            raise

    def _mtime(self, name: str) -> float:
        try:
            return os.stat(name, dir_fd=self._dir(), follow_symlinks=False).st_mtime
        except OSError:
            return 0.0

    def nbytes(self) -> int:
        """Bytes of block files this cache holds now (blocks and their headers)."""
        with self._locked():
            return self._total()


def _damage(head: bytes, data: bytes, want: int) -> str | None:
    """What is wrong with a block file of header ``head`` and body ``data`` that should hold
    a block of ``want`` bytes, or None when it holds one, intact."""
    if len(head) != HEADER_BYTES or len(data) != want:
        return f"{len(head) + len(data)} bytes where this block's file has {HEADER_BYTES + want}"
    magic, length, crc = _HEADER.unpack(head)
    if magic != _MAGIC:
        return f"it starts with {magic!r}, not {_MAGIC!r}"
    if length != want:
        return f"its header gives {length} bytes for a block of {want}"
    if zlib.crc32(data) != crc:
        return "its bytes do not match their CRC-32"
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _runs(blocks: list[int]) -> list[list[int]]:
    """``blocks`` (sorted) as runs of consecutive numbers: each run is one request."""
    runs: list[list[int]] = []
    for b in blocks:
        if runs and runs[-1][-1] == b - 1:
            runs[-1].append(b)
        else:
            runs.append([b])
    return runs
