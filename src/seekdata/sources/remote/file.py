"""One remote object, read by byte range: verified, coalesced, read ahead, kept a while.

- Every GET carries the version the index recorded (``If-Match`` with its ``ETag``, or
  ``If-Unmodified-Since`` with its ``Last-Modified`` date), and its answer is checked (the
  range it holds, the object's size and version, the number of bytes): an object that changed
  under its index, or a server that answers another range, is an error, never other bytes
  (:mod:`seekdata.sources.remote.faults`). An object whose server gives no version at all is
  warned about when a dataset is built (:func:`unversioned`).
- :func:`prefetch` reads the ranges of one batch: those closer than :data:`GAP` are read as
  one request, and separate requests run concurrently. When an object is being streamed — the
  batch has :data:`STREAM_MIN` or more ranges in it and this process's previous batch read it
  too, as in a shard-local order — its ranges are read as whole aligned :data:`CHUNK` s
  instead, each in a request of its own and once while memory keeps it. The first batch after
  a resume has no previous batch: it reads only its own ranges.
- With ``shards=True`` (tar shards: an object is one shard, read whole while its window of the
  order lasts) the rest of an object being streamed is read ahead in the background
  (:data:`AHEAD` requests at once), so later batches find its chunks in memory instead of
  waiting for them; a batch that needs a chunk being read ahead waits for that request (or
  takes it over, if it has not started), never reads it twice. Only while the objects being
  streamed fit in memory: else their chunks would be dropped before their samples are read,
  and each batch reads its own ranges.
- A reader moving forward through an object (a tar scan, samples in shard order) is read
  ahead: each read that starts where the last one ended fetches twice as far as the last,
  from :data:`FIRST_AHEAD` up to :data:`READ_AHEAD` bytes. The first read at a new place —
  the first batch after a resume — fetches only what it asks for.
- What was fetched is kept in memory (:func:`memory`: :data:`MEMORY` bytes per process, for
  all datasets, least recently used dropped first), so read-ahead and coalesced bytes serve
  later reads; with a :class:`~seekdata.sources.remote.Cache`, fetched blocks also go to disk.

Per process, shared by its threads (the loader's, thread workers', the request threads):
the memory, the request threads, and the requests in flight with the read-ahead queue
(:class:`_Flights`): a range that another thread is fetching — the same span, or one inside a
larger request (a chunk, a read-ahead) — is waited for, not requested again, whether it is
asked for by a batch (:func:`prefetch`) or by a read outside one (:meth:`RemoteFile.read`).
So thread workers fetch each byte of a shard they stream once, as one process. Per thread:
its previous batch (``_batches``), which decides whether a file is streamed, so that each
worker asks for the spans it would ask for as a worker process. Everything per process is
made again in a forked child (threads and connections do not survive a fork).
"""

from __future__ import annotations

