"""Random access to webdataset tar shards.

The public face is :mod:`seekdata.wds`; its docstring is the user's guide to this module.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shlex
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, SupportsIndex

import numpy as np
import torch
from webdataset import autodecode

from seekdata._core.checks import check_bool
from seekdata.sources import remote
from seekdata.sources.files import handles as _handles
from seekdata.sources.files import indexes as _indexes
from seekdata.sources.files import lazy as _lazy
from seekdata.sources.files import manifest as _manifest
from seekdata.sources.files import paths as _paths
from seekdata.sources.files.source import FileSource
from seekdata.sources.wds import tarcheck as _tarcheck
from seekdata.sources.wds import tarindex as _tarindex
from seekdata.sources.wds import urls as _urls
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
        manifest: None (default): each folder's manifest, ``seekdata-manifest-tar.json``
            (under ``index_dir`` when given), which ``seekdata index`` writes: construction
            reads it (one request per folder) instead of every shard's index, and each
            shard's index is read when the shard is first read (docs/scale.md). False: none,
            every index read now. A path or URL: the manifest of every shard. Not used with
            ``rebuild_index``.

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
        manifest: str | os.PathLike[str] | bool | None = None,
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
        choice = _manifest.check_choice(manifest, "TarShards")
        self._decoder = _make_decoder(decode, allow_pickle)
        self._decode_spec = decode
        self._allow_pickle = allow_pickle
        self._allow_pipe = allow_pipe
        self._index_dir = None if index_dir is None else os.fspath(index_dir)
        self._stores = remote.Stores(remote.check_options(storage_options, "TarShards"))
        self._cache = remote.check_cache(cache, "TarShards")
        names = _paths.expand(urls, "TarShards", noun="shard", example="shards-{000..099}.tar")
        self._urls = names
        fix = "" if self._index_dir is None else f" --index-dir {shlex.quote(self._index_dir)}"
        # rebuild_index compares every shard with its index now: no manifest stands in for that
        table = None
        if not rebuild_index:
            table = _manifest.for_files(
                names, "tar", stores=self._stores, index_dir=self._index_dir, manifest=choice,
                columns=("first_key", "last_key"), where="TarShards",
                pattern=urls if isinstance(urls, str) else None, fix_args=fix,
            )  # fmt: skip
        if table is None:
            table = _manifest.Table.empty(len(names), "tar", fix)
        #: shards no manifest describes, indexed now as they always were (kept, and pickled)
        self._eager: dict[int, Shard] = {}
        bare = np.flatnonzero(~table.covered()).tolist()
        if bare:
            shards = _tarindex.index_shards(
                [names[k] for k in bare],
                index_dir=self._index_dir,
                allow_pipe=allow_pipe,
                rebuild=rebuild_index,
                stores=self._stores,
                cache=self._cache,
                check_keys=False,
            )
            for k, shard in zip(bare, shards, strict=True):
                self._eager[k] = shard
                entry = _tarindex.manifest_entry(shard)
                del entry["name"]
                table.fill(k, **entry)
        _tarindex.check_split(names, table.columns["first_key"], table.columns["last_key"])
        table.drop_columns()
        self._table = table
        self._starts = np.concatenate([[0], np.cumsum(table.items)]).astype(np.int64)
        #: the indexes of the shards a manifest describes, read by the first reader (per process)
        self._lazy: _lazy.PerProcess[Shard] = _lazy.PerProcess()
        self._local = threading.local()
        self._signatures: dict[int, str] = {}  # signature_of_first, by n

    # -- sizes and shard layout ------------------------------------------------

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def urls(self) -> list[str]:
        """Shard URLs, in shard order, as given (after brace expansion)."""
        return list(self._urls)

    @property
    def shard_sizes(self) -> list[int]:
        """Number of samples in each shard, in shard order."""
        return self._table.items.tolist()

    @property
    def shard_starts(self) -> list[int]:
        """Global index of each shard's first sample (a shard's samples are contiguous)."""
        return self._starts[:-1].tolist()

    def _shard_at(self, i: int) -> int:
        return int(np.searchsorted(self._starts, i, side="right")) - 1

    def shard_of(self, index: SupportsIndex) -> int:
        """The shard that holds sample ``index``."""
        return self._shard_at(self._check_index(index))

    def key_of(self, index: SupportsIndex) -> str:
        """The ``__key__`` of sample ``index``, without reading the shard (its index only:
        read now if this process has not read it yet)."""
        i = self._check_index(index)
        s = self._shard_at(i)
        return self._shard(s).index.keys[i - int(self._starts[s])]

    # -- the shards' own indexes, read when first needed -------------------------

    @property
    def _shards(self) -> _LazyShards:
        """Every shard (its URL, file and index), in order; an index is read when its shard
        is first asked for."""
        return _LazyShards(self)

    def _shard(self, k: int) -> Shard:
        """Shard ``k``: indexed at construction, or (a manifest described it) its index read
        now by the first thread of this process that needs it, and checked against the
        manifest's entry."""
        shard = self._eager.get(k)
        if shard is not None:
            return shard
        return self._lazy.get(k, lambda: self._load(k))

    def _load(self, k: int) -> Shard:
        url, table, index_dir = self._urls[k], self._table, self._index_dir
        if remote.is_remote(url):
            kept = _indexes.load(self._stores, url, _tarindex.INDEX_SUFFIX, index_dir)
            index = None if kept is None else _tarindex.ShardIndex.from_json(
                _indexes.parse_json(kept)
            )  # fmt: skip
            if index is None or index.etag is None:  # gone: built again, checked below
                shard = _tarindex.load_or_build_remote(
                    url, stores=self._stores, cache=self._cache, index_dir=index_dir,
                    rebuild=False, force=False,
                )  # fmt: skip
                index = shard.index
            else:
                file = remote.RemoteFile(
                    self._stores, url, size=index.size, etag=index.etag, cache=self._cache
                )
                shard = Shard(url, url, index, None, file)
        else:
            path = _urls.local_path(url, index_dir=index_dir, allow_pipe=self._allow_pipe)
            index = _tarindex.read_index(_tarindex.index_path(path, index_dir))
            if index is None:  # gone: built again (one pass over the shard), checked below
                index = _tarindex.load_or_build(url, path, index_dir=index_dir)
            shard = Shard(url, os.path.abspath(path), index, path)
        table.check_stamp(k, url, index.size, _tarindex.stamp(index))
        table.check_digest(k, url, _tarindex.digest(index))
        return shard

    # -- what decides the samples ---------------------------------------------

    @property
    def stream_signature(self) -> str:
        """What decides the samples, for a loader's state: the shards in order, each by the
        digest of its index (its samples' keys, members, offsets and sizes), and the decoding
        — a digest of the shards' digests, taken from the manifest when there is one, so the
        same shards have the same signature with or without it. A checkpoint over other
        shards, or the same shards in another order (an unsorted glob), is refused at
        ``load_state_dict``. Where the shards live is not part of it (a copy elsewhere, local
        or remote, is the same data). :meth:`signature_of_first` of all samples."""
        return self.signature_of_first(len(self))

    def _params(self) -> dict[str, Any]:
        spec = self._decode_spec
        decode = spec if isinstance(spec, str | None) else type(spec).__name__
        return {"decode": decode, "allow_pickle": self._allow_pickle}

    def signature_of_first(self, n: int) -> str:
        """The :attr:`stream_signature` the first shards holding samples ``[0, n)`` had on
        their own: shards appended later keep it. ``n`` that cuts a shard is signed as the
        whole shards before it plus the count (a growth must append whole shards)."""
        if n not in self._signatures:
            whole = int(np.searchsorted(self._starts[1:], n, side="right"))
            digests = self._table.digests[:whole]
            signed = _manifest.signature(self._params(), n, digests)
            self._signatures[n] = f"TarShards(samples={n}, {signed})"
        return self._signatures[n]

    def accepts_signature(self, signature: str, n: int) -> bool:
        """Whether ``signature`` is the form earlier releases wrote (a hash of every shard's
        keys and member sizes) of the first ``n`` samples: a checkpoint they saved resumes.
        It reads every shard's index once (warned: slow for many shards)."""
        if not signature.startswith(f"TarShards(samples={n}, ") or (
            _manifest.SIGNATURE_MARK in signature
        ):
            return False
        warnings.warn(
            f"TarShards: the checkpoint's signature {signature!r} is of the form earlier "
            "releases wrote (a hash of every shard's index), so checking it reads the index of "
            f"every one of the {len(self._urls)} shards once; the next checkpoint is signed "
            "from the shards' digests and resumes without that",
            stacklevel=2,
        )
        return self._older_signature(n) == signature

    def _older_signature(self, n: int) -> str:
        """The signature of the first ``n`` samples as earlier releases computed it."""
        spec = self._decode_spec
        decode = spec if isinstance(spec, str | None) else type(spec).__name__
        h = hashlib.blake2b(digest_size=8)
        h.update(repr((n, decode, self._allow_pickle)).encode())
        for k, start in enumerate(self._starts[:-1].tolist()):
            if start + int(self._table.items[k]) > n:
                break
            index = self._shard(k).index
            h.update("\0".join(index.keys).encode())
            h.update(np.ascontiguousarray(index.starts, dtype="<i8").tobytes())
            h.update(np.ascontiguousarray(index.sizes, dtype="<i8").tobytes())
        return f"TarShards(samples={n}, {h.hexdigest()})"

    # -- reading ---------------------------------------------------------------

    def __getitem__(self, index: SupportsIndex) -> dict[str, Any]:
        return self._sample(self._check_index(index))

    def _byte_ranges(self, index: int) -> list[tuple[Any, int, int]]:
        """The bytes sample ``index`` reads of a remote shard: from its first member's header to
        its last member's end (``[]`` for a local shard)."""
        s = self._shard_at(index)
        if not remote.is_remote(self._urls[s]):
            return []
        shard = self._shard(s)
        idx, local = shard.index, index - int(self._starts[s])
        first, last = int(idx.starts[local]), int(idx.starts[local + 1]) - 1
        start = int(idx.offsets[first]) - _HEADER
        return [(shard.remote, start, int(idx.offsets[last] + idx.sizes[last]))]

    def _sample(self, i: int) -> dict[str, Any]:
        """Sample ``i``, its members read one by one (a remote shard's from memory when
        :meth:`prefetch` fetched them)."""
        s = self._shard_at(i)
        shard = self._shard(s)
        idx = shard.index
        local = i - int(self._starts[s])
        read: Callable[[int, int], bytes] | None = None  # a range read (start, stop)
        if shard.remote is not None:
            read = shard.remote.read
        fd = self._open_files().get(shard, lambda: self._open(s, shard)) if read is None else -1
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

    def _open(self, k: int, shard: Shard) -> int:
        return _open_shard(shard, self._table, k)

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
            f"TarShards({len(self._urls)} shards, {len(self)} samples, "
            f"decode={self._decode_spec!r}, allow_pickle={self._allow_pickle})"
        )


