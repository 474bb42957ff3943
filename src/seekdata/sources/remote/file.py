"""One remote object, read by byte range: verified, coalesced, read ahead, kept a while.

- Every GET carries ``If-Match`` with the ``ETag`` the index recorded, and its answer is
  checked (the object's size and ``ETag``, the number of bytes): an object that changed
  under its index is an error, never other bytes (:mod:`seekdata.sources.remote.faults`).
- :func:`prefetch` reads the ranges of one batch: those closer than :data:`GAP` are read as
  one request, and separate requests run concurrently. When an object is being streamed — the
  batch has :data:`STREAM_MIN` or more ranges in it and this process's previous batch read it
  too, as in a shard-local order — its ranges are read as whole aligned :data:`CHUNK` s
  instead, each once while memory keeps it. The first batch after a resume has no previous
  batch: it reads only its own ranges.
- A reader moving forward through an object (a tar scan, samples in shard order) is read
  ahead: each read that starts where the last one ended fetches twice as far as the last,
  from :data:`FIRST_AHEAD` up to :data:`READ_AHEAD` bytes. The first read at a new place —
  the first batch after a resume — fetches only what it asks for.
- What was fetched is kept in memory (:func:`memory`: :data:`MEMORY` bytes per process, for
  all datasets, least recently used dropped first), so read-ahead and coalesced bytes serve
  later reads; with a :class:`~seekdata.sources.remote.Cache`, fetched blocks also go to disk.
"""

from __future__ import annotations

import bisect
import io
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from seekdata.sources.remote import faults as _faults
from seekdata.sources.remote.stores import Stores
from seekdata.sources.remote.urls import Location, locate

T = TypeVar("T")
R = TypeVar("R")

#: Ranges of one batch closer than this are fetched as one request (the gap is read too).
GAP = 64 << 10
#: An object being streamed is fetched in aligned chunks of this many bytes...
CHUNK = 8 << 20
#: ... when a batch has at least this many ranges in it and the previous batch read it too.
STREAM_MIN = 4
#: The first read-ahead of a reader that moves forward...
FIRST_AHEAD = 1 << 20
#: ... doubled at each further step, up to this.
READ_AHEAD = 16 << 20
#: Bytes of fetched ranges one process keeps.
MEMORY = 256 << 20
#: Most requests one process has in flight at once.
THREADS = 16


class Memory:
    """Fetched byte ranges of remote objects in this process, least recently used dropped
    first past ``limit`` bytes; emptied in a forked child."""

    def __init__(self, limit: int = MEMORY) -> None:
        self.limit = limit
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._spans: OrderedDict[tuple[str, int], memoryview] = OrderedDict()
        self._starts: dict[str, list[int]] = {}
        self.nbytes = 0

    def _mine(self) -> None:
        if self._pid != os.getpid():
            self._reset()

    def find(self, url: str, start: int, stop: int) -> memoryview | None:
        """Bytes ``[start, stop)`` of ``url`` (an object's version) if one kept range holds
        them all."""
        self._mine()
        with self._lock:
            starts = self._starts.get(url)
            if not starts:
                return None
            i = bisect.bisect_right(starts, start) - 1
            for at in starts[max(0, i - 3) : i + 1][::-1]:  # the nearest few: spans may overlap
                buf = self._spans[(url, at)]
                if stop <= at + len(buf):
                    self._spans.move_to_end((url, at))
                    return buf[start - at : stop - at]
            return None

    def put(self, url: str, start: int, data: Any) -> None:
        """Keep ``data`` as bytes ``start...`` of ``url``; kept ranges inside it are dropped."""
        self._mine()
        buf = memoryview(data).cast("B")
        if len(buf) > self.limit:
            return
        stop = start + len(buf)
        with self._lock:
            kept = self._spans.get((url, start))
            if kept is not None and len(kept) >= len(buf):
                return  # already kept (another thread fetched it too)
            starts = self._starts.setdefault(url, [])
            lo, hi = bisect.bisect_left(starts, start), bisect.bisect_right(starts, stop)
            for at in [a for a in starts[lo:hi] if a + len(self._spans[(url, a)]) <= stop]:
                self.nbytes -= len(self._spans.pop((url, at)))
                starts.remove(at)
            bisect.insort(starts, start)
            self._spans[(url, start)] = buf
            self.nbytes += len(buf)
            while self.nbytes > self.limit:
                (u, s), dropped = self._spans.popitem(last=False)
                self.nbytes -= len(dropped)
                self._starts[u].remove(s)


