"""Count the files this process opens, with Python's own audit events (``sys.addaudithook``):
the real ``open`` calls of any code (``builtins.open``, ``os.open``, numpy's and pyarrow's
Python-level opens), not a mock of ours. An audit hook cannot be removed, so one is installed
once per process and records only inside :func:`counting`."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_active: list[list[str]] = []
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _active:
        return
    path = args[0]
    if isinstance(path, bytes):
        path = path.decode(errors="replace")
    if not isinstance(path, str):  # an open of a descriptor
        return
    for seen in _active:
        seen.append(path)


@contextlib.contextmanager
def counting() -> Iterator[list[str]]:
    """The paths opened (``open`` audit events) while the block runs, in order."""
    global _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True
    seen: list[str] = []
    _active.append(seen)
    try:
        yield seen
    finally:
        _active.remove(seen)
