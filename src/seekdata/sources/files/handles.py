"""Open files of a file-backed source: one per-process LRU, and one check that a file is the one
the dataset described.

A dataset built in one process is read in others (DataLoader workers, forked or spawned): what
it opens it opens lazily, at most :data:`MAX_OPEN_FILES` at once (the least recently read one is
dropped), in the process that reads, and after a fork anew. Before a local file is opened, its
size and mtime must still be the ones recorded when the dataset described it
(:func:`changed`): a file rewritten since is an error, not other bytes at the same positions.
A remote file is checked by its ETag on every range read
(:class:`seekdata.sources.remote.RemoteFile`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["MAX_OPEN_FILES", "OpenFiles", "changed"]

#: Most files one holder (a dataset in a process; a thread of it for tar shards) keeps open.
MAX_OPEN_FILES = 64

V = TypeVar("V")


class OpenFiles(Generic[V]):
    """An LRU of open files (memmaps, ``ParquetFile`` objects, descriptors), keyed by what the
    holder reads them by, at most :data:`MAX_OPEN_FILES`; emptied in a forked child (its parent
    keeps its own: a child closes its inherited copies). ``close`` closes a dropped one (a
    descriptor); None: dropped references are closed when the last view of them goes.
    Thread-safe; not pickled (a holder drops it)."""

    def __init__(self, close: Callable[[V], Any] | None = None) -> None:
        self._close = close
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()  # not the parent's: another thread may have held it
        self._open: OrderedDict[Hashable, V] = OrderedDict()

    def _forked(self) -> None:
        """In a forked child: close the inherited copies (the parent keeps its own), start anew.
        The parent's lock is not taken: another thread of the parent may have held it."""
        inherited = list(self._open.values())
        self._reset()
        if self._close is not None:
            for old in inherited:
                self._close(old)

    def get(self, key: Hashable, opener: Callable[[], V]) -> V:
        """The open file ``key``, opened with ``opener()`` when it is not open in this process."""
        if self.pid != os.getpid():
            self._forked()
        with self._lock:
            value = self._open.get(key)
            if value is not None:
                self._open.move_to_end(key)
                return value
        value = opener()  # outside the lock: another file's read need not wait for this one
        with self._lock:
            kept = self._open.setdefault(key, value)
            self._open.move_to_end(key)
            dropped = []
            while len(self._open) > MAX_OPEN_FILES:
                dropped.append(self._open.popitem(last=False)[1])
        if kept is not value:
            dropped.append(value)  # another thread opened it meanwhile
        if self._close is not None:
            for old in dropped:
                self._close(old)
        return kept

    def close(self) -> None:
        """Drop (and close) every file this process opened."""
        if self.pid != os.getpid():
            self._forked()
            return
        with self._lock:
            dropped = list(self._open.values())
            self._open.clear()
        if self._close is not None:
            for old in dropped:
                self._close(old)

    def __len__(self) -> int:
        return len(self._open)


def changed(path: str | int, size: int, mtime_ns: int) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` of the local file ``path`` (or open descriptor) now, when it differs
    from the recorded ``size`` and ``mtime_ns`` (the file was rewritten), else None; an
    ``OSError`` when it cannot be read."""
    st = os.stat(path)
    now = (st.st_size, st.st_mtime_ns)
    return None if now == (size, mtime_ns) else now
