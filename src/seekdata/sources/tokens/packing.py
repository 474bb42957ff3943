"""Document packing as a pure function of the documents' lengths and ``seq_len``, packed lazily.

Which documents share a sequence never depends on the order they are read in, the rank, the
worker count or where a run resumed: it is computed from the corpus alone, so a sequence
number names the same tokens in every run, and resume stays the loader's O(1) cursor seek.

The documents are taken in corpus order, in blocks of :data:`BLOCK` consecutive documents.
In each block, a document of ``n`` tokens gives ``n // seq_len`` full pieces, each a sequence
on its own, and an item of ``n % seq_len`` tokens (none when 0); a document of at most
``seq_len`` tokens is one item. The items are packed by best-fit decreasing: from the longest
down, each goes into the open sequence with the least room that still fits it, else opens a
new sequence. Items of equal length are placed together, one Python step per (length, room)
rather than per document, so a block of 65,536 documents packs in ~15 ms. The block's
sequences are its full pieces in document order, then its packed sequences in the order they
were opened; a packed sequence holds its documents in corpus order.

A block's packing depends on its own documents only, so it is done lazily: what a dataset needs
up front is the number of sequences of each block (:func:`block_counts`, computed by
``seekdata index --eos-id E --seq-len N`` and kept in the corpus manifest, or by the dataset in
one pass, a block at a time, when there is none). That gives ``len``, the shard sizes and every
sequence's block; a block is packed when one of its sequences is first read
(:class:`LazyPacking`), from the boundaries of its 65,536 documents only, and kept in a small
per-process LRU (:data:`CACHED_BLOCKS`). Memory: O(blocks) at construction (8 bytes per
block), and per packed block its boundaries (8 bytes per document), its documents in packing
order (2 bytes each), where each sequence starts among them and its long documents' pieces.

The function ``seekdata index`` calls (its exact signature, for the command):

    block_counts(lengths: Iterable[np.ndarray], seq_len: int, jobs: int = 1) -> list[int]

``lengths`` yields the documents' token counts in corpus order, in arrays of any size (one per
file, in the manifest's name order: :func:`seekdata.sources.tokens.index.document_lengths`);
they are regrouped into blocks of :data:`BLOCK`. ``jobs > 1`` packs blocks in that many
processes. The result is the manifest's ``packing[str(seq_len)]["sequences"]``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import NamedTuple, Protocol

import numpy as np

from seekdata.sources.files import processes as _processes
from seekdata.sources.files.lazy import PerProcess

#: Documents per packing block. Part of the packing's definition: changing it changes which
#: documents share a sequence (and :data:`PACKING_VERSION`).
BLOCK = 1 << 16
#: Longest ``seq_len`` packed: the packer keeps O(seq_len) counts (2**24 = 16,777,216 tokens).
MAX_SEQ_LEN = 1 << 24
#: Bumped whenever the packing changes; it is part of ``PackedDocuments.stream_signature``.
PACKING_VERSION = 1
#: Packed blocks one process keeps (per dataset), ~0.7 MB each, so at most ~110 MB: a batch of
#: a shard-local order (``sharded=True``) reads one or two; a global shuffle reads a block per
#: item, so up to this many blocks (~10.5 million documents) each block is packed once per
#: process, as the eager packing of the release before did (which held 11 bytes per document
#: in every process), and beyond, most items pack theirs again (~15-35 ms, in the workers).
CACHED_BLOCKS = 160


def best_fit_decreasing(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, int]:
    """Pack items of ``lengths`` (each in ``[1, capacity]``) into bins of ``capacity``.

    Best-fit decreasing, item for item: from the longest item down (ties: lower index first),
    each goes into the open bin with the least room that still fits it, else into a new bin.
    Equal items are placed a group at a time: all open bins with the same room are equally
    tight, and best fit fills one of them with ``room // length`` items before the next, so a
    group is one step per (length, room), not per item. Returns each item's bin (bins numbered
    in the order they were opened) and the number of bins; deterministic.
    """
    if len(lengths) == 0:
        return np.zeros(0, dtype=np.uint16), 0
    # stable: ties by item index; numpy sorts 16-bit keys with a radix sort
    order = np.argsort((capacity - lengths).astype(_small(capacity)), kind="stable")
    counts = np.bincount(lengths, minlength=capacity + 1)
    rooms: dict[int, list[int]] = {}  # room left -> the open bins with that room
    open_rooms: list[int] = []  # the keys of ``rooms``, sorted
    bins = 0
    # each step fills bins ``taken`` with ``per_bin`` items each, the last with ``last``
    taken_all: list[int] = []
    step_bins, step_per_bin, step_last = [], [], []
    for length in np.flatnonzero(counts)[::-1].tolist():
        left = int(counts[length])
        while left:
            j = bisect.bisect_left(open_rooms, length)
            room = open_rooms[j] if j < len(open_rooms) else capacity
            per_bin = room // length
            n_bins = -(-left // per_bin)
            if j < len(open_rooms):  # the tightest fit: bins of this room, the newest first
                group = rooms[room]
                n_bins = min(n_bins, len(group))
                taken = group[len(group) - n_bins :]
                del group[len(group) - n_bins :]
                if not group:
                    del rooms[room]
                    del open_rooms[j]
            else:  # nothing fits: new bins
                taken = list(range(bins, bins + n_bins))
                bins += n_bins
            placed = min(left, n_bins * per_bin)
            last = placed - (n_bins - 1) * per_bin
            left -= placed
            taken_all += taken
            step_bins.append(n_bins)
            step_per_bin.append(per_bin)
            step_last.append(last)
            if last == per_bin:
                _reopen(rooms, open_rooms, taken, room - per_bin * length)
            else:
                _reopen(rooms, open_rooms, taken[:-1], room - per_bin * length)
                _reopen(rooms, open_rooms, taken[-1:], room - last * length)
    # items in ``order`` go to the steps' bins: per_bin to each, ``last`` to a step's last bin
    fill = np.repeat(np.asarray(step_per_bin), step_bins)
    fill[np.cumsum(step_bins) - 1] = step_last
    bin_of: np.ndarray = np.empty(len(lengths), dtype=_small(len(lengths)))
    bin_of[order] = np.repeat(np.asarray(taken_all, dtype=bin_of.dtype), fill)
    return bin_of, bins


def _reopen(
    rooms: dict[int, list[int]], open_rooms: list[int], taken: list[int], rest: int
) -> None:
    """File the bins ``taken`` under the room ``rest`` they have left (a full bin is closed)."""
    if not taken or not rest:
        return
    if rest in rooms:
        rooms[rest] += taken
    else:
        rooms[rest] = taken
        bisect.insort(open_rooms, rest)


class Segment(NamedTuple):
    """A run of one document's tokens inside a sequence (global token positions), and where
    that whole document starts and stops (a piece of a long one is shorter)."""

    document: int
    start: int
    stop: int
    doc_start: int
    doc_stop: int


class Block:
    """One packed block: its sequences → the document segments they hold."""

    __slots__ = ("bins", "bounds", "count", "d0", "full", "long_docs", "long_pieces", "perm",
                 "seq_len", "starts")  # fmt: skip

    def __init__(self, bounds: np.ndarray, d0: int, seq_len: int) -> None:
        """``bounds``: int64, the block's documents + 1 entries, strictly increasing token
        positions: document ``d0 + j`` is tokens ``[bounds[j], bounds[j + 1])``."""
        self.bounds, self.d0, self.seq_len = bounds, d0, seq_len
        n = np.diff(bounds)
        full = n // seq_len
        long = np.flatnonzero(full)
        self.long_docs = long  # offsets in the block of the documents longer than seq_len
        self.long_pieces = np.concatenate([[0], np.cumsum(full[long])])  # their pieces before
        items = np.flatnonzero(n - full * seq_len).astype(np.uint16)
        bin_of, self.bins = best_fit_decreasing(n[items] % seq_len, seq_len)
        self.perm = items[np.argsort(bin_of, kind="stable")]  # documents by sequence
        sizes = np.bincount(bin_of, minlength=self.bins)
        self.starts = np.concatenate([[0], np.cumsum(sizes)])  # each sequence in ``perm``
        self.full = int(self.long_pieces[-1])
        self.count = self.full + self.bins

    @property
    def nbytes(self) -> int:
        arrays = (self.bounds, self.long_docs, self.long_pieces, self.perm, self.starts)
        return sum(a.nbytes for a in arrays)

    def segments(self, j: int) -> list[Segment]:
        """The document segments of the block's sequence ``j``, in order."""
        bounds, seq_len = self.bounds, self.seq_len
        if j < self.full:  # a full piece of a long document
            k = int(np.searchsorted(self.long_pieces, j, side="right")) - 1
            at = int(self.long_docs[k])
            first, stop = int(bounds[at]), int(bounds[at + 1])
            start = first + (j - int(self.long_pieces[k])) * seq_len
            return [Segment(self.d0 + at, start, start + seq_len, first, stop)]
        k = j - self.full
        out = []
        for at in self.perm[int(self.starts[k]) : int(self.starts[k + 1])].tolist():
            first, stop = int(bounds[at]), int(bounds[at + 1])
            out.append(Segment(self.d0 + at, stop - (stop - first) % seq_len, stop, first, stop))
        return out