import bisect
import io
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
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
#: Most requests one process has in flight at once for the batch being read...
THREADS = 16
#: ... and most chunks it reads ahead at once, in the background (``prefetch(shards=True)``).
AHEAD = 4


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

    def find(self, url: str, start: int, stop: int) -> memoryview | bytes | None:
        """Bytes ``[start, stop)`` of ``url`` (an object's version) if kept ranges hold them all:
        a view of the one that does, or the bytes of ranges that meet end to end (a sample
        across the boundary of two chunks)."""
        self._mine()
        with self._lock:
            parts = self._cover(url, start, stop)
        if parts is None:
            return None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def has(self, url: str, start: int, stop: int) -> bool:
        """Whether kept ranges hold all of bytes ``[start, stop)`` of ``url`` (nothing copied)."""
        self._mine()
        with self._lock:
            return self._cover(url, start, stop) is not None

    def _cover(self, url: str, start: int, stop: int) -> list[memoryview] | None:
        """Views of kept ranges that together are bytes ``[start, stop)``, or None (lock held)."""
        starts = self._starts.get(url)
        if not starts:
            return None
        parts, at = [], start
        while at < stop:
            i = bisect.bisect_right(starts, at) - 1
            best, end = -1, at
            for s in starts[max(0, i - 3) : i + 1]:  # the nearest few: spans may overlap
                e = s + len(self._spans[(url, s)])
                if e > end:
                    best, end = s, e
            if best < 0:
                return None
            self._spans.move_to_end((url, best))
            parts.append(self._spans[(url, best)][at - best : min(stop, end) - best])
            at = end
        return parts

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
            if etag is None:
                unversioned(url)
        self.size = size
        self.etag = etag
        self._version = f"{url}\0{etag}\0{size}"
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
        if etag is None:
            unversioned(url)
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
        data = _flights().fetch(self, start, fetch_stop, keep=fetch_stop > stop, need=stop)
        self._next = stop
        return bytes(memoryview(data)[: stop - start])

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(start, stop)`` of one batch (see :func:`read_batch`)."""
        return read_batch([(self, a, b) for a, b in ranges])

    def _fetch(self, start: int, stop: int, *, wait: bool = True) -> Any:
        """Bytes ``[start, stop)`` from the cache, or from the store (verified, retried).
        ``wait=False`` (a read-ahead): None when another process of the machine is fetching
        them into the shared cache, instead of waiting for it."""
        if self.cache is not None:
            return self.cache.read(self, start, stop, wait=wait)
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
        return self._version

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


def unversioned(url: str) -> None:
    """Warn that the store gives nothing that tells one version of ``url`` from another."""
    import warnings

    warnings.warn(
        f"{url}: the server sends neither an ETag nor a Last-Modified date for it, so nothing "
        "tells one version of it from another: if it is replaced by a file of the same size, "
        "the new bytes are read where the dataset's index places the old ones, without an "
        "error. Serve it from a server that sends ETag or Last-Modified (most static file "
        "servers and every object store do); docs/remote.md: versions",
        UserWarning,
        stacklevel=3,
    )


def fetch_all(jobs: Sequence[tuple[RemoteFile, int, int]]) -> list[Any]:
    """The bytes of each ``(file, start, stop)`` from the cache or the store, concurrently
    when more than one."""
    if len(jobs) == 1:
        f, a, b = jobs[0]
        return [f._fetch(a, b)]
    futures = [_executor().submit(f._fetch, a, b) for f, a, b in jobs]
    return [future.result() for future in futures]


class _Flight:
    """One request of this process for bytes ``[start, stop)`` of ``file``, run by the batch
    that needs them or in the background: its bytes go to memory before it is done."""

    __slots__ = ("ahead", "file", "future", "key", "queued", "start", "stop", "waiters")

    def __init__(self, file: RemoteFile, start: int, stop: int, queued: bool = False) -> None:
        self.file, self.start, self.stop = file, start, stop
        self.key = (file.version, start, stop)
        self.future: Future[Any] = Future()
        self.queued = queued  # waiting for a background thread
        self.ahead = queued  # a read-ahead (no batch waits for it yet)
        self.waiters = 0  # other threads' reads waiting for it (:meth:`_Flights.fetch`)


class _Flights:
    """The requests in flight in one process (so that no range is fetched twice at once), and
    its read-ahead: a queue served by at most :data:`AHEAD` daemon threads, each ending when
    the queue is empty (nothing is left that could keep a process from exiting)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.by_key: dict[tuple[str, int, int], _Flight] = {}
        self.queue: deque[_Flight] = deque()
        self.threads = 0
        #: the versions each thread's last two batches read, by thread: what is still read
        self.recent: dict[int | None, set[str]] = {}

    def covering(self, version: str, start: int, stop: int) -> _Flight | None:
        """A flight (running or queued) whose bytes include ``[start, stop)`` of ``version``,
        or None (lock held). So a range another thread is fetching as part of a larger one
        (a chunk being streamed, a read-ahead) is waited for, not fetched again."""
        flight = self.by_key.get((version, start, stop))
        if flight is not None:
            return flight
        for (v, a, b), flight in self.by_key.items():
            if v == version and a <= start and stop <= b:
                return flight
        return None

    def land(self, flight: _Flight) -> None:
        """Run ``flight``: its bytes into memory, then its future done (an error in it)."""
        f = flight.file
        try:
            data = f._fetch(flight.start, flight.stop, wait=not flight.ahead)
            if data is not None:  # None: another process fetches it into the shared cache
                f.memory.put(f.version, flight.start, data)
        except BaseException as exc:
            flight.future.set_exception(exc)
        else:
            flight.future.set_result(None)
        finally:
            with self.lock:
                if self.by_key.get(flight.key) is flight:
                    del self.by_key[flight.key]

    def fetch(self, file: RemoteFile, start: int, stop: int, *, keep: bool, need: int) -> Any:
        """Bytes ``[start, need)`` of ``file`` or more (a read of one sample, outside a batch's
        :func:`prefetch`): when another thread has a request in flight that holds them, its
        bytes, from memory once it lands; else bytes ``[start, stop)`` fetched as a flight of
        this thread's (so a thread that needs them meanwhile waits for it), kept in memory
        when ``keep`` (a read-ahead)."""
        version = file.version
        with self.lock:
            flight = self.covering(version, start, need)
            if flight is not None and flight.queued:  # a queued read-ahead: taken over
                self.queue.remove(flight)
                flight.queued = flight.ahead = False
                mine = flight
            elif flight is not None:
                mine = None
                flight.waiters += 1  # its bytes must stay in memory for this read
            else:
                mine = self.by_key[(version, start, stop)] = _Flight(file, start, stop)
        if mine is None:
            wait([flight.future])  # type: ignore[union-attr]
            kept = file.memory.find(version, start, need)
            if kept is not None:
                return kept
            return file._fetch(start, stop)  # it failed, or memory dropped it: our own
        if mine.stop != stop or mine.start != start:  # a queued chunk, taken over
            self.land(mine)
            mine.future.result()
            kept = file.memory.find(version, start, need)
            return kept if kept is not None else file._fetch(start, stop)
        try:
            data = file._fetch(start, stop)
        except BaseException as exc:
            with self.lock:
                if self.by_key.get(mine.key) is mine:
                    del self.by_key[mine.key]
            mine.future.set_exception(exc)
            raise
        with self.lock:  # (a waiter counted after this would find it no longer in flight)
            if keep or mine.waiters:
                file.memory.put(version, start, data)
            if self.by_key.get(mine.key) is mine:
                del self.by_key[mine.key]
        mine.future.set_result(None)
        return data

    def read_ahead(self) -> None:
        """A background thread: run queued flights until none is left."""
        while True:
            with self.lock:
                if not self.queue or self.pid != os.getpid():
                    self.threads -= 1
                    return
                flight = self.queue.popleft()
                flight.queued = False
            self.land(flight)


