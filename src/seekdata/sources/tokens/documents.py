"""The documents of a token corpus from its files' boundary indexes, each read when first needed.

:class:`seekdata.tokens.PackedDocuments` needs up front only each file's number of documents
(from the corpus manifest, or from the indexes it reads when there is none); a file's index —
8 bytes per document — is read by the process that first packs a block holding one of its
documents, once (the floor's per-process LRU, :class:`seekdata.sources.files.handles.OpenFiles`:
thread-safe, emptied after a fork). A rank that reads 1 % of the blocks reads about 1 % of the
indexes; construction holds O(files) integers, never a boundary per document.

A lazily read index must be the one the dataset was built from: its document count and digest
must equal what was recorded then (the manifest's, or the construction's own read), else the
index was rebuilt since and its documents may be other ones: a ``ValueError`` naming the file
and the fix, never other sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from seekdata.sources.files import handles as _handles
from seekdata.sources.tokens import index as _index
from seekdata.sources.tokens.files import TokenReader


class FileDocuments:
    """:class:`seekdata.sources.tokens.packing.Documents` over token files; picklable.

    ``counts``/``tails``/``digests``: per file, its documents, whether it ends inside one, and
    its index's digest, as recorded (manifest or construction). ``manifest``: the manifest's
    URL when they come from one (its indexes are then read as kept, never built: a missing one
    is refused), else None (an index is loaded or built as at construction).
    """

    def __init__(
        self,
        reader: TokenReader,
        eos_id: int,
        counts: np.ndarray,
        tails: np.ndarray,
        digests: Sequence[str],
        *,
        index_dir: str | None,
        rebuild: bool = False,
        manifest: str | None = None,
    ) -> None:
        self.reader, self.eos_id = reader, eos_id
        self.doc_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self.documents = int(self.doc_starts[-1])
        self.tails = np.asarray(tails, dtype=bool)
        self.digests = np.asarray(digests, dtype="S32")  # hex, 32 bytes a file
        self.index_dir, self.rebuild, self.manifest = index_dir, rebuild, manifest
        self._indexes: _handles.OpenFiles[_index.DocIndex] = _handles.OpenFiles()

    @property
    def nbytes(self) -> int:
        return self.doc_starts.nbytes + self.tails.nbytes + self.digests.nbytes

    def file_of(self, doc: int) -> int:
        """The file that holds document ``doc``."""
        return int(np.searchsorted(self.doc_starts, doc, side="right")) - 1

    def is_tail(self, doc: int) -> bool:
        """Document ``doc`` ends its file without eos_id."""
        k = self.file_of(doc)
        return bool(self.tails[k]) and doc == int(self.doc_starts[k + 1]) - 1

    def index(self, k: int) -> _index.DocIndex:
        """File ``k``'s boundary index: read once per process, checked against the record."""
        return self._indexes.get(k, lambda: self._load(k))

    def bounds(self, d0: int, d1: int) -> np.ndarray:
        """Where documents ``d0 .. d1 - 1`` start, then where the last one stops."""
        out = np.empty(d1 - d0 + 1, dtype=np.int64)
        starts, doc_starts = self.reader.starts, self.doc_starts
        k = self.file_of(d0)
        first = d0 - int(doc_starts[k])  # d0's number in its file
        out[0] = starts[k] + (
            int(_index.file_ends(self.index(k), first - 1, first)[0]) if first else 0
        )
        at = 1
        while at < len(out):
            lo = max(d0, int(doc_starts[k])) - int(doc_starts[k])
            hi = min(d1, int(doc_starts[k + 1])) - int(doc_starts[k])
            ends = _index.file_ends(self.index(k), lo, hi)
            np.add(ends, starts[k], out=out[at : at + len(ends)])
            at, k = at + len(ends), k + 1
        return out

    def _load(self, k: int) -> _index.DocIndex:
        f = self.reader.files[k]
        dtype, eos_id = self.reader.dtype, self.eos_id
        if self.manifest is None:
            ix = _index.load_or_build(
                f, dtype, eos_id, index_dir=self.index_dir, rebuild=self.rebuild
            )
            fix = _index.rebuild_hint(f.name, eos_id, dtype).replace("rebuild its", "rebuild the")
            how = f"since this dataset was built; build the dataset again (or {fix})"
        else:
            ix = _index.kept(f, dtype, eos_id, self.index_dir)
            how = (
                f"since the manifest {self.manifest} was written; rerun `seekdata index --eos-id "
                f"{eos_id} <your files>` to bring it up to date, or pass manifest=False"
            )
            if ix is None:
                raise ValueError(
                    f"token file {f.name}: its document index is missing (or for another eos id "
                    f"or dtype), though the manifest {self.manifest} lists the file; rerun "
                    f"`seekdata index --eos-id {eos_id} <your files>`, or pass manifest=False"
                )
            if (ix.size, ix.mtime_ns, ix.etag) != (f.size, f.mtime_ns, f.etag):
                raise ValueError(
                    f"token file {f.name}: its document index was built for the file as it was "
                    f"at another time (size {ix.size}, stamp {ix.etag or ix.mtime_ns}) than "
                    f"the manifest records (size {f.size}, stamp {f.etag or f.mtime_ns}), so "
                    f"the file or its index changed {how}"
                )
        count, digest = int(self.doc_starts[k + 1] - self.doc_starts[k]), self.digests[k].decode()
        if (ix.documents, ix.digest) != (count, digest):
            raise ValueError(
                f"token file {f.name}: its document index now holds {ix.documents} documents "
                f"(digest {ix.digest}), not the {count} recorded (digest {digest}): the file or "
                f"its index changed {how}"
            )
        return ix

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_indexes"]  # indexes stay with their process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._indexes = _handles.OpenFiles()
