"""Remote objects read by byte range: the I/O layer under every file-backed source.

A source that is given a remote URL (:func:`is_remote`: ``s3://``, ``gs://``, ``az://``,
``http(s)://``, ``hf://``) swaps its local file (a memmap, a file descriptor) for a
:class:`RemoteFile` made by :func:`open_file`; local paths keep their local readers.

- :mod:`.urls`: the URL forms and the store and key each names;
- :mod:`.stores`: the back-end (fsspec, the ``remote`` extra), one client per store per
  process, credentials from ``storage_options=`` and the back-end's usual places;
- :mod:`.obstores`: ``s3://`` through obstore where it can run (no fork after its use);
- :mod:`.faults`: transient failures retried with backoff, permanent ones refused;
- :mod:`.file`: verified range reads, batch coalescing, read-ahead, bytes kept in memory;
- :mod:`.cache`: the optional disk cache, bounded by bytes.

Where an object's index is kept (beside it, or under ``index_dir``) is the next floor's,
:mod:`seekdata.sources.files.indexes`, with the local files' indexes.
"""

from __future__ import annotations

from typing import Any

from seekdata.sources.remote.cache import Cache
from seekdata.sources.remote.file import (
    Memory,
    RangeIO,
    RemoteFile,
    coalesce,
    fetch_all,
    map_objects,
    memory,
    prefetch,
    read_batch,
)
from seekdata.sources.remote.stores import EXTRAS, Stores, check_options
from seekdata.sources.remote.urls import SCHEMES, Location, is_remote, locate, scheme_of

__all__ = [
    "EXTRAS",
    "SCHEMES",
    "Cache",
    "Location",
    "Memory",
    "RangeIO",
    "RemoteFile",
    "Stores",
    "check_cache",
    "check_options",
    "coalesce",
    "fetch_all",
    "is_remote",
    "locate",
    "map_objects",
    "memory",
    "prefetch",
    "read_batch",
    "scheme_of",
]


def check_cache(cache: Any, where: str) -> Cache | None:
    """``cache`` as a :class:`Cache` or None; a TypeError for anything else."""
    if cache is None or isinstance(cache, Cache):
        return cache
    raise TypeError(
        f"{where}: cache must be a seekdata.remote.Cache or None; got {type(cache).__name__}; "
        "pass Cache(directory, max_bytes=...)"
    )
