"""Where the index of a file lives, and writing it atomically; for a remote object, reading and
writing it in one request.

An index (a tar shard's member offsets, a token file's document boundaries, a Parquet file's
footer) is built by one pass over its file the first time, then kept:

- for a local file: beside it, as ``<path><suffix>``, or under ``index_dir`` as
  ``<name>.<digest of its real path><suffix>`` (:func:`index_path`);
- for a remote object, under ``index_dir`` when one is given: a local file named after the
  object (``<name>.<digest of the URL><suffix>``, :func:`local_index_path`), read with no
  request at all;
- else beside the object, as ``<url><suffix>`` in the same store, read with one GET —
  written there when the store takes the PUT;
- else (a read-only store and no ``index_dir``): the build is refused, naming ``index_dir=``.

Every local index is written by :func:`write_atomic`: ranks that build the same index at once
each write a file of their own and rename it over the index, so a reader sees a whole one.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from typing import Any

from seekdata.sources.remote import faults as _faults
from seekdata.sources.remote.stores import Stores
from seekdata.sources.remote.urls import locate


def index_path(path: str, suffix: str, index_dir: str | None) -> str:
    """Where the index of the local file ``path`` lives: beside it, or under ``index_dir``."""
    if index_dir is None:
        return path + suffix
    real = os.path.realpath(path)
    digest = hashlib.sha256(real.encode()).hexdigest()[:16]
    return os.path.join(index_dir, f"{os.path.basename(real)}.{digest}{suffix}")


def local_index_path(url: str, suffix: str, index_dir: str) -> str:
    """The file under ``index_dir`` that holds the index of the remote object ``url``."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    name = posixpath.basename(locate(url).key) or "object"
    return os.path.join(index_dir, f"{name}.{digest}{suffix}")


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (its folder made when missing): a file of
    this process's own, renamed over ``path``, so ranks that race each leave a whole index."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def where(url: str, suffix: str, index_dir: str | None) -> str:
    """Where the index of ``url`` is read from and written to, for messages."""
    return url + suffix if index_dir is None else local_index_path(url, suffix, index_dir)


def load(stores: Stores, url: str, suffix: str, index_dir: str | None) -> bytes | None:
    """The stored index of ``url``, or None when there is none (or it cannot be read)."""
    if index_dir is not None:
        try:
            with open(local_index_path(url, suffix, index_dir), "rb") as f:
                return f.read()
        except OSError:
            return None
    loc = locate(url, stores.options).sibling(suffix)  # the object's URL checked, then its index's
    backend = stores.backend(loc)
    try:
        return _faults.retrying(loc.url, "read the index", lambda: backend.whole(loc.key))
    except ValueError:
        return None  # missing (or unreadable): built again


def parse_json(data: bytes | str) -> Any:
    """``data`` as JSON, or None when it is not JSON (not UTF-8, not JSON, or nested deeper
    than the parser goes: a ``RecursionError``). Every family's index goes through this, and
    an index that is not JSON is built again, whatever is wrong with its bytes."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def check_place(stores: Stores, url: str, suffix: str, index_dir: str | None) -> None:
    """Before an index of ``url`` is built: ``ValueError`` when it could not be kept (a
    read-only store, such as http(s):// or hf://, and no ``index_dir``)."""
    if index_dir is None and locate(url).kind in ("http", "hf"):
        raise ValueError(
            f"{url}: its index ({suffix}) is built once and kept, but an {url.split(':')[0]}:// "
            "store is read only; pass index_dir= (--index-dir) a local directory for it"
        )


def save(stores: Stores, url: str, suffix: str, index_dir: str | None, data: bytes) -> None:
    """Keep ``data`` as the index of ``url``; ``ValueError`` naming ``index_dir=`` when the
    store refuses it and no ``index_dir`` was given."""
    if index_dir is not None:
        os.makedirs(index_dir, exist_ok=True)
        write_atomic(local_index_path(url, suffix, index_dir), data)
        return
    loc = locate(url, stores.options).sibling(suffix)  # the object's URL checked, then its index's
    backend = stores.backend(loc)
    try:
        _faults.retrying(loc.url, "write the index", lambda: backend.put(loc.key, data))
    except (ValueError, OSError) as exc:
        raise ValueError(
            f"{url}: cannot write its index beside it as {loc.url} ({exc}); pass index_dir= "
            "(--index-dir) a local directory for the indexes of read-only stores"
        ) from None