_flights_of: _Flights | None = None
_flights_lock = threading.Lock()


def _flights() -> _Flights:
    """This process's :class:`_Flights` (made again after a fork: threads do not survive it)."""
    global _flights_of
    with _flights_lock:
        if _flights_of is None or _flights_of.pid != os.getpid():
            _flights_of = _Flights()
        return _flights_of


def settle() -> None:
    """Wait until this process has no request in flight and nothing queued to read ahead
    (for tests and benchmarks: what a batch started in the background has landed)."""
    flights = _flights()
    while True:
        with flights.lock:
            pending = [f.future for f in flights.by_key.values()]
        if not pending:
            return
        wait(pending)  # done, whichever way (a dropped read-ahead is cancelled)


#: Each thread's last batch: ``.seen = (pid, the versions it read)``. A thread's own, so that
#: under thread workers each worker's "previous batch" is its own previous batch, as in a
#: worker process (not whichever thread's batch ended last): the spans a batch asks for are
#: then the same under threads as under processes, and the threads' identical spans meet in
#: one flight.
_batches = threading.local()


def _previous(pid: int) -> set[str]:
    """The versions this thread's previous batch read (none in a new process or thread)."""
    seen = getattr(_batches, "seen", None)
    return seen[1] if seen is not None and seen[0] == pid else set()


def reset() -> None:
    """Forget what this process fetched and read: an empty :class:`Memory`, no flights, no
    previous batch in any thread (for tests and benchmarks that count a cold start)."""
    global _memory, _flights_of, _batches
    settle()
    _memory = Memory(_memory.limit)
    with _flights_lock:
        _flights_of = None
    _batches = threading.local()


