"""What a process reads of a file only when it first reads from that file: its own index.

A dataset built from a manifest (:mod:`seekdata.sources.files.manifest`) knows every file's size,
item count and digest without its index; the index (tar member offsets, document boundaries, a
Parquet footer) is read by the process that first reads an item of that file, once, and kept
(:class:`PerProcess`). A rank that reads 1 % of the files reads 1 % of the indexes.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["MAX_KEPT", "PerProcess"]

#: Most values one :class:`PerProcess` keeps (the least recently used is dropped and read
#: again when needed): a rank of a shard-local order reads a few files at a time.
MAX_KEPT = 4096

V = TypeVar("V")


class PerProcess(Generic[V]):
    """Values made once per process by the first thread that asks for their key
    (``get(key, make)``): other threads asking for the same key wait for that one, threads
    asking for other keys do not. At most ``limit`` kept (least recently used dropped). A
    forked child starts empty (its own reads, never a half-made value of a parent's thread);
    pickled, it travels empty (a worker reads what it reads)."""

    def __init__(self, limit: int = MAX_KEPT) -> None:
        self.limit = limit
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._making: dict[Hashable, threading.Lock] = {}
        #: how many values this process made (read): what the tests count
        self.made = 0

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value of ``key``: kept, or made now with ``make()`` (once, whatever the number
        of threads asking)."""
        if self.pid != os.getpid():
            self._reset()
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            making = self._making.setdefault(key, threading.Lock())
        with making:
            with self._lock:
                if key in self._values:
                    return self._values[key]
            value = make()  # outside the table's lock: other files' reads go on
            with self._lock:
                self._values[key] = value
                self.made += 1
                self._making.pop(key, None)
                while len(self._values) > self.limit:
                    self._values.popitem(last=False)
        return value

    def peek(self, key: Hashable) -> V | None:
        """The value of ``key`` if this process has it, else None (nothing read)."""
        if self.pid != os.getpid():
            return None
        with self._lock:
            return self._values.get(key)

    def put(self, key: Hashable, value: V) -> None:
        """Keep ``value`` for ``key`` (read at construction, where no manifest described it)."""
        if self.pid != os.getpid():
            self._reset()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.limit:
                self._values.popitem(last=False)

    def __len__(self) -> int:
        return len(self._values) if self.pid == os.getpid() else 0

    def __getstate__(self) -> dict[str, Any]:
        return {"limit": self.limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.limit = state["limit"]
        self._reset()