_memory = Memory()


def memory() -> Memory:
    """This process's :class:`Memory` (one for all datasets)."""
    return _memory


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """This process's request threads (made again after a fork: threads do not survive it)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(THREADS, thread_name_prefix="seekdata-io"))
        return _pool[1]


def map_objects(fn: Callable[[T], R], items: Sequence[T], names: Sequence[str]) -> list[R]:
    """``[fn(item) for item in items]``, run concurrently (this process's request threads) when
    any of ``names`` is remote: building a dataset over a thousand remote files then waits for
    their indexes about as long as for one. Local files are done in order, as before."""
    from seekdata.sources.remote.urls import is_remote

    if len(items) < 2 or not any(map(is_remote, names)):
        return [fn(item) for item in items]
    return list(_executor().map(fn, items))


def coalesce(ranges: Sequence[tuple[int, int]], gap: int | None = None) -> list[tuple[int, int]]:
    """The spans to fetch for ``ranges``: sorted, merged where they overlap or lie closer
    than ``gap`` bytes (default :data:`GAP`)."""
    gap = GAP if gap is None else gap
    spans: list[list[int]] = []
    for start, stop in sorted(ranges):
        if spans and start <= spans[-1][1] + gap:
            spans[-1][1] = max(spans[-1][1], stop)
        else:
            spans.append([start, stop])
    return [(a, b) for a, b in spans]


class RemoteFile:
    """One remote object: its URL, size and ``ETag`` (from its index, else one HEAD request),
    read by byte range. Safe to pickle into DataLoader workers (no connection travels)."""

    def __init__(
        self,
        stores: Stores,
        url: str,
        *,
        size: int | None = None,
        etag: str | None = None,
        cache: Any = None,
    ) -> None:
        self.url = url
        self.loc: Location = locate(url, stores.options)
        self.stores = stores
        self.cache = cache
        if size is None:
            size, etag = self.head()
        self.size = size
        self.etag = etag
        self._next = -1  # where the last read ended (read-ahead)
        self._ahead = 0

    @classmethod
    def with_tail(
        cls, stores: Stores, url: str, nbytes: int, **kwargs: Any
    ) -> tuple[RemoteFile, bytes]:
        """The object at ``url`` and its last ``nbytes`` bytes (all of it when smaller), from
        one request: its size and ``ETag`` come with the answer (a Parquet footer)."""
        loc = locate(url, stores.options)
        backend = stores.backend(loc)
        size, etag, tail = _faults.retrying(
            url, f"read its last {nbytes} bytes", lambda: backend.tail(loc.key, nbytes)
        )
        return cls(stores, url, size=size, etag=etag, **kwargs), tail

    def head(self) -> tuple[int, str | None]:
        """The object's current size and ``ETag`` (one HEAD request)."""
        backend = self.stores.backend(self.loc)
        return _faults.retrying(self.url, "read its size", lambda: backend.info(self.loc.key))

    # -- reads ---------------------------------------------------------------------------

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``, read ahead when this read continues the last one."""
        stop = min(stop, self.size)
        if start >= stop:
            return b""
        kept = self.memory.find(self.version, start, stop)
        if kept is not None:
            self._next = stop
            return bytes(kept)
        fetch_stop = stop
        if self._next >= 0 and self._next <= start <= self._next + max(self._ahead, GAP):
            self._ahead = min(READ_AHEAD, max(2 * self._ahead, FIRST_AHEAD))
            fetch_stop = min(self.size, max(stop, start + self._ahead))
        else:
            self._ahead = 0
        data = self._fetch(start, fetch_stop)
        self._next = stop
        if fetch_stop > stop:
            self.memory.put(self.version, start, data)
        return bytes(memoryview(data)[: stop - start])

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(start, stop)`` of one batch (see :func:`read_batch`)."""
        return read_batch([(self, a, b) for a, b in ranges])

    def _fetch(self, start: int, stop: int) -> Any:
        """Bytes ``[start, stop)`` from the cache, or from the store (verified, retried)."""
        if self.cache is not None:
            return self.cache.read(self, start, stop)
        return self.get(start, stop)

    def get(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` from the store: one GET carrying the index's ``ETag``, its
        answer checked, retried when it fails transiently; exactly ``stop - start`` bytes."""
        backend = self.stores.backend(self.loc)
        return _faults.retrying(
            self.url,
            f"read bytes {start}-{stop - 1}",
            lambda: backend.get(self.loc.key, start, stop, self.etag, self.size),
        )

    def open(self) -> RangeIO:
        """A seekable binary file object over this object (for tarfile, pyarrow, numpy)."""
        return RangeIO(self)

    @property
    def version(self) -> str:
        """What kept bytes are filed under: the URL, the ``ETag`` and the size, so the bytes of
        one version of an object never serve another's index."""
        return f"{self.url}\0{self.etag}\0{self.size}"

    @property
    def memory(self) -> Memory:
        """Where fetched bytes are kept: this process's :class:`Memory`."""
        return _memory

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_next"], state["_ahead"] = -1, 0  # the receiving process has read nothing yet
        return state

    def __repr__(self) -> str:
        return f"RemoteFile({self.url!r}, size={self.size})"


def fetch_all(jobs: Sequence[tuple[RemoteFile, int, int]]) -> list[Any]:
    """The bytes of each ``(file, start, stop)`` from the cache or the store, concurrently
    when more than one."""
    if len(jobs) == 1:
        f, a, b = jobs[0]
        return [f._fetch(a, b)]
    futures = [_executor().submit(f._fetch, a, b) for f, a, b in jobs]
    return [future.result() for future in futures]


_last_batch: tuple[int, set[str]] = (-1, set())  # (pid, the versions the last batch read)


def prefetch(requests: Sequence[tuple[RemoteFile, int, int]]) -> None:
    """Bring the bytes of each ``(file, start, stop)`` of one batch into memory (see the
    module docstring: coalesced spans, or whole chunks of an object being streamed), all
    requests at once. Later reads of these ranges find them there."""
    global _last_batch
    pid = os.getpid()
    previous = _last_batch[1] if _last_batch[0] == pid else set()
    by_file: dict[str, tuple[RemoteFile, list[tuple[int, int]]]] = {}
    for file, start, stop in requests:
        by_file.setdefault(file.version, (file, []))[1].append((start, min(stop, file.size)))
    _last_batch = (pid, set(by_file))
    jobs = []
    for version, (file, ranges) in by_file.items():
        if len(ranges) >= STREAM_MIN and version in previous:
            chunks = {k for a, b in ranges for k in range(a // CHUNK, (b - 1) // CHUNK + 1)}
            ranges = [(c * CHUNK, min(file.size, (c + 1) * CHUNK)) for c in sorted(chunks)]
        wanted = [(a, b) for a, b in ranges if a < b and file.memory.find(version, a, b) is None]
        jobs += [(file, a, b) for a, b in coalesce(wanted)]
    if not jobs:
        return
    for (file, a, b), data in zip(jobs, fetch_all(jobs), strict=True):
        file.memory.put(file.version, a, data)
        file._next = max(file._next, b)


def read_batch(requests: Sequence[tuple[RemoteFile, int, int]]) -> list[bytes]:
    """The bytes of each ``(file, start, stop)`` of one batch: :func:`prefetch`, then each
    range from memory (read directly when memory could not keep it)."""
    prefetch(requests)
    return [file.read(start, stop) for file, start, stop in requests]


class RangeIO(io.RawIOBase):
    """A read-only, seekable file over a :class:`RemoteFile` (for tarfile, pyarrow, numpy).

    A read is served from bytes the process keeps (:class:`Memory`: a batch's prefetched
    ranges), else from this file's own buffer, else fetched: at least the next
    :data:`FIRST_AHEAD` bytes, doubling while reads move forward, up to :data:`READ_AHEAD`. An
    index build's pass over an object thus reads it in large ranges, and keeps none of it past
    the pass."""

    def __init__(self, file: RemoteFile) -> None:
        super().__init__()
        self.file = file
        self.pos = 0
        self._buf: Any = b""
        self._at = 0  # where self._buf starts in the object
        self._ahead = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.file.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        start, stop = self.pos, min(self.pos + len(view), self.file.size)
        if start >= stop:
            return 0
        f = self.file
        data = f.memory.find(f.version, start, stop)
        if data is None:
            if not (self._at <= start and stop <= self._at + len(self._buf)):
                forward = self._at + len(self._buf) <= start <= self._at + len(self._buf) + GAP
                self._ahead = min(READ_AHEAD, 2 * self._ahead) if forward else FIRST_AHEAD
                end = min(f.size, max(stop, start + self._ahead))
                self._buf, self._at = memoryview(f._fetch(start, end)).cast("B"), start
            data = self._buf[start - self._at : stop - self._at]
        view[: stop - start] = data
        self.pos = stop
        return stop - start

    def size(self) -> int:
        return self.file.size