def prefetch(requests: Sequence[tuple[RemoteFile, int, int]], *, shards: bool = False) -> None:
    """Bring the bytes of each ``(file, start, stop)`` of one batch into memory (see the
    module docstring: coalesced spans, or whole chunks of an object being streamed), all
    requests at once. Later reads of these ranges find them there.

    ``shards=True``: each object is one shard of a shard-local order, read whole while its
    window lasts; the rest of an object being streamed is read ahead in the background."""
    pid = os.getpid()
    previous = _previous(pid)
    by_file: dict[str, tuple[RemoteFile, list[tuple[int, int]]]] = {}
    for file, start, stop in requests:
        by_file.setdefault(file.version, (file, []))[1].append((start, min(stop, file.size)))
    _batches.seen = (pid, set(by_file))
    streamed = {v for v, (_, r) in by_file.items() if len(r) >= STREAM_MIN and v in previous}
    ahead: dict[str, RemoteFile] = {}
    if shards and streamed:
        if sum(by_file[v][0].size for v in streamed) > memory().limit:
            streamed = set()  # chunks would be dropped before their samples are read
        else:
            ahead = {v: by_file[v][0] for v in streamed}
    flights = _flights()
    mine: list[_Flight] = []  # run by this batch
    theirs: list[tuple[_Flight, int, int]] = []  # already running: waited for (and our span)

    def take(flight: _Flight) -> None:  # a queued read-ahead: this batch runs it now
        flights.queue.remove(flight)
        flight.queued = flight.ahead = False
        mine.append(flight)

    with flights.lock:  # (what is in flight is decided under it: no range asked for twice)
        spans: list[tuple[RemoteFile, int, int]] = []
        for version, (file, ranges) in by_file.items():
            if version in streamed:
                chunks = {k for a, b in ranges for k in range(a // CHUNK, (b - 1) // CHUNK + 1)}
                spans += [(file, *_chunk(file, c)) for c in sorted(chunks)]
                continue
            wanted = []
            for a, b in ranges:
                if a >= b or file.memory.has(version, a, b):
                    continue
                flight = flights.covering(version, a, b)
                if flight is None:
                    wanted.append((a, b))
                elif flight.queued:
                    take(flight)
                elif all(flight is not m for m in mine):  # another thread's: waited for
                    theirs.append((flight, a, b))
            spans += [(file, a, b) for a, b in coalesce(wanted)]
        for file, a, b in spans:
            flight = flights.covering(file.version, a, b)
            if flight is not None and flight.queued:
                take(flight)
            elif flight is not None:
                if all(flight is not m for m in mine):
                    theirs.append((flight, a, b))
            elif not file.memory.has(file.version, a, b):  # (landed meanwhile: not again)
                mine.append(_Flight(file, a, b))
                flights.by_key[mine[-1].key] = mine[-1]
        if shards:
            flights.recent[threading.get_ident()] = previous | set(by_file)
            _queue_ahead(flights, ahead)
    if len(mine) == 1 and not theirs:
        flights.land(mine[0])
    else:
        for flight in mine:
            _executor().submit(flights.land, flight)
    for flight in mine:
        flight.future.result()  # this batch's own request failed: its error
        flight.file._next = max(flight.file._next, flight.stop)
    for flight, a, b in theirs:
        f = flight.file
        if flight.future.exception() is not None or (  # another's failed, or a read-ahead
            not f.memory.has(f.version, a, b)  # left it to another process of a shared
        ):  # cache, or memory dropped it: read it again, as our own (from the cache, now)
            again = _Flight(f, a, b)
            flights.land(again)
            again.future.result()


def _chunk(file: RemoteFile, c: int) -> tuple[int, int]:
    return c * CHUNK, min(file.size, (c + 1) * CHUNK)


def _queue_ahead(flights: _Flights, ahead: dict[str, RemoteFile]) -> None:
    """Queue the chunks of the objects in ``ahead`` that are neither kept nor in flight, drop
    queued ones of objects that no thread's last two batches read (the order has moved on;
    under thread workers another worker may still be streaming an object this one has left),
    and start background threads for them (``flights.lock`` held)."""
    live = {t.ident for t in threading.enumerate()}
    for ident in [i for i in flights.recent if i not in live]:
        del flights.recent[ident]  # an ended worker thread's
    recent = set().union(*flights.recent.values())
    if any(f.file.version not in recent for f in flights.queue):
        for flight in [f for f in flights.queue if f.file.version not in recent]:
            flights.queue.remove(flight)
            del flights.by_key[flight.key]
            flight.future.cancel()
    for version, file in ahead.items():
        for c in range(-(-file.size // CHUNK)):
            a, b = _chunk(file, c)
            if (version, a, b) in flights.by_key or file.memory.has(version, a, b):
                continue
            flight = flights.by_key[(version, a, b)] = _Flight(file, a, b, queued=True)
            flights.queue.append(flight)
    while flights.threads < min(AHEAD, len(flights.queue)):
        flights.threads += 1
        threading.Thread(target=flights.read_ahead, name="seekdata-ahead", daemon=True).start()


def read_batch(
    requests: Sequence[tuple[RemoteFile, int, int]], *, shards: bool = False
) -> list[bytes]:
    """The bytes of each ``(file, start, stop)`` of one batch: :func:`prefetch`, then each
    range from memory (read directly when memory could not keep it)."""
    prefetch(requests, shards=shards)
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
