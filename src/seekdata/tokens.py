"""Token corpora for language-model pretraining: fixed windows, and packed whole documents.

Token files are flat arrays of token ids (nanoGPT's ``train.bin``, OLMo's ``.npy`` arrays, raw
``uint16``/``uint32``), read through ``np.memmap`` (remote files: by byte range,
:mod:`seekdata.sources.remote`); several files are read as their
concatenation (:mod:`seekdata._tokenfiles`). Both datasets are ordinary map-style datasets
whose every item is a pure function of the corpus and the arguments, so seekdata's sampler,
loader, elastic resume, :class:`seekdata.Mixture`, skips and ``seekdata verify`` apply
unchanged, and the checkpoint stays the loader's cursor.

- :class:`TokenWindows` cuts the concatenation into fixed windows (nanoGPT / OLMo style).
- :class:`PackedDocuments` packs whole documents into sequences (:mod:`seekdata._packing`),
  with labels that never cross a document and ``position_ids`` restarting at each one.
  Document boundaries come from a one-time scan kept beside each file
  (:mod:`seekdata._tokenindex`, ``seekdata index --eos-id``), or from ``document_ends``.
  See docs/tokens.md.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import os
from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np
import torch
from torch.utils.data import Dataset

from seekdata import _packing, _tokenindex
from seekdata._keys import is_int
from seekdata._tokenfiles import TokenReader, check_dtype, describe, expand_files
from seekdata.sources import remote

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
_Sample = dict[str, torch.Tensor]


def _int(value: Any, name: str, where: str, low: int, hint: str) -> int:
    if not is_int(value):  # the int rule of seekdata._keys.check_int, with this hint
        raise TypeError(f"{where}: {name} must be an int; got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{where}: {name} must be >= {low}; got {value}; {hint}")
    return int(value)


class _TokenCorpus(Dataset[_Sample]):
    """What both datasets share: the files, ``seq_len``, the vocabulary check, indexing."""

    _where = "tokens"

    def __new__(cls, files: Any = None, *args: Any, **kwargs: Any) -> _TokenCorpus:
        remote_cls = _REMOTE.get(cls)
        if remote_cls is not None and files is not None:
            names = expand_files(files, cls._where)
            if any(map(remote.is_remote, names)):
                cls = remote_cls  # the same dataset, reading a batch at once
        return super().__new__(cls)

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
    ) -> None:
        where = self._where
        self.seq_len = _int(seq_len, "seq_len", where, 1, "pass the tokens per sequence, e.g. 2048")
        self.dtype = check_dtype(dtype, where)
        self.vocab_size = None
        if vocab_size is not None:
            self.vocab_size = _int(vocab_size, "vocab_size", where, 1, "or leave it None")
        names = expand_files(files, where)
        stores = remote.Stores(remote.check_options(storage_options, where))
        cache = remote.check_cache(cache, where)
        described = remote.map_objects(
            lambda n: describe(n, self.dtype, stores=stores, cache=cache), names, names
        )
        self._reader = TokenReader(described, self.dtype)
        self._checked = self.vocab_size is None  # True: no read needs the vocabulary check
        self._arange = np.arange(self.seq_len + 1, dtype=np.int64)

    def _token_id(self, value: Any, name: str) -> int:
        info = np.iinfo(self.dtype)
        where = self._where
        out = _int(value, name, where, int(info.min), f"pass the {name} of your tokenizer")
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

    def _check_index(self, index: SupportsIndex) -> int:
        try:
            i = operator.index(index)
        except TypeError as exc:
            raise TypeError(
                f"{self._where}: index must be an int, got {type(index).__name__}; "
                "index one sequence at a time"
            ) from exc
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self._where}: index must be in [0, {n}), got {i}")
        return i + n if i < 0 else i

    def _read(self, start: int, stop: int) -> np.ndarray:
        tokens = self._reader.read(start, stop)
        if not self._checked:
            bad = _tokenindex.first_out_of_vocab(tokens, self.vocab_size or 0)
            if bad is not None:
                k = self._reader.file_at(start + bad)
                at = start + bad - self._reader.starts[k]
                name = self._reader.files[k].name
                raise _tokenindex.vocab_error(name, at, int(tokens[bad]), self.vocab_size or 0)
        return tokens

    def _signature(self, *fields: Any) -> str:
        # the public name: a remote dataset (RemoteTokenWindows) decides the same items
        spec = repr((self._where, self.seq_len, self.dtype.str, self.num_tokens, *fields))
        return hashlib.sha256(spec.encode()).hexdigest()[:16]


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

    An item is ``{"input_ids": the first L tokens, "labels": the last L (each input's next
    token)[, "position_ids"]}``, int64 tensors. ``len()`` is ``(tokens - 1) // L``: the tail
    that does not fill a window is never read. A window may cross files: it holds their tokens
    in order. Memory is O(files); an item is one memmap slice (two at a file boundary).
    """

    _where = "TokenWindows"

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
    ) -> None:
        self._setup(files, seq_len, dtype, vocab_size, storage_options, cache)
        self.eos_id = None if eos_id is None else self._token_id(eos_id, "eos_id")
        self._len = (self.num_tokens - 1) // self.seq_len
        if self._len < 1:
            raise ValueError(
                f"TokenWindows: the files hold {self.num_tokens} tokens, fewer than seq_len + 1"
                f" = {self.seq_len + 1} (a window and its next token); pass a smaller seq_len "
                "or more files"
            )

    def __len__(self) -> int:
        return self._len

    @property
    def shard_sizes(self) -> list[int]:
        """Windows that start in each file, in file order: the shards of ``order="shards"``,
        which reads a few files at a time while the epoch is still shuffled (for files in
        object storage, a few streamed at a time instead of a request per window)."""
        starts = self._reader.starts
        firsts = [min(self._len, -(-at // self.seq_len)) for at in starts[:-1]] + [self._len]
        return [b - a for a, b in itertools.pairwise(firsts)]

    @property
    def stream_signature(self) -> str:
        """What decides the items (seq_len, dtype, eos_id, the number of tokens), for a loader's
        state: a checkpoint over other windows is refused at ``load_state_dict``."""
        digest = self._signature(self.eos_id)
        return f"TokenWindows(seq_len={self.seq_len}, windows={self._len}, {digest})"

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
    ) -> None:
        where = self._where
        self._setup(files, seq_len, dtype, vocab_size, storage_options, cache)
        self.pad_id = self._token_id(pad_id, "pad_id")
        if not isinstance(rebuild_index, bool):
            raise TypeError(f"{where}: rebuild_index must be a bool, got {rebuild_index!r}")
        if (eos_id is None) == (document_ends is None):
            raise ValueError(
                f"{where}: pass eos_id= (boundaries found by scanning the files) or "
                f"document_ends= (boundaries you give), exactly one of them; got "
                f"eos_id={eos_id!r} and document_ends={'None' if document_ends is None else '...'}"
            )
        self.eos_id = None if eos_id is None else self._token_id(eos_id, "eos_id")
        self._tails: frozenset[int] = frozenset()  # documents that end a file without eos
        if self.eos_id is None:
            bounds = self._given_bounds(document_ends)
        else:
            bounds = self._indexed_bounds(None if index_dir is None else os.fspath(index_dir),
                                          rebuild_index)  # fmt: skip
        self._bounds = bounds
        self._packing = _packing.Packing(bounds, self.seq_len)

    def _indexed_bounds(self, index_dir: str | None, rebuild: bool) -> np.ndarray:
        assert self.eos_id is not None  # the caller checked
        files, starts = self._reader.files, self._reader.starts
        eos_id = self.eos_id

        def load(f: Any) -> Any:
            index = _tokenindex.load_or_build(
                f, self.dtype, eos_id, index_dir=index_dir, rebuild=rebuild
            )
            if self.vocab_size is not None:
                _tokenindex.check_vocab(f, index, self.dtype, self.vocab_size)
            return index

        indexes = remote.map_objects(load, files, [f.name for f in files])
        self._checked = True  # every file's ids were checked from its index
        # a file's tokens after its last eos (or a file without one) are a document too
        tails = [
            len(ix.ends) == 0 or ix.ends[-1] != f.tokens
            for f, ix in zip(files, indexes, strict=True)
        ]
        counts = [len(ix.ends) + tail for ix, tail in zip(indexes, tails, strict=True)]
        bounds = np.empty(sum(counts) + 1, dtype=np.int64)
        bounds[0], at, tail_docs = 0, 1, []
        for k, (ix, tail) in enumerate(zip(indexes, tails, strict=True)):
            np.add(ix.ends, starts[k], out=bounds[at : at + len(ix.ends)])
            at += len(ix.ends)
            if tail:
                bounds[at] = starts[k + 1]
                tail_docs.append(at - 1)
                at += 1
        self._tails = frozenset(tail_docs)
        return bounds

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
        return len(self._bounds) - 1

    @property
    def utilization(self) -> float:
        """Document tokens ÷ sequence tokens: 1 minus the padding's share."""
        return self.num_tokens / (len(self) * self.seq_len)

    @property
    def nbytes(self) -> int:
        """Memory the dataset holds for its documents and packing (the token files aside)."""
        return self._bounds.nbytes + self._packing.nbytes

    @property
    def stream_signature(self) -> str:
        """What decides the sequences (seq_len, dtype, pad_id, the numbers of tokens and
        documents, the packing's version and its sequences per block), for a loader's state: a
        checkpoint over another packing is refused at ``load_state_dict``. How the corpus is
        cut into files, and where the boundaries came from, are not part of it."""
        digest = self._signature(
            _packing.PACKING_VERSION, _packing.BLOCK, self.pad_id, self.num_documents,
            self._packing.sequences_per_block,
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
            whole = s.stop == self._bounds[s.document + 1]  # else a piece: one token more
            out.append((s.start, s.stop if whole else s.stop + 1))
        return out

    def __getitem__(self, index: SupportsIndex) -> _Sample:
        length = self.seq_len
        ids = np.full(length, self.pad_id, dtype=np.int64)
        labels = np.full(length, IGNORE_INDEX, dtype=np.int64)
        positions = np.empty(length, dtype=np.int64)
        at = 0
        for doc, start, stop in self._packing.segments(self._check_index(index)):
            n = stop - start
            whole = stop == self._bounds[doc + 1]  # else a piece: its last label comes next
            tokens = self._read(start, stop if whole else stop + 1)
            if whole and self.eos_id is not None and tokens[-1] != self.eos_id:
                self._not_eos(doc, stop)
            ids[at : at + n] = tokens[:n]
            labels[at : at + n - 1] = tokens[1:n]
            if not whole:
                labels[at + n - 1] = tokens[n]
            positions[at : at + n] = self._arange[:n]
            at += n
        positions[at:] = self._arange[: length - at]
        return {
            "input_ids": torch.from_numpy(ids),
            "labels": torch.from_numpy(labels),
            "position_ids": torch.from_numpy(positions),
        }

    def _not_eos(self, doc: int, stop: int) -> None:
        if doc in self._tails:
            return
        k = self._reader.file_at(stop - 1)
        f = self._reader.files[k]
        assert self.eos_id is not None  # only called with one
        raise ValueError(
            f"token file {f.name}: its document index ends document {doc} at token "
            f"{stop - self._reader.starts[k]}, but the token before it is not eos_id "
            f"{self.eos_id}; the index does not describe this file (edited, or the file "
            f"rewritten with its old size and mtime). "
            + _tokenindex.rebuild_hint(f.name, self.eos_id, self.dtype)
        )

    def __repr__(self) -> str:
        return (
            f"PackedDocuments({len(self.files)} files, {self.num_documents} documents, "
            f"seq_len={self.seq_len}, {len(self)} sequences, "
            f"{100 * self.utilization:.2f}% tokens)"
        )


class _RemoteBatches:
    """For datasets over remote token files: ``__getitems__`` fetches the byte ranges of all
    of a batch's items at once (neighbours in one request, the requests concurrently) before
    reading them, so the loader reads a batch with one call."""

    def __getitems__(self: Any, indices: Sequence[int]) -> list[_Sample]:
        wanted = []
        for index in indices:
            for start, stop in self._token_ranges(self._check_index(index)):
                wanted += self._reader.byte_ranges(start, stop)
        remote.prefetch(wanted)
        return [self[i] for i in indices]


class RemoteTokenWindows(_RemoteBatches, TokenWindows):
    """What :class:`TokenWindows` is over remote files: the same items, a batch read at once."""


class RemotePackedDocuments(_RemoteBatches, PackedDocuments):
    """What :class:`PackedDocuments` is over remote files: the same items, a batch read at once."""


_REMOTE: dict[type, type] = {
    TokenWindows: RemoteTokenWindows,
    PackedDocuments: RemotePackedDocuments,
}
