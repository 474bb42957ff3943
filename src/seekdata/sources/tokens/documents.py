"""The documents of a token corpus from its files' boundary indexes, each read when first needed.

:class:`seekdata.tokens.PackedDocuments` needs up front only each file's number of documents
(from the corpus manifest, or from the indexes it reads when there is none); a file's index —
8 bytes per document — is read by the process that first packs a block holding one of its
documents, once (the floor's per-process table, :class:`seekdata.sources.files.lazy.PerProcess`:
thread-safe, emptied after a fork). A rank that reads 1 % of the blocks reads about 1 % of the
indexes; construction holds O(files) integers, never a boundary per document.

A lazily read index must be the one the dataset was built from: its document count and digest
must equal what was recorded then (the manifest's, or the construction's own read), else the
index was rebuilt since and its documents may be other ones: a ``ValueError`` naming the file
and the fix, never other sequences.
"""

from __future__ import annotations

import numpy as np

from seekdata.sources.files import manifest as _manifest
from seekdata.sources.files.lazy import PerProcess
from seekdata.sources.tokens import index as _index
from seekdata.sources.tokens.files import TokenReader


class FileDocuments:
    """:class:`seekdata.sources.tokens.packing.Documents` over token files; picklable.

    ``counts``/``tails``/``digests``: per file, its documents, whether it ends inside one, and
    its index's digest (``(files, 16)`` uint8), as recorded (manifest or construction).
    ``table``: the files' manifest rows, or None. A file a manifest describes has its index
    read as kept, never built (a missing one is refused), and checked against the manifest's
    stamp and digest; another file's is loaded or built as at construction.
    """

    def __init__(
        self,
        reader: TokenReader,
        eos_id: int,
        counts: np.ndarray,
        tails: np.ndarray,
        digests: np.ndarray,
        *,
        table: _manifest.Table | None = None,
        index_dir: str | None = None,
        rebuild: bool = False,
    ) -> None:
        self.reader, self.eos_id = reader, eos_id
        self.doc_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self.documents = int(self.doc_starts[-1])
        self.tails = np.asarray(tails, dtype=bool)
        self.digests = digests
        self.table, self.index_dir, self.rebuild = table, index_dir, rebuild
        self._indexes: PerProcess[_index.DocIndex] = PerProcess()

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

    def keep(self, k: int, index: _index.DocIndex) -> None:
        """Keep file ``k``'s index, read at construction (no manifest described the file)."""
        self._indexes.put(k, index)

    def bounds(self, d0: int, d1: int) -> np.ndarray:
        """Where documents ``d0 .. d1 - 1`` start, then where the last one stops."""
        out = np.empty(d1 - d0 + 1, dtype=np.int64)
        starts, doc_starts = self.reader.starts, self.doc_starts
        k = self.file_of(d0)
        first = d0 - int(doc_starts[k])  # d0's number in its file
        before = _index.file_ends(self.index(k), first - 1, first) if first else [0]
        out[0] = starts[k] + int(before[0])
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
        dtype, eos_id, table = self.reader.dtype, self.eos_id, self.table
        where = None if table is None else table.manifest_of(k)
        if where is None:
            ix = _index.load_or_build(
                f, dtype, eos_id, index_dir=self.index_dir, rebuild=self.rebuild
            )
        else:
            assert table is not None  # where came from it
            found = _index.kept(f, dtype, eos_id, self.index_dir)
            if found is None:
                raise _manifest.stale_error(
                    f.name, where, "its document index is missing (or is for another eos_id or "
                    "dtype)", table.fix_args,
                )  # fmt: skip
            ix = found
            table.check_stamp(k, f.name, ix.size, _index.stamp(ix))
            table.check_digest(k, f.name, ix.digest)
        count = int(self.doc_starts[k + 1] - self.doc_starts[k])
        digest = bytes(self.digests[k]).hex()
        if (ix.documents, ix.digest) != (count, digest):
            fix = _index.rebuild_hint(f.name, eos_id, dtype)
            raise ValueError(
                f"token file {f.name}: its document index now holds {ix.documents} documents "
                f"(digest {ix.digest}), not the {count} it held when this dataset was built "
                f"(digest {digest}): the file or its index changed since; build the dataset "
                f"again (if the change is intended, {fix})"
            )
        return ix