def count_block(lengths: np.ndarray, seq_len: int) -> int:
    """Sequences of one block of documents of these ``lengths``: its full pieces and bins."""
    lengths = np.asarray(lengths, dtype=np.int64)
    rest = lengths % seq_len
    return int((lengths // seq_len).sum()) + best_fit_decreasing(rest[rest > 0], seq_len)[1]


def blocks_of(lengths: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
    """The documents' lengths, given in arrays of any size, regrouped in blocks of
    :data:`BLOCK` (the last one shorter)."""
    parts: list[np.ndarray] = []
    held = 0
    for part in lengths:
        part = np.asarray(part, dtype=np.int64)
        while len(part):
            take = part[: BLOCK - held]
            parts.append(take)
            held += len(take)
            part = part[len(take) :]
            if held == BLOCK:
                yield np.concatenate(parts)
                parts, held = [], 0
    if held:
        yield np.concatenate(parts)


def block_counts(lengths: Iterable[np.ndarray], seq_len: int, jobs: int = 1) -> list[int]:
    """Sequences per packing block of the documents whose token counts ``lengths`` yields in
    corpus order (arrays of any size: one per file, say); the module docstring says who calls
    it. ``jobs > 1``: blocks are packed in that many processes, a few blocks ahead at most."""
    if jobs <= 1:
        return [count_block(block, seq_len) for block in blocks_of(lengths)]
    out: list[int] = []
    with _processes.pool(jobs) as pool:
        pending: list[Future[int]] = []
        for block in blocks_of(lengths):
            pending.append(pool.submit(count_block, block, seq_len))
            if len(pending) >= 2 * jobs:  # bounded: 10^9 documents never sit in memory at once
                out.append(pending.pop(0).result())
        out += [f.result() for f in pending]
    return out


class Documents(Protocol):
    """Where a packing's documents come from: their number and, a block at a time, their
    boundaries (read when that block is first packed)."""

    documents: int

    def bounds(self, d0: int, d1: int) -> np.ndarray:
        """int64, ``d1 - d0 + 1`` entries: where documents ``d0 .. d1 - 1`` start, then where
        the last one stops (token positions in the corpus)."""
        ...


class Bounds:
    """:class:`Documents` from boundaries in memory (``document_ends=``, tests)."""

    def __init__(self, bounds: np.ndarray) -> None:
        self.all = bounds
        self.documents = len(bounds) - 1

    def bounds(self, d0: int, d1: int) -> np.ndarray:
        return self.all[d0 : d1 + 1]


class LazyPacking:
    """Sequence ``i`` → the document segments it holds, packing a block when it is first read.

    ``counts`` are the sequences of each block (:func:`block_counts`), or None to count them
    here, one block at a time (reading every block's boundaries once). A block whose packing
    gives another count than ``counts`` says (``ValueError`` naming ``origin``: where the
    counts came from) that the documents are not the ones counted.
    """

    def __init__(
        self,
        documents: Documents,
        seq_len: int,
        counts: Iterable[int] | None = None,
        origin: str = "",
    ) -> None:
        self.source, self.seq_len, self.origin = documents, seq_len, origin
        if counts is None:
            counts = [self._pack(b).count for b in range(self.blocks)]
        self.counts = np.asarray(list(counts), dtype=np.int64)
        if len(self.counts) != self.blocks:
            raise ValueError(
                f"{origin}: {len(self.counts)} packing blocks are recorded, but the corpus's "
                f"{self.source.documents} documents make {self.blocks}; {REBUILD}"
            )
        self.seq_starts = np.concatenate([[0], np.cumsum(self.counts)])
        self._cache: PerProcess[Block] = PerProcess(CACHED_BLOCKS)

    @property
    def blocks(self) -> int:
        return -(-self.source.documents // BLOCK)

    def __len__(self) -> int:
        return int(self.seq_starts[-1])

    @property
    def nbytes(self) -> int:
        """Bytes held: the block counts (and at most :data:`CACHED_BLOCKS` packed blocks of
        ~0.7 MB each, in the processes that read)."""
        return self.counts.nbytes + self.seq_starts.nbytes

    @property
    def sequences_per_block(self) -> list[int]:
        return self.counts.tolist()

    def block_of(self, i: int) -> int:
        """The block that holds sequence ``i``."""
        return int(np.searchsorted(self.seq_starts, i, side="right")) - 1

    def segments(self, i: int) -> list[Segment]:
        """The document segments of sequence ``i`` (``0 <= i < len(self)``), in order."""
        b = self.block_of(i)
        return self.block(b).segments(i - int(self.seq_starts[b]))

    def block(self, b: int) -> Block:
        """Block ``b`` packed: from this process's LRU, else packed now."""
        return self._cache.get(b, lambda: self._checked(b))  # once, whatever the threads

    def _pack(self, b: int) -> Block:
        d0 = b * BLOCK
        d1 = min(self.source.documents, d0 + BLOCK)
        return Block(np.asarray(self.source.bounds(d0, d1), dtype=np.int64), d0, self.seq_len)

    def _checked(self, b: int) -> Block:
        block = self._pack(b)
        if block.count != self.counts[b]:
            raise ValueError(
                f"{self.origin}: packing block {b} of seq_len {self.seq_len} is recorded with "
                f"{int(self.counts[b])} sequences, but its documents pack into {block.count}; "
                f"the documents are not the ones counted. {REBUILD}"
            )
        return block


#: How to fix packing counts that do not match the documents.
REBUILD = "rebuild the manifest with `seekdata index --eos-id E --seq-len N <files>`"


def _small(n: int) -> type:
    """The smallest unsigned dtype that holds ``0 .. n - 1`` (16 bits sort by radix)."""
    return np.uint16 if n <= 1 << 16 else np.uint32 if n <= 1 << 32 else np.uint64
