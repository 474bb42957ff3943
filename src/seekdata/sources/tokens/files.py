"""Flat token files for :mod:`seekdata.tokens`: described once, read through ``np.memmap``.

A token file is a flat array of token ids of one integer dtype: a raw binary (nanoGPT's
``train.bin``, a ``.u16``, OLMo's header-less ``.npy`` memmaps), or a file written by
``np.save`` — a name ending in ``.npy`` that starts with numpy's magic string, whose header
gives the dtype (it must be ``dtype=``) and where the tokens start. Several files are read as
their concatenation, in the order given; every position here is a token position in it.

Each file is described once (size, mtime, tokens) and refused clearly when it cannot be a
token file of that dtype: empty, a size that is not a whole number of tokens, a ``.npy`` of
another dtype or truncated. A process opens its memmaps lazily (at most
:data:`MAX_OPEN_FILES` at once: the floor's LRU, :mod:`seekdata.sources.files.handles`) and
checks each file's size and mtime when it opens it, so a file rewritten after the dataset was
built is an error, not other tokens.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seekdata.sources.files import handles as _handles
from seekdata.sources.files import manifest as _manifest
from seekdata.sources.files.paths import is_remote

#: Most token files one process keeps mapped at once (the floor's one limit).
MAX_OPEN_FILES = _handles.MAX_OPEN_FILES
_NPY_MAGIC = b"\x93NUMPY"


def check_dtype(dtype: Any, where: str) -> np.dtype[Any]:
    """``dtype`` as a numpy integer dtype, or a TypeError saying which ones are accepted."""
    try:
        out = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{where}: dtype must be a numpy integer dtype; got {dtype!r}") from exc
    if out.kind not in "ui":
        raise TypeError(
            f"{where}: dtype must be an integer dtype such as np.uint16 or np.uint32; got "
            f"{out}; token ids are integers"
        )
    return out


@dataclass(frozen=True)
class TokenFile:
    """One token file as described when the dataset was built."""

    name: str  #: as given
    path: str  #: absolute: a later chdir does not change which file a worker opens
    offset: int  #: bytes before the first token (a ``.npy`` header; 0 for raw files)
    tokens: int  #: number of tokens
    size: int  #: file size in bytes when described
    mtime_ns: int  #: file mtime when described (0 for a remote file)
    etag: str | None = None  #: a remote file's ETag when described
    #: a remote file's object (``seekdata.sources.remote.RemoteFile``); None for a local file
    remote: Any = field(default=None, compare=False)


def describe(
    name: str, dtype: np.dtype[Any], *, stores: Any = None, cache: Any = None
) -> TokenFile:
    """Stat and check one token file; a ``ValueError`` naming it when it cannot be one.
    A remote ``name`` is read through ``stores`` (its ``storage_options``) and ``cache``."""
    if is_remote(name):
        return _describe_remote(name, dtype, stores, cache)
    try:
        st = os.stat(name)
    except FileNotFoundError as exc:
        raise ValueError(f"token file {name} does not exist; check the path") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"token file {name}: expected a file, got a directory or device")
    offset = _npy_offset(name, dtype, st.st_size) if name.endswith(".npy") else 0
    tokens = _count(name, dtype, st.st_size - offset)
    return TokenFile(name, os.path.abspath(name), offset, tokens, st.st_size, st.st_mtime_ns)


def from_manifest(
    name: str,
    dtype: np.dtype[Any],
    size: int,
    tokens: int,
    stamp: str,
    *,
    stores: Any = None,
    cache: Any = None,
) -> TokenFile:
    """A token file as its manifest row describes it (size, tokens, stamp): nothing is read
    (no stat, no HEAD). That it still is that file is checked when it is first opened or read
    (:class:`TokenReader`'s open, a remote read's ``If-Match``)."""
    offset = size - tokens * dtype.itemsize  # a .npy header, or 0
    if is_remote(name):
        from seekdata.sources.remote import RemoteFile, Stores

        file = RemoteFile(
            stores if stores is not None else Stores({}), name, size=size, etag=stamp, cache=cache
        )
        return TokenFile(name, name, offset, tokens, size, 0, stamp, file)
    mtime_ns = int(stamp.split(":", 1)[1]) if stamp.startswith("mtime_ns:") else -1
    return TokenFile(name, os.path.abspath(name), offset, tokens, size, mtime_ns)


def _describe_remote(name: str, dtype: np.dtype[Any], stores: Any, cache: Any) -> TokenFile:
    from seekdata.sources.remote import RemoteFile, Stores

    file = RemoteFile(stores if stores is not None else Stores({}), name, cache=cache)
    offset = _npy_offset(name, dtype, file.size, file.open()) if name.endswith(".npy") else 0
    tokens = _count(name, dtype, file.size - offset)
    return TokenFile(name, name, offset, tokens, file.size, 0, file.etag, file)


def _count(name: str, dtype: np.dtype[Any], body: int) -> int:
    """Tokens in ``body`` bytes of a token file; a ValueError when that is not a whole number."""
    if body % dtype.itemsize:
        raise ValueError(
            f"token file {name}: {body} bytes of tokens is not a whole number of {dtype} tokens "
            f"({dtype.itemsize} bytes each); the file is truncated or holds another dtype; "
            f"pass dtype= the dtype it was written with"
        )
    if body == 0:
        raise ValueError(f"token file {name} holds no tokens (it is empty); drop it from files")
    return body // dtype.itemsize


def _npy_offset(name: str, dtype: np.dtype[Any], size: int, file: Any = None) -> int:
    """Bytes before the data of a ``np.save`` file; 0 for a raw file named ``.npy``. Read from
    the local file ``name``, or from ``file`` (a remote one) when given."""
    fmt = np.lib.format
    with open(name, "rb") if file is None else contextlib.nullcontext(file) as f:
        if f.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
            return 0  # OLMo writes its token arrays with np.memmap: no header
        f.seek(0)
        try:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, descr = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, descr = fmt.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except ValueError as exc:
            raise ValueError(
                f"token file {name}: starts like a .npy file but its header cannot be read "
                f"({exc}); rewrite it with np.save, or give it a raw name (e.g. .bin)"
            ) from exc
        offset = f.tell()
    if descr != dtype:
        raise ValueError(
            f"token file {name} is a .npy array of {descr}, but dtype={dtype}; pass "
            f"dtype={descr.str!r} (all files of a dataset share one dtype)"
        )
    if fortran and len(shape) > 1:
        raise ValueError(
            f"token file {name} is a Fortran-ordered {len(shape)}-d array: its tokens are not "
            f"stored in order; save it as np.ascontiguousarray(tokens).ravel()"
        )
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size != expected:
        raise ValueError(
            f"token file {name}: its .npy header declares shape {shape} ({expected} bytes in "
            f"all) but the file has {size} bytes; it is truncated or was appended to; rewrite it"
        )
    return offset


class TokenReader:
    """The concatenation of token files, read by position; picklable, fork-safe."""

    def __init__(self, files: Sequence[TokenFile], dtype: np.dtype[Any], table: Any = None) -> None:
        """``table``: the files' manifest rows (:class:`seekdata.sources.files.manifest.Table`),
        against which a file is checked when it is opened; None: against ``files``."""
        self.files = list(files)
        self.dtype = dtype
        self.table = table
        self.remote = any(f.remote is not None for f in self.files)  #: some file is remote
        starts = [0]
        for f in self.files:
            starts.append(starts[-1] + f.tokens)
        self.starts = starts  #: first position of each file, then the total
        self._maps: _handles.OpenFiles[np.ndarray] = _handles.OpenFiles()

    @property
    def total(self) -> int:
        return self.starts[-1]

    def file_at(self, position: int) -> int:
        """The file that holds token ``position`` (``0 <= position < total``)."""
        return bisect.bisect_right(self.starts, position) - 1

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the concatenation: a view of one memmap, or a copy."""
        k = bisect.bisect_right(self.starts, start) - 1
        base = self.starts[k]
        if stop <= self.starts[k + 1]:
            if self.files[k].remote is None:
                return self.tokens(k)[start - base : stop - base]
            return self._remote(k, start - base, stop - base)
        parts = []
        while start < stop:  # a read across files: their tokens in order
            end = min(stop, self.starts[k + 1])
            a, b = start - self.starts[k], end - self.starts[k]
            parts.append(
                self.tokens(k)[a:b] if self.files[k].remote is None else self._remote(k, a, b)
            )
            start, k = end, k + 1
        return np.concatenate(parts)

    def byte_ranges(self, start: int, stop: int) -> list[tuple[Any, int, int]]:
        """``(remote file, first byte, end byte)`` of tokens ``[start, stop)`` in remote files
        (a batch's reads, fetched ahead at once); local files are left out."""
        out = []
        k, size = bisect.bisect_right(self.starts, start) - 1, self.dtype.itemsize
        while start < stop:
            end = min(stop, self.starts[k + 1])
            f = self.files[k]
            if f.remote is not None:
                base = f.offset - self.starts[k] * size
                out.append((f.remote, base + start * size, base + end * size))
            start, k = end, k + 1
        return out

    def _remote(self, k: int, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the remote file ``k``: one range read."""
        return token_array(self.files[k], self.dtype)[start:stop]

    def tokens(self, k: int) -> np.ndarray:
        """All tokens of file ``k``, memory-mapped (opened on first use in this process; views
        handed out keep their own mapping when the LRU drops it)."""
        return self._maps.get(k, lambda: self._open(k))

    def _open(self, k: int) -> np.ndarray:
        f = self.files[k]
        manifest = None if self.table is None else self.table.manifest_of(k)
        try:
            now = _handles.changed(f.path, f.size, f.mtime_ns)
        except OSError as exc:
            if manifest is not None:
                raise _manifest.stale_error(
                    f.name, manifest, f"it cannot be opened ({exc})", self.table.fix_args
                ) from exc
            raise ValueError(f"token file {f.name}: cannot open {f.path} ({exc})") from exc
        if now is not None and manifest is not None:
            self.table.check_stamp(k, f.name, now[0], f"mtime_ns:{now[1]}")
        if now is not None:
            raise ValueError(
                f"token file {f.name} changed after this dataset read it (size {f.size} → "
                f"{now[0]} bytes); its positions may now hold other tokens; build the "
                f"dataset again"
            )
        mapped = np.memmap(f.path, dtype=self.dtype, mode="r", offset=f.offset, shape=(f.tokens,))
        return mapped.view(np.ndarray)  # plain slices (a memmap subclass is slower to slice)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_maps"]  # mappings stay with their process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._maps = _handles.OpenFiles()


class RemoteTokens:
    """The tokens of a remote file as far as slicing goes: ``[a:b]`` is one range read."""

    def __init__(self, f: TokenFile, dtype: np.dtype[Any]) -> None:
        self.file, self.dtype = f, dtype

    def __len__(self) -> int:
        return self.file.tokens

    def __getitem__(self, index: slice) -> np.ndarray:
        start, stop, _ = index.indices(self.file.tokens)
        size, at = self.dtype.itemsize, self.file.offset
        data = self.file.remote.read(at + start * size, at + max(start, stop) * size)
        return np.frombuffer(data, dtype=self.dtype)


def token_array(f: TokenFile, dtype: np.dtype[Any]) -> Any:
    """All tokens of ``f`` for slicing: a memmap of a local file, :class:`RemoteTokens` of a
    remote one (read as sliced)."""
    if f.remote is not None:
        return RemoteTokens(f, dtype)
    return np.memmap(f.path, dtype=dtype, mode="r", offset=f.offset, shape=(f.tokens,))
