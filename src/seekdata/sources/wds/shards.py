"""Random access to webdataset tar shards.

The public face is :mod:`seekdata.wds`; its docstring is the user's guide to this module.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import itertools
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, SupportsIndex

import numpy as np
import torch
from webdataset import autodecode

from seekdata._core.checks import check_bool
from seekdata.sources import remote
from seekdata.sources.files import handles as _handles
from seekdata.sources.files import paths as _paths
from seekdata.sources.files.source import FileSource
from seekdata.sources.wds import tarcheck as _tarcheck
from seekdata.sources.wds import tarindex as _tarindex
from seekdata.sources.wds.tarindex import Shard

__all__ = ["MAX_OPEN_FILES", "PICKLE_EXTENSIONS", "RemoteTarShards", "TarShards"]

#: Extensions webdataset decodes with :func:`pickle.loads`; refused unless ``allow_pickle``.
PICKLE_EXTENSIONS = frozenset({"pkl", "pickle", "pyd"})
#: Most shard files each thread of each process keeps open at once (the floor's one limit).
MAX_OPEN_FILES = _handles.MAX_OPEN_FILES
_HEADER = 512  # a tar header: checked before each member's data is returned
_JOINED_READ = 1 << 16  # members up to this size are read with their header in one pread

_Handler = Callable[[str, bytes], Any]


class TarShards(FileSource[dict[str, Any]]):
    """Map-style dataset over webdataset tar shards, with O(1) random access.

    Args:
        urls: a brace pattern (``"data/shards-{000..099}.tar"``), one path, or a
            list of paths, in shard order. Local files, ``file:`` URLs, and with
            ``allow_pipe`` ``pipe:`` commands.
        decode: None for raw ``bytes``; an image spec such as ``"rgb"``,
            ``"torchrgb8"``, ``"pil"`` or ``"torch"``; a webdataset handler
            ``f(key, data) -> value | None``; a list of those (as
            ``WebDataset.decode(*args)`` takes); or a ``webdataset.autodecode.Decoder``.
            Text, json, numbers, ``.npy`` and ``.pth`` (with ``torch.load(weights_only=True)``)
            decode as webdataset decodes them.
        index_dir: directory for the indexes (and pipe copies); default: each
            index beside its shard, as ``<shard>.seekdata-index.json``.
        allow_pickle: decode ``.pkl``/``.pickle``/``.pyd`` members with
            ``pickle.loads`` and ``.pth`` with ``torch.load(weights_only=False)``.
            Both run arbitrary code from the shard; only for shards you trust.
        allow_pipe: accept ``pipe:`` URLs. A pipe cannot seek, so each command is
            run once and its output copied to ``index_dir``, which must be given.
        rebuild_index: rebuild the index of a shard that changed since it was
            indexed, instead of raising ``ValueError``.
        storage_options: for remote URLs, the back-end's options (credentials, endpoint,
            region; docs/remote.md); None: its usual places (the environment).
        cache: for remote URLs, a :class:`seekdata.remote.Cache` of fetched bytes on local
            disk, or None.

    Each sample is read with one positioned read per member; nothing before it
    in the shard is read. Open files are cached per process and thread (at
    most :data:`MAX_OPEN_FILES`), opened lazily, and reopened after a fork, so
    the dataset can be handed to DataLoader workers. Remote shards are the same class:
    :meth:`prefetch` (which the loader calls before a batch's samples are read, each under its
    own key) fetches the byte ranges of a batch's samples at once — neighbouring samples of one
    shard in one request, the requests concurrently — and a shard that this process's batches
    keep reading (a shard-local order) is streamed in chunks and read ahead in the background.
    """

    _where = "TarShards"
    _index_hint = "; slices and lists are not supported, index one sample at a time"

    #: Read by the loader when the shards grow (docs/growth.md): shards appended after the
    #: old ones keep every old sample; checked: a growth must be by whole shards.
    append_stable = True

    def __init__(
        self,
        urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        decode: Any = None,
        index_dir: str | os.PathLike[str] | None = None,
        allow_pickle: bool = False,
        allow_pipe: bool = False,
        rebuild_index: bool = False,
        storage_options: dict[str, Any] | None = None,
        cache: remote.Cache | None = None,
    ) -> None:
        for name, flag in (
            ("allow_pickle", allow_pickle),
            ("allow_pipe", allow_pipe),
            ("rebuild_index", rebuild_index),
        ):
            check_bool(flag, name, "TarShards")
        if index_dir is not None and not isinstance(index_dir, (str, os.PathLike)):
            raise TypeError(
                f"TarShards: index_dir must be a path or None, got {type(index_dir).__name__}"
            )
        self._decoder = _make_decoder(decode, allow_pickle)
        self._decode_spec = decode
        self._allow_pickle = allow_pickle
        self._shards: list[Shard] = _tarindex.index_shards(
            _paths.expand(urls, "TarShards", noun="shard", example="shards-{000..099}.tar"),
            index_dir=None if index_dir is None else os.fspath(index_dir),
            allow_pipe=allow_pipe,
            rebuild=rebuild_index,
            stores=remote.Stores(remote.check_options(storage_options, "TarShards")),
            cache=remote.check_cache(cache, "TarShards"),
        )
        self._starts = list(itertools.accumulate(self.shard_sizes, initial=0))
        self._local = threading.local()
        self._signatures: dict[int, str] = {}  # signature_of_first, by n

    # -- sizes and shard layout ------------------------------------------------

    def __len__(self) -> int:
        return self._starts[-1]

    @property
    def urls(self) -> list[str]:
        """Shard URLs, in shard order, as given (after brace expansion)."""
        return [s.url for s in self._shards]

    @property
    def shard_sizes(self) -> list[int]:
        """Number of samples in each shard, in shard order."""
        return [len(s.index.keys) for s in self._shards]

    @property
    def shard_starts(self) -> list[int]:
        """Global index of each shard's first sample (a shard's samples are contiguous)."""
        return self._starts[:-1]

    def shard_of(self, index: SupportsIndex) -> int:
        """The shard that holds sample ``index``."""
        i = self._check_index(index)
        return bisect.bisect_right(self._starts, i) - 1

    def key_of(self, index: SupportsIndex) -> str:
        """The ``__key__`` of sample ``index``, without reading the shard."""
        i = self._check_index(index)
        s = bisect.bisect_right(self._starts, i) - 1
        return self._shards[s].index.keys[i - self._starts[s]]

    # -- what decides the samples ---------------------------------------------

    @property
    def stream_signature(self) -> str:
        """What decides the samples, for a loader's state: the shards in order, each with its
        samples' keys and members' sizes, and the decoding. A checkpoint over other shards,
        or the same shards in another order (an unsorted glob), is refused at
        ``load_state_dict``. Where the shards live is not part of it (a copy elsewhere, local
        or remote, is the same data). :meth:`signature_of_first` of all samples."""
        return self.signature_of_first(len(self))

    def signature_of_first(self, n: int) -> str:
        """The :attr:`stream_signature` the first shards holding samples ``[0, n)`` had on
        their own: shards appended later keep it. ``n`` that cuts a shard is signed as the
        whole shards before it plus the count (a growth must append whole shards)."""
        if n not in self._signatures:
            spec = self._decode_spec
            decode = spec if isinstance(spec, str | None) else type(spec).__name__
            h = hashlib.blake2b(digest_size=8)
            h.update(repr((n, decode, self._allow_pickle)).encode())
            for start, shard in zip(self._starts, self._shards, strict=False):
                if start + len(shard.index.keys) > n:
                    break
                index = shard.index
                h.update("\0".join(index.keys).encode())
                h.update(np.ascontiguousarray(index.starts, dtype="<i8").tobytes())
                h.update(np.ascontiguousarray(index.sizes, dtype="<i8").tobytes())
            self._signatures[n] = f"TarShards(samples={n}, {h.hexdigest()})"
        return self._signatures[n]

    # -- reading ---------------------------------------------------------------

    def __getitem__(self, index: SupportsIndex) -> dict[str, Any]:
        return self._sample(self._check_index(index))

    def _byte_ranges(self, index: int) -> list[tuple[Any, int, int]]:
        """The bytes sample ``index`` reads of a remote shard: from its first member's header to
        its last member's end (``[]`` for a local shard)."""
        s = bisect.bisect_right(self._starts, index) - 1
        shard = self._shards[s]
        if shard.remote is None:
            return []
        idx, local = shard.index, index - self._starts[s]
        first, last = int(idx.starts[local]), int(idx.starts[local + 1]) - 1
        start = int(idx.offsets[first]) - _HEADER
        return [(shard.remote, start, int(idx.offsets[last] + idx.sizes[last]))]

    def _sample(self, i: int) -> dict[str, Any]:
        """Sample ``i``, its members read one by one (a remote shard's from memory when
        :meth:`prefetch` fetched them)."""
        s = bisect.bisect_right(self._starts, i) - 1
        shard = self._shards[s]
        idx = shard.index
        local = i - self._starts[s]
        read: Callable[[int, int], bytes] | None = None  # a range read (start, stop)
        if shard.remote is not None:
            read = shard.remote.read
        fd = self._open_files().get(shard) if read is None else -1
        key = idx.keys[local]
        sample: dict[str, Any] = {"__key__": key, "__url__": shard.url}
        if shard.local_path is not None:
            sample["__local_path__"] = shard.local_path
        for m in range(int(idx.starts[local]), int(idx.starts[local + 1])):
            ext = idx.exts[idx.member_ext[m]]
            offset, size = int(idx.offsets[m]), int(idx.sizes[m])
            # the header before the data too (offset >= 512), in one read when the data is small
            joined = size <= _JOINED_READ
            length = _HEADER + size if joined else _HEADER
            block = (
                _pread(fd, length, offset - _HEADER)
                if read is None
                else read(offset - _HEADER, offset - _HEADER + length)
            )
            header = block[:_HEADER]
            problem = _tarcheck.header_problem(header, key, ext, size)
            if problem is not None:
                raise ValueError(
                    f"shard {shard.url}: its index places member {key}.{ext} ({size} bytes) at "
                    f"byte {offset}, but the tar header there {problem}; the index does not "
                    "describe this shard (edited, or the shard rewritten with its old size and "
                    "mtime), so its bytes would be another member's. "
                    + _tarindex.rebuild_hint(shard.url)
                )
            if joined:
                data = block[_HEADER:]
            else:
                data = _pread(fd, size, offset) if read is None else read(offset, offset + size)
            if len(data) != size:
                raise ValueError(
                    f"shard {shard.url}: member {key}.{ext} should be {size} bytes at offset "
                    f"{offset}, but the file ends first; it changed after indexing. "
                    + _tarindex.rebuild_hint(shard.url)
                )
            sample[ext] = data
        if self._decoder is None:
            return sample
        return _decode(self._decoder, sample, shard, i)

    # -- open files, per process and thread -------------------------------------

    def _open_files(self) -> _OpenFiles:
        files: _OpenFiles | None = getattr(self._local, "files", None)
        if files is None:
            files = self._local.files = _OpenFiles()
        return files  # after a fork the floor's LRU drops the parent's (which keeps them open)

    def close(self) -> None:
        """Close the shard files this thread opened; later reads reopen them."""
        files: _OpenFiles | None = getattr(self._local, "files", None)
        if files is not None:
            files.close()
            self._local.files = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_local"]  # open files stay with their process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def __repr__(self) -> str:
        return (
            f"TarShards({len(self._shards)} shards, {len(self)} samples, "
            f"decode={self._decode_spec!r}, allow_pickle={self._allow_pickle})"
        )


