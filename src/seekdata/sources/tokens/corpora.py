"""Token corpora for language-model pretraining: fixed windows, and packed whole documents.

The public face is :mod:`seekdata.tokens`; its docstring is the user's guide to this module.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import warnings
from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np
import torch

from seekdata._core.checks import check_bool, check_int
from seekdata.sources import remote
from seekdata.sources.files import manifest as _manifest
from seekdata.sources.files import paths as _paths
from seekdata.sources.files.source import FileSource
from seekdata.sources.tokens import index as _index
from seekdata.sources.tokens import packing as _packing
from seekdata.sources.tokens.documents import FileDocuments
from seekdata.sources.tokens.files import TokenReader, check_dtype, describe, from_manifest

__all__ = [
    "IGNORE_INDEX",
    "PackedDocuments",
    "RemotePackedDocuments",
    "RemoteTokenWindows",
    "TokenWindows",
]

#: ``labels`` where no token is predicted: cross_entropy's and Hugging Face's ignore_index.
IGNORE_INDEX = -100

_Files = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
#: The columns of a tokens manifest a dataset reads at construction (dropped after).
_COLUMNS = ("stamp", "documents", "tail", "min_id", "max_id")
_Sample = dict[str, torch.Tensor]


def _int(value: Any, name: str, where: str, low: int, hint: str) -> int:
    value = check_int(value, name, where, fix=hint)  # the one int rule, then this bound
    if value < low:
        raise ValueError(f"{where}: {name} must be >= {low}; got {value}; {hint}")
    return int(value)


class _TokenCorpus(FileSource[_Sample]):
    """What both datasets share: the files, ``seq_len``, the vocabulary check, indexing; local
    or remote files alike (remote ones: :meth:`prefetch` fetches a batch's ranges at once)."""

    _where = "tokens"
    _index_hint = "; index one sequence at a time"
    #: Cut into shards (``shard_windows=``, ``sharded=True``): read shard by shard, streamed.
    _sharded = False

    @property
    def _streams(self) -> bool:  # type: ignore[override]
        """A sharded corpus read shard by shard streams its objects: read them ahead too."""
        return self._sharded

    def _byte_ranges(self, index: int) -> list[tuple[Any, int, int]]:
        if not self._reader.remote:  # nothing to fetch ahead (and no block packed for it)
            return []
        return [r for a, b in self._token_ranges(index) for r in self._reader.byte_ranges(a, b)]

    def _token_ranges(self, index: int) -> list[tuple[int, int]]:
        """The token ranges ``self[index]`` reads."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def _setup(
        self,
        files: _Files,
        seq_len: Any,
        dtype: Any,
        vocab_size: Any,
        storage_options: Any = None,
        cache: Any = None,
        windows: bool = False,
        *,
        index_dir: str | None = None,
        manifest: Any = None,
        eos_id: Any = None,
        packed: bool = False,
    ) -> None:
        """``windows``: items read ``seq_len + 1`` tokens of the corpus (packing pads instead).
        The files' folders' manifests (``manifest=``) describe them without a stat or a HEAD
        each; ``eos_id`` and ``packed`` (the packing counts for this ``seq_len``) only shape
        the ``seekdata index`` command a refusal names."""
        where = self._where
        self.seq_len = _int(seq_len, "seq_len", where, 1, "pass the tokens per sequence, e.g. 2048")
        self.dtype = check_dtype(dtype, where)
        self.vocab_size = None
        if vocab_size is not None:
            self.vocab_size = _int(vocab_size, "vocab_size", where, 1, "or leave it None")
        names = _paths.expand(files, where, noun="token file", example="train-{00..09}.bin")
        stores = remote.Stores(remote.check_options(storage_options, where))
        cache = remote.check_cache(cache, where)
        eos = eos_id if isinstance(eos_id, int) and not isinstance(eos_id, bool) else "E"
        fix_args = _index.index_flags(eos, self.dtype) + (
            f" --seq-len {self.seq_len}" if packed else ""
        )
        table = _manifest.for_files(
            names, "tokens", stores=stores, index_dir=index_dir,
            manifest=_manifest.check_choice(manifest, where), columns=_COLUMNS, where=where,
            pattern=os.fspath(files) if isinstance(files, str | os.PathLike) else None,
            fix_args=fix_args,
        )  # fmt: skip
        described: list[Any] = [None] * len(names)
        rest = list(range(len(names)))
        if table is not None:
            self._check_params(table, "dtype", self.dtype.str, "dtype")
            stamps = table.columns["stamp"]
            rest = np.flatnonzero(~table.covered()).tolist()
            for k in np.flatnonzero(table.covered()).tolist():  # nothing read: no stat, no HEAD
                described[k] = from_manifest(
                    names[k], self.dtype, int(table.size[k]), int(table.items[k]), stamps[k],
                    stores=stores, cache=cache,
                )  # fmt: skip
        others = [names[k] for k in rest]
        found = remote.map_objects(
            lambda n: describe(n, self.dtype, stores=stores, cache=cache), others, others
        )
        for k, f in zip(rest, found, strict=True):
            described[k] = f
        self._table = table
        self._reader = TokenReader(described, self.dtype, table)
        self._checked = self.vocab_size is None  # True: no read needs the vocabulary check
        if windows and self.seq_len >= self.num_tokens:  # before np.arange(seq_len + 1)
            raise ValueError(
                f"{where}: the files hold {self.num_tokens} tokens, fewer than seq_len + 1 = "
                f"{self.seq_len + 1} (a window and its next token); pass a smaller seq_len or "
                "more files"
            )
        # positions 0 .. L, shared by every item; no document is longer than the corpus
        self._arange = np.arange(min(self.seq_len, self.num_tokens) + 1, dtype=np.int64)

    def _check_params(self, table: _manifest.Table, key: str, value: Any, argument: str) -> None:
        """Refuse a manifest written for another ``params[key]`` than this dataset's."""
        for url, params in zip(table.manifests, table.params, strict=True):
            if params.get(key) != value:
                raise ValueError(
                    f"{self._where}: the manifest {url} indexed its files with {key} "
                    f"{params.get(key)!r}, but {argument}={value!r} here; pass the {argument} "
                    f"the files were indexed with, index them again with `seekdata index"
                    f"{table.fix_args} <your files>`, or pass manifest=False"
                )

    def _vocab_checked(self, files: list[int]) -> bool:
        """Whether the manifest rows of ``files`` (indices) show every id in
        ``[0, vocab_size)``; a file whose recorded ids leave it is refused, naming its first
        such token (the only case that reads the file)."""
        table, vocab = self._table, self.vocab_size
        if table is None or vocab is None:
            return False
        low, high = table.columns["min_id"], table.columns["max_id"]
        for k in files:
            _index.check_vocab(self._reader.files[k], int(low[k]), int(high[k]), self.dtype, vocab)
        return True

    def _token_id(self, value: Any, name: str) -> int:
        info = np.iinfo(self.dtype)
        where = self._where
        out = _int(value, name, where, 0, f"pass the {name} of your tokenizer (ids are >= 0)")
        if out > info.max:
            raise ValueError(
                f"{where}: {name} {out} cannot occur in {self.dtype} token files (at most "
                f"{info.max}); pass the {name} of your tokenizer, or dtype= the files' dtype"
            )
        if self.vocab_size is not None and out >= self.vocab_size:
            raise ValueError(
                f"{where}: {name} {out} is outside [0, vocab_size={self.vocab_size}); pass "
                f"the {name} of your tokenizer"
            )
        return out

    @property
    def files(self) -> list[str]:
        """The token files, as given (after brace expansion), in corpus order."""
        return [f.name for f in self._reader.files]

    @property
    def num_tokens(self) -> int:
        """Tokens in all files."""
        return self._reader.total

    def _read(self, start: int, stop: int) -> np.ndarray:
        tokens = self._reader.read(start, stop)
        if not self._checked:
            bad = _index.first_out_of_vocab(tokens, self.vocab_size or 0)
            if bad is not None:
                k = self._reader.file_at(start + bad)
                at = start + bad - self._reader.starts[k]
                name = self._reader.files[k].name
                raise _index.vocab_error(name, at, int(tokens[bad]), self.vocab_size or 0)
        return tokens

    def _signature(self, *fields: Any) -> str:
        # the public name: a remote dataset (RemoteTokenWindows) decides the same items
        spec = repr((self._where, self.seq_len, self.dtype.str, *fields))
        return hashlib.sha256(spec.encode()).hexdigest()[:16]


def _basename(name: str) -> str:
    """A token file's name without its folder, bucket or query: what names it in a signature."""
    return name.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


class TokenWindows(_TokenCorpus):
    """Fixed windows of a token corpus: item ``i`` is tokens ``[i·L, (i+1)·L + 1)``.

    Args:
        files: a path, a brace pattern (``"train-{00..09}.bin"``) or a list of paths: flat
            token files, read as their concatenation in this order.
        seq_len: ``L``, tokens per item.
        dtype: the files' integer dtype (``np.uint16`` for vocabularies up to 65,536).
        eos_id: the end-of-document token; given, items also hold ``position_ids`` restarting
            at 0 after each one, for document-masked attention.
        vocab_size: given, every token read is checked to be in ``[0, vocab_size)``.
        storage_options: for remote files (``s3://``, ``https://``, ``hf://``, ...), the
            back-end's options (docs/remote.md); None: its usual places (the environment).
        cache: for remote files, a :class:`seekdata.remote.Cache` on local disk, or None.
        manifest: None (the default): each folder's corpus manifest, written by ``seekdata
            index --eos-id``, gives the files' sizes without a stat or a HEAD each (and, with
            ``vocab_size``, their smallest and largest ids); False: none is read; a path or
            URL: that manifest, for every file (docs/scale.md).
        index_dir: where the manifests live when not beside the files (as ``seekdata index
            --index-dir``).
        shard_windows: given, the corpus is cut into shards of this many consecutive windows
            (the last one shorter), :attr:`shard_sizes`, so that ``order="shards"`` reads a
            few shards at a time, their windows shuffled among themselves: for files in object
            storage, streaming instead of a request per window. It changes no window's tokens;
            the signature records it, since it decides the shard-local order.

    An item is ``{"input_ids": the first L tokens, "labels": the last L (each input's next
    token)[, "position_ids"]}``, int64 tensors. ``len()`` is ``(tokens - 1) // L``: the tail
    that does not fill a window is never read. A window may cross files: it holds their tokens
    in order. Memory is O(files); an item is one memmap slice (two at a file boundary).
    """

    _where = "TokenWindows"
    #: Read by the loader when the corpus grows (docs/growth.md): files appended after the old
    #: ones keep every old window, which :meth:`signature_of_first` lets it check.
    append_stable = True

    def __init__(
        self,
        files: _Files,
        seq_len: int,
        *,
        dtype: Any = np.uint16,
        eos_id: int | None = None,
        vocab_size: int | None = None,
        storage_options: dict[str, Any] | None = None,
        cache: Any = None,
        shard_windows: int | None = None,
        manifest: str | os.PathLike[str] | bool | None = None,
        index_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.shard_windows = None
        if shard_windows is not None:  # checked before any file is read
            self.shard_windows = _int(
                shard_windows, "shard_windows", self._where, 1,
                "pass the windows per shard (a shard of tens of MB: e.g. 4096 windows of 2048 "
                "uint16 tokens is 16 MiB), or None for no shards",
            )  # fmt: skip
        self._sharded = self.shard_windows is not None
        self._setup(
            files, seq_len, dtype, vocab_size, storage_options, cache, windows=True,
            index_dir=None if index_dir is None else os.fspath(index_dir), manifest=manifest,
            eos_id=eos_id,
        )  # fmt: skip
        table = self._table
        if table is not None and self.vocab_size is not None and table.covered().all():
            low, high = np.array(table.columns["min_id"]), np.array(table.columns["max_id"])
            self._checked = bool((low >= 0).all() and (high < self.vocab_size).all())
        if table is not None:
            table.drop_columns()
        self.eos_id = None if eos_id is None else self._token_id(eos_id, "eos_id")
        self._len = (self.num_tokens - 1) // self.seq_len  # >= 1: _setup checked seq_len
        self._signatures: dict[int, str] = {}  # signature_of_first, by n

    def __len__(self) -> int:
        return self._len

    @property
    def shard_sizes(self) -> list[int]:
        """Windows per shard, with ``shard_windows`` (docs/remote.md: token windows in
        shard-local order). Without it the attribute is absent (``AttributeError``): the corpus
        is not sharded, ``order="shards"`` refuses it and a ``Mixture`` gives it the Feistel
        order, as before ``shard_windows`` existed."""
        return self.shard_sizes_of_first(self._len)

    def shard_sizes_of_first(self, n: int) -> list[int]:
        """The :attr:`shard_sizes` of windows ``[0, n)``: ``shard_windows`` windows a shard,
        the last one shorter. A corpus that grew by files appended after the old ones had
        these shards before it grew (its last one filled up since); read by growth."""
        if self.shard_windows is None:
            raise AttributeError(f"{self._where} has no shards: pass shard_windows= to cut some")
        full, rest = divmod(int(n), self.shard_windows)
        return [self.shard_windows] * full + ([rest] if rest else [])

    @property
    def stream_signature(self) -> str:
        """What decides the items, for a loader's or sampler's state: a checkpoint over other
        windows is refused at ``load_state_dict``. :meth:`signature_of_first` of all windows."""
        return self.signature_of_first(self._len)

    def signature_of_first(self, n: int) -> str:
        """The :attr:`stream_signature` of windows ``[0, n)``: what a corpus of only these
        windows had, so a corpus that grew by files appended after the old ones still has its
        old signature there. It covers seq_len, dtype, eos_id, ``n`` and, for each file that
        holds the windows' tokens (``[0, n·L + 1)``), in order, its name (without the folder or
        bucket: a copy elsewhere, local or remote, is the same corpus) and token count, so
        equal-size files in another order are another corpus. Nothing is read: a resume over
        remote files costs no request for it."""
        if n not in self._signatures:
            last = self._reader.file_at(n * self.seq_len)  # the last token window n - 1 reads
            files = [(_basename(f.name), f.tokens) for f in self._reader.files[: last + 1]]
            sharded = () if self.shard_windows is None else (("shard_windows", self.shard_windows),)
            digest = self._signature(self.eos_id, n, files, *sharded)
            self._signatures[n] = f"TokenWindows(seq_len={self.seq_len}, windows={n}, {digest})"
        return self._signatures[n]

    def _token_ranges(self, index: int) -> list[tuple[int, int]]:
        return [(index * self.seq_len, (index + 1) * self.seq_len + 1)]

    def __getitem__(self, index: SupportsIndex) -> _Sample:
        i = self._check_index(index)
        start, length = i * self.seq_len, self.seq_len
        tokens = self._read(start, start + length + 1).astype(np.int64)
        sample = {
            "input_ids": torch.from_numpy(tokens[:-1]),
            "labels": torch.from_numpy(tokens[1:].copy()),  # its own storage: safe to edit
        }
        if self.eos_id is not None:
            ids = tokens[:-1]
            first = np.zeros(length, dtype=np.int64)  # where each token's document starts
            after = np.flatnonzero(ids[:-1] == self.eos_id) + 1
            first[after] = after
            np.maximum.accumulate(first, out=first)
            sample["position_ids"] = torch.from_numpy(self._arange[:length] - first)
        return sample

    def __repr__(self) -> str:
        return (
            f"TokenWindows({len(self.files)} files, {self.num_tokens} tokens, "
            f"seq_len={self.seq_len}, {len(self)} windows)"
        )


class PackedDocuments(_TokenCorpus):
    """Whole documents packed into sequences of ``seq_len`` tokens, a pure function of the corpus.

    Args:
        files: a path, a brace pattern or a list of paths: flat token files, in corpus order.
        seq_len: ``L``, tokens per sequence.
        eos_id: the end-of-document token: a document is its tokens up to and including it
            (a file's tokens after its last one are a document too). Its positions come from
            the file's boundary index, built by one scan on first use and kept beside the file
            (or under ``index_dir``); ``seekdata index --eos-id`` builds it ahead of a job.
            None only with ``document_ends``.
        dtype: the files' integer dtype.
        pad_id: the token that fills the end of a sequence no document fits.
        vocab_size: given, token ids must be in ``[0, vocab_size)``: checked from the index's
            recorded smallest and largest id when the dataset is built, else as tokens are read.
        document_ends: instead of ``eos_id``: each document's end offset in the concatenation
            of the files (exclusive, increasing, the last one the number of tokens).
        index_dir: where the boundary indexes live; default: beside each file.
        rebuild_index: rebuild the index of a file that changed since it was indexed, instead
            of raising ``ValueError``.
        storage_options: for remote files, the back-end's options (docs/remote.md).
        cache: for remote files, a :class:`seekdata.remote.Cache` on local disk, or None.
        sharded: the packing's blocks of 65,536 documents are its shards
            (:attr:`shard_sizes`: sequences per block), so ``order="shards"`` reads a few
            blocks at a time, their sequences shuffled among themselves: for files in object
            storage, streaming instead of requests per sequence. It changes no sequence; the
            signature records it, since it decides the shard-local order.
        manifest: None (the default): each folder's corpus manifest (``seekdata index
            --eos-id E --seq-len L``) gives every file's documents, ids and digest, and the
            sequences per packing block, so nothing else is read at construction; False: every
            file's index is read (or built) instead; a path or URL: that manifest, for every
            file (docs/tokens.md, "Many files").

    Packing is lazy: a block is packed when one of its sequences is first read, from the
    indexes of the files it spans, read then (docs/tokens.md, "Packed lazily").

    An item is ``{"input_ids", "labels", "position_ids"}``, int64 tensors of ``L``: the
    documents one after another, then ``pad_id``. ``labels`` is each token's next token within
    its document, :data:`IGNORE_INDEX` at each document's last token and on padding;
    ``position_ids`` restart at 0 at each document (and once for the padding), as Hugging
    Face's ``DataCollatorWithFlattening`` and flash-attention's varlen kernels expect. A
    document is never split unless it is longer than ``L``: then it is cut into pieces of
    ``L`` tokens, each a sequence of its own (the last label of a piece is the document's next
    token), and the rest is packed like a document. Which documents share a sequence never
    depends on order, rank, workers or resume (docs/tokens.md: how it is packed).
    """

    _where = "PackedDocuments"
    #: Read by the loader when the corpus grows (docs/growth.md): appending documents re-packs
    #: the last packing block, so old sequence numbers would hold other documents; every
    #: growth is refused, with :attr:`grow_instead` in the message.
    append_stable = False
    grow_instead = (
        "appending documents re-packs the last block of 65,536 documents, so sequences saved "
        "in the checkpoint would hold other documents; pack the new files as a dataset of their "
        "own and add it as a new source (Mixture.changed(state, weights, add={name: "
        "PackedDocuments(new_files, ...)}), docs/mixtures.md), or start a new run on the grown "
        "corpus"
    )

    def __init__(
        self,
        files: _Files,
        seq_len: int,
        *,
        eos_id: int | None,
        dtype: Any = np.uint16,
        pad_id: int = 0,
        vocab_size: int | None = None,
        document_ends: Any = None,
        index_dir: str | os.PathLike[str] | None = None,
        rebuild_index: bool = False,
        storage_options: dict[str, Any] | None = None,
        cache: Any = None,
        sharded: bool = False,
        manifest: str | os.PathLike[str] | bool | None = None,
    ) -> None:
        where = self._where
        self.sharded = self._sharded = check_bool(sharded, "sharded", where)
        index_dir = None if index_dir is None else os.fspath(index_dir)
        self._setup(
            files, seq_len, dtype, vocab_size, storage_options, cache,
            index_dir=index_dir, manifest=manifest, eos_id=eos_id, packed=True,
        )  # fmt: skip
        if self.seq_len > _packing.MAX_SEQ_LEN:  # the packer counts documents per length
            raise ValueError(
                f"{where}: seq_len must be at most {_packing.MAX_SEQ_LEN:,} tokens (the packing "
                f"keeps a count per length up to seq_len); got {self.seq_len:,}; pass the "
                f"tokens per sequence your model takes, e.g. 2048"
            )
        self.pad_id = self._token_id(pad_id, "pad_id")
        check_bool(rebuild_index, "rebuild_index", where)
        if (eos_id is None) == (document_ends is None):
            raise ValueError(
                f"{where}: pass eos_id= (boundaries found by scanning the files) or "
                f"document_ends= (boundaries you give), exactly one of them; got "
                f"eos_id={eos_id!r} and document_ends={'None' if document_ends is None else '...'}"
            )
        self.eos_id = None if eos_id is None else self._token_id(eos_id, "eos_id")
        counts: list[int] | None = None
        origin = where
        if self.eos_id is None:
            self._documents: _packing.Bounds | FileDocuments = _packing.Bounds(
                self._given_bounds(document_ends)
            )
        else:
            self._documents, counts, origin = self._indexed(index_dir, rebuild_index)
        if self._table is not None:
            self._table.drop_columns()
        self._packing = _packing.LazyPacking(self._documents, self.seq_len, counts, origin)
        self._stream_signature: str | None = None

    def _indexed(
        self, index_dir: str | None, rebuild: bool
    ) -> tuple[FileDocuments, list[int] | None, str]:
        """The documents of the files, and the sequences of each packing block (None: counted
        lazily, a block at a time), and where those counts come from. A file a manifest
        describes gives its documents, tail, digest and ids from there (nothing read); another
        file's index is read (or built) now. The counts come from the manifest's ``packing``
        when the dataset is exactly its folder's files in its (name) order, else from the
        indexes: no boundary of the whole corpus is held either way."""
        assert self.eos_id is not None  # the caller checked
        files, eos_id, table = self._reader.files, self.eos_id, self._table
        n = len(files)
        counts, tails = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        digests = np.zeros((n, _manifest.DIGEST_BYTES), dtype=np.uint8)
        rest = list(range(n))
        if table is not None:
            self._check_params(table, "eos_id", eos_id, "eos_id")
            covered = np.flatnonzero(table.covered())
            columns = table.columns
            counts[covered] = [int(columns["documents"][k]) for k in covered.tolist()]
            tails[covered] = [bool(columns["tail"][k]) for k in covered.tolist()]
            digests[covered] = table.digests[covered]
            self._vocab_checked(covered.tolist())
            rest = np.flatnonzero(~table.covered()).tolist()

        def load(f: Any) -> Any:
            index = _index.load_or_build(
                f, self.dtype, eos_id, index_dir=index_dir, rebuild=rebuild
            )
            if self.vocab_size is not None:
                _index.check_vocab(f, index.min_id, index.max_id, self.dtype, self.vocab_size)
            return index

        indexes = remote.map_objects(load, [files[k] for k in rest], [files[k].name for k in rest])
        self._checked = True  # every file's ids were checked from its index or manifest row
        for k, ix in zip(rest, indexes, strict=True):
            counts[k], tails[k] = ix.documents, ix.tail
            digests[k] = np.frombuffer(bytes.fromhex(ix.digest), dtype=np.uint8)
        documents = FileDocuments(
            self._reader, eos_id, counts, tails, digests,
            table=table, index_dir=index_dir, rebuild=rebuild,
        )  # fmt: skip
        for k, ix in zip(rest, indexes, strict=True):
            documents.keep(k, ix)  # read already: a block that needs it does not read it again
        if table is None:  # every index is at hand: count now
            lengths = map(_index.document_lengths, indexes)
            return documents, _packing.block_counts(lengths, self.seq_len), self._where
        recorded = self._recorded_counts(table)
        if recorded is None:
            return documents, None, self._where
        return documents, recorded, f"{self._where}: the manifest {table.manifests[0]}"

    def _recorded_counts(self, table: _manifest.Table) -> list[int] | None:
        """The manifest's sequences per block for this ``seq_len``, when they are this
        dataset's: one manifest describes every file, and the files are all of its files, in
        its (name) order — the order its packing was counted in. Else None."""
        if len(table.manifests) != 1 or not table.covered().all():
            return None
        section = table.sections[0].get("packing", {})
        section = section.get(str(self.seq_len)) if isinstance(section, dict) else None
        if not isinstance(section, dict):
            return None
        if (section.get("version"), section.get("block")) != (
            _packing.PACKING_VERSION,
            _packing.BLOCK,
        ):
            return None
        names = [_basename(f.name).encode() for f in self._reader.files]
        if section.get("files") != len(names) or any(a >= b for a, b in itertools.pairwise(names)):
            return None
        return [int(c) for c in section.get("sequences", [])]

    def _given_bounds(self, document_ends: Any) -> np.ndarray:
        where, total = self._where, self.num_tokens
        ends = np.asarray(document_ends)
        if ends.ndim != 1 or ends.dtype.kind not in "ui" or len(ends) == 0:
            raise TypeError(
                f"{where}: document_ends must be a non-empty 1-d array of ints (each document's "
                f"end offset); got {ends.dtype} of shape {ends.shape}"
            )
        bounds = np.empty(len(ends) + 1, dtype=np.int64)
        bounds[0] = 0
        bounds[1:] = ends
        if int(bounds[-1]) != total or not bool((bounds[1:] > bounds[:-1]).all()):
            raise ValueError(
                f"{where}: document_ends must increase strictly from >= 1 to the files' "
                f"{total} tokens (the last document's end); got {len(ends)} offsets from "
                f"{int(ends[0])} to {int(ends[-1])}; pass np.cumsum(document_lengths)"
            )
        return bounds

    # -- sizes -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._packing)

    @property
    def num_documents(self) -> int:
        return self._documents.documents

    @property
    def utilization(self) -> float:
        """Document tokens ÷ sequence tokens: 1 minus the padding's share."""
        return self.num_tokens / (len(self) * self.seq_len)

    @property
    def nbytes(self) -> int:
        """Memory the dataset holds for its documents and packing (the token files aside): per
        file a few integers, per block its count, and the blocks packed in this process."""
        given = self._documents
        held = given.all.nbytes if isinstance(given, _packing.Bounds) else given.nbytes
        return held + self._packing.nbytes

    @property
    def shard_sizes(self) -> list[int]:
        """Sequences per packing block, with ``sharded=True`` (docs/tokens.md). Without it the
        attribute is absent (``AttributeError``): the corpus is not sharded, ``order="shards"``
        refuses it and a ``Mixture`` gives it the Feistel order, as before ``sharded``
        existed."""
        if not self.sharded:
            raise AttributeError(f"{self._where} has no shards: pass sharded=True")
        return self._packing.sequences_per_block

    @property
    def stream_signature(self) -> str:
        """What decides the sequences, for a loader's or sampler's state: a checkpoint over
        another packing, or over the corpus in another order, is refused at
        ``load_state_dict``. A digest of digests: of seq_len, dtype, eos_id, pad_id, the
        packing's version and block, the sequences, and each file's index digest in order (its
        token count, smallest and largest id and document ends), so it is built from the
        manifest without reading an index, and the same with or without one. With
        ``document_ends``, the digest of those boundaries stands for the files'."""
        if self._stream_signature is None:
            given = self._documents
            if isinstance(given, _packing.Bounds):  # given boundaries stand for the files'
                data = np.ascontiguousarray(given.all, dtype="<i8").tobytes()
                digests = np.frombuffer(bytes.fromhex(_manifest.digest_of(data)), dtype=np.uint8)
            else:
                digests = given.digests
            params = {
                "family": self._where, "seq_len": self.seq_len, "dtype": self.dtype.str,
                "eos_id": self.eos_id, "pad_id": self.pad_id, "sharded": self.sharded,
                "packing": _packing.PACKING_VERSION, "block": _packing.BLOCK,
            }  # fmt: skip
            digest = _manifest.signature(params, len(self), digests.reshape(-1, 16))
            self._stream_signature = (
                f"PackedDocuments(seq_len={self.seq_len}, sequences={len(self)}, {digest})"
            )
        return self._stream_signature

    def accepts_signature(self, signature: str, n: int) -> bool:
        """Whether ``signature`` is the form releases before the manifest wrote (a digest of
        every document boundary) of these sequences: a checkpoint they saved resumes. It reads
        every file's index once, a block at a time (warned: slow on a large corpus)."""
        if n != len(self) or _manifest.SIGNATURE_MARK in signature:
            return False
        if not signature.startswith(f"PackedDocuments(seq_len={self.seq_len}, sequences={n}, "):
            return False
        warnings.warn(
            f"PackedDocuments: the checkpoint's signature {signature!r} is of the form earlier "
            f"releases wrote (a digest of every document boundary), so checking it reads the "
            f"index of every one of the {len(self.files)} files once; the next checkpoint is "
            "signed from the files' digests and resumes without that",
            stacklevel=2,
        )
        return self.legacy_signature() == signature

    def legacy_signature(self) -> str:
        """:attr:`stream_signature` as releases before the manifest wrote it (a digest of every
        document boundary), to accept their checkpoints: it reads every file's index, a block
        at a time (slow on a large corpus; a resume does it once)."""
        h = hashlib.blake2b(digest_size=16)
        documents = self._documents
        for d0 in range(0, documents.documents, _packing.BLOCK):
            d1 = min(documents.documents, d0 + _packing.BLOCK)
            bounds = documents.bounds(d0, d1)
            h.update(np.ascontiguousarray(bounds[:-1] if d1 < documents.documents else bounds,
                                          dtype="<i8").data)  # fmt: skip
        digest = self._signature(
            _packing.PACKING_VERSION, _packing.BLOCK, self.pad_id, self.num_tokens,
            self.num_documents, h.hexdigest(), self._packing.sequences_per_block,
            *((("sharded", True),) if self.sharded else ()),
        )  # fmt: skip
        return f"PackedDocuments(seq_len={self.seq_len}, sequences={len(self)}, {digest})"

    def locate(self, index: SupportsIndex) -> list[tuple[int, int, int]]:
        """``(document, start, stop)`` of each document piece in sequence ``index``, in order:
        the document's number in the corpus and its tokens' positions in the concatenation."""
        return [
            (s.document, s.start, s.stop) for s in self._packing.segments(self._check_index(index))
        ]

    # -- reading ---------------------------------------------------------------------------

    def _token_ranges(self, index: int) -> list[tuple[int, int]]:
        out = []
        for s in self._packing.segments(index):
            stop = s.stop if s.stop == s.doc_stop else s.stop + 1  # a piece: one token more
            first = self._checked_start(s.doc_start)  # and the token before its document
            if first is not None and first == s.start:
                out.append((s.start - 1, stop))
                continue
            if first is not None:
                out.append((first - 1, first))
            out.append((s.start, stop))
        return out

    def _checked_start(self, first: int) -> int | None:
        """``first``, where a document starts, when the token before it must be eos_id (not at
        a file's start, and only with eos_id: given ``document_ends`` are the caller's)."""
        if self.eos_id is None or self._reader.starts[self._reader.file_at(first)] == first:
            return None
        return first

    def _is_tail(self, doc: int) -> bool:
        given = self._documents
        return isinstance(given, FileDocuments) and given.is_tail(doc)

    def __getitem__(self, index: SupportsIndex) -> _Sample:
        length = self.seq_len
        ids = np.full(length, self.pad_id, dtype=np.int64)
        labels = np.full(length, IGNORE_INDEX, dtype=np.int64)
        positions = np.empty(length, dtype=np.int64)
        at, ends = 0, 0  # ends: the documents here that end with eos_id
        segments = self._packing.segments(self._check_index(index))
        for doc, start, stop, doc_start, doc_stop in segments:
            n = stop - start
            whole = stop == doc_stop  # else a piece: its last label comes next
            end = stop if whole else stop + 1
            # the token before the document is eos_id: else the index starts it inside another
            # (an added boundary), and every sequence of it would hold the wrong tokens
            first = self._checked_start(doc_start)
            if first is not None and first == start:  # its first segment: one token more
                tokens = self._read(start - 1, end)
                before, tokens = tokens[0], tokens[1:]
            elif first is not None:  # a later piece: that one token on its own
                before, tokens = self._read(first - 1, first)[0], self._read(start, end)
            else:
                before, tokens = self.eos_id, self._read(start, end)
            if first is not None and before != self.eos_id:
                self._not_indexed(doc, first, "start")
            if whole and self.eos_id is not None and not self._is_tail(doc):
                if tokens[-1] != self.eos_id:
                    self._not_indexed(doc, stop - 1, "end")
                ends += 1
            ids[at : at + n] = tokens[:n]
            labels[at : at + n - 1] = tokens[1:n]
            if not whole:
                labels[at + n - 1] = tokens[n]
            positions[at : at + n] = self._arange[:n]
            at += n
        if self.eos_id is not None and np.count_nonzero(ids[:at] == self.eos_id) != ends:
            self._eos_inside(segments)  # one compare for the item: the index still holds
        pad = length - at  # the padding's positions restart once
        positions[at:] = self._arange[:pad] if pad < len(self._arange) else np.arange(pad)
        return {
            "input_ids": torch.from_numpy(ids),
            "labels": torch.from_numpy(labels),
            "position_ids": torch.from_numpy(positions),
        }

    def _eos_inside(self, segments: list[_packing.Segment]) -> None:
        """Raise naming the first eos_id before the last token of one of ``segments``."""
        for doc, start, stop, _, doc_stop in segments:
            last = stop - 1 if stop == doc_stop else stop  # a piece: all inside
            inner = np.flatnonzero(self._reader.read(start, last) == self.eos_id)
            if len(inner):
                self._not_indexed(doc, start + int(inner[0]), "inside")

    def _not_indexed(self, doc: int, at: int, what: str) -> None:
        """Raise: the token at position ``at`` of document ``doc`` is eos_id before its last
        token (``what="inside"``), its last token is not eos_id (``"end"``), or the token
        before its first one, at ``at``, is not eos_id (``"start"``)."""
        k = self._reader.file_at(at)
        f = self._reader.files[k]
        offset = at - self._reader.starts[k]
        assert self.eos_id is not None  # only called with one
        problem = {
            "inside": f"token {offset} of the file, inside document {doc}, is eos_id "
            f"{self.eos_id}, but its document index ends that document later",
            "end": f"its document index ends document {doc} at token {offset + 1}, but the "
            f"token before it is not eos_id {self.eos_id}",
            "start": f"its document index starts document {doc} at token {offset}, but the "
            f"token before it is not eos_id {self.eos_id}",
        }[what]
        raise ValueError(
            f"token file {f.name}: {problem}; the index does not describe this file (edited, or "
            f"the file rewritten with its old size and mtime), so labels would cross documents "
            f"and sequences hold the wrong tokens. "
            + _index.rescan_hint(f.name, self.eos_id, self.dtype)
        )

    def __repr__(self) -> str:
        return (
            f"PackedDocuments({len(self.files)} files, {self.num_documents} documents, "
            f"seq_len={self.seq_len}, {len(self)} sequences, "
            f"{100 * self.utilization:.2f}% tokens)"
        )


#: Earlier releases returned these subclasses for remote files; remote files are read by the
#: datasets themselves now (their :meth:`~TokenWindows.prefetch`), and the names stay for code
#: that imports them.
RemoteTokenWindows = TokenWindows
RemotePackedDocuments = PackedDocuments