class _LazyShards(Sequence[Shard]):
    """A dataset's shards in order, each index read when that shard is first asked for."""

    def __init__(self, ds: TarShards) -> None:
        self._ds = ds

    def __len__(self) -> int:
        return len(self._ds._urls)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self._ds._shard(j) for j in range(len(self))[k]]
        return self._ds._shard(range(len(self))[k])


class _OpenFiles:
    """The shard file descriptors one thread of one process keeps open: the floor's LRU, each
    shard checked unchanged when it is opened."""

    def __init__(self) -> None:
        self._lru: _handles.OpenFiles[int] = _handles.OpenFiles(close=os.close)

    def get(self, shard: Shard, opener: Callable[[], int]) -> int:
        return self._lru.get(shard.path, opener)

    def close(self) -> None:
        self._lru.close()

    def __del__(self) -> None:
        try:  # noqa: SIM105 - at interpreter exit this module's globals (contextlib) may be None
            self.close()
        except Exception:
            pass


def _open_shard(shard: Shard, table: _manifest.Table, k: int) -> int:
    """The shard's file, open: checked against its manifest entry (when one describes it)
    and its index, by the open's ``fstat`` — no request more."""
    try:
        fd = os.open(shard.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        listed = table.manifest_of(k)
        if listed is not None:
            raise _manifest.stale_error(
                shard.url, listed, f"it cannot be opened ({exc}): it is missing or moved",
                table.fix_args,
            ) from exc  # fmt: skip
        raise ValueError(f"shard {shard.url}: cannot open {shard.path} ({exc})") from exc
    try:
        st = os.fstat(fd)
        table.check_stamp(k, shard.url, st.st_size, _manifest.local_stamp(st))
    except BaseException:
        os.close(fd)
        raise
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