class _OpenFiles:
    """The shard file descriptors one thread of one process keeps open: the floor's LRU, each
    shard checked unchanged when it is opened."""

    def __init__(self) -> None:
        self._lru: _handles.OpenFiles[int] = _handles.OpenFiles(close=os.close)

    def get(self, shard: Shard) -> int:
        return self._lru.get(shard.path, lambda: _open_shard(shard))

    def close(self) -> None:
        self._lru.close()

    def __del__(self) -> None:
        try:  # noqa: SIM105 - at interpreter exit this module's globals (contextlib) may be None
            self.close()
        except Exception:
            pass


def _open_shard(shard: Shard) -> int:
    try:
        fd = os.open(shard.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise ValueError(f"shard {shard.url}: cannot open {shard.path} ({exc})") from exc
    now = _handles.changed(fd, shard.index.size, shard.index.mtime_ns)
    if now is not None:
        os.close(fd)
        raise ValueError(
            f"shard {shard.url} changed after this dataset indexed it (size {shard.index.size}"
            f" → {now[0]} bytes); create the dataset again, and if the change is "
            "intended, " + _tarindex.rebuild_hint(shard.url)
        )
    return fd


#: Earlier releases returned this subclass for remote URLs; remote shards are read by
#: :class:`TarShards` itself now (its :meth:`~TarShards.prefetch`), and the name stays for code
#: that imports it.
RemoteTarShards = TarShards


def _pread(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows; fd is this thread's own
    return os.read(fd, size)  # pragma: no cover


# -- decoding -----------------------------------------------------------------


class _PickleRefused(Exception):
    def __init__(self, ext: str) -> None:
        super().__init__(ext)
        self.ext = ext


class _WeightsOnlyRefused(Exception):
    pass


def _decode(
    decoder: autodecode.Decoder, sample: dict[str, Any], shard: Shard, index: int
) -> dict[str, Any]:
    try:
        return decoder(sample)
    except autodecode.DecodingError as exc:
        member = f"{sample['__key__']}.{exc.k}"
        cause = exc.__cause__
        if isinstance(cause, _PickleRefused):
            raise ValueError(
                f"TarShards: member {member} in shard {shard.url} is a pickle ('.{cause.ext}'), "
                "and unpickling runs arbitrary code from the shard, so it is off by default; "
                "pass allow_pickle=True if you trust these shards, or decode=None for raw bytes"
            ) from None
        hint = (
            "; if you trust these shards, allow_pickle=True loads it with weights_only=False"
            if isinstance(cause, _WeightsOnlyRefused)
            else ""
        )
        raise ValueError(
            f"TarShards: could not decode member {member} of sample {index} in shard "
            f"{shard.url}: {cause!r}{hint}"
        ) from cause


def _extension(key: str) -> str:
    return re.sub(r".*[.]", "", key)  # as webdataset.autodecode.basichandlers does


def _safe_basichandlers(key: str, data: bytes) -> Any:
    """``webdataset.autodecode.basichandlers`` without code execution from the shard.

    Pickle members raise; ``.pth`` loads with ``torch.load(weights_only=True)``.
    """
    ext = _extension(key)
    if ext in PICKLE_EXTENSIONS:
        raise _PickleRefused(ext)
    if ext == "pth":
        try:
            return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except Exception as exc:
            raise _WeightsOnlyRefused(f"torch.load(weights_only=True) failed: {exc}") from exc
    return autodecode.basichandlers(key, data)


def _handler(item: object, allow_pickle: bool) -> _Handler:
    if isinstance(item, str):
        if item not in autodecode.imagespecs:
            raise ValueError(
                f"TarShards: decode={item!r} is not a webdataset image spec; "
                f"use one of {sorted(autodecode.imagespecs)}, a handler f(key, data), or None"
            )
        return autodecode.ImageHandler(item)
    if callable(item):
        if item is autodecode.basichandlers and not allow_pickle:
            return _safe_basichandlers
        return item
    raise TypeError(
        "TarShards: decode entries must be image specs (str) or handlers f(key, data), "
        f"got {type(item).__name__}"
    )


def _make_decoder(decode: Any, allow_pickle: bool) -> autodecode.Decoder | None:
    """A webdataset Decoder whose default handlers follow ``allow_pickle``."""
    if decode is None:
        return None
    post = [autodecode.basichandlers if allow_pickle else _safe_basichandlers]
    if isinstance(decode, autodecode.Decoder):
        return autodecode.Decoder(
            [_handler(h, allow_pickle) for h in decode.handlers],
            pre=[],
            post=[],
            only=decode.only,
            partial=decode.partial,
        )
    if isinstance(decode, (str, bytes)) or callable(decode):
        items: list[Any] = [decode]
    elif isinstance(decode, (list, tuple)):
        items = list(decode)
    else:
        raise TypeError(
            "TarShards: decode must be None, an image spec such as 'rgb', a handler "
            f"f(key, data), a list of those, or a webdataset Decoder; got {type(decode).__name__}"
        )
    return autodecode.Decoder([_handler(h, allow_pickle) for h in items], post=post)
