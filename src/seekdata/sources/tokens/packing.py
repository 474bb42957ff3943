"""Document packing as a pure function of the documents' lengths and ``seq_len``.

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

Memory, beside the document boundaries (8 bytes per document, the caller's ``bounds``): each
block keeps its documents in packing order as uint16 offsets (2 bytes per document) and where
each packed sequence starts among them (uint16); documents longer than ``seq_len`` are listed
with their cumulative piece counts (16 bytes per long document). Everything else is O(blocks).
"""

from __future__ import annotations

import bisect
import itertools
from typing import NamedTuple

import numpy as np

#: Documents per packing block. Part of the packing's definition: changing it changes which
#: documents share a sequence (and :data:`PACKING_VERSION`).
BLOCK = 1 << 16
#: Longest ``seq_len`` packed: the packer keeps O(seq_len) counts (2**24 = 16,777,216 tokens).
MAX_SEQ_LEN = 1 << 24
#: Bumped whenever the packing changes; it is part of ``PackedDocuments.stream_signature``.
PACKING_VERSION = 1


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
    """A run of one document's tokens inside a sequence (global token positions)."""

    document: int
    start: int
    stop: int


class Packing:
    """Sequence ``i`` → the document segments it holds; see the module docstring."""

    def __init__(self, bounds: np.ndarray, seq_len: int) -> None:
        """``bounds``: int64, documents + 1 entries, ``bounds[0] == 0``, strictly increasing:
        document ``d`` is tokens ``[bounds[d], bounds[d + 1])``."""
        self.bounds = bounds
        self.seq_len = seq_len
        documents = len(bounds) - 1
        perm, starts, long_docs, pieces = [], [], [], []
        self.seq_starts = [0]  # first sequence of each block, then the total
        self.full = []  # full-piece sequences at the head of each block
        self.perm_starts = [0]  # first entry of each block in ``perm``
        self.bin_starts = [0]  # first entry of each block in ``starts``
        self.long_starts = [0]  # first entry of each block in ``long_docs``
        for d0 in range(0, documents, BLOCK):
            d1 = min(documents, d0 + BLOCK)
            n = np.diff(bounds[d0 : d1 + 1])
            full = n // seq_len
            long = np.flatnonzero(full)
            long_docs.append(long + d0)
            pieces.append(full[long])
            items = np.flatnonzero(n - full * seq_len).astype(np.uint16)
            bin_of, bins = best_fit_decreasing(n[items] % seq_len, seq_len)
            perm.append(items[np.argsort(bin_of, kind="stable")])
            sizes = np.bincount(bin_of, minlength=bins)
            starts.append((np.cumsum(sizes) - sizes).astype(np.uint16))
            count = int(full.sum())
            self.full.append(count)
            self.seq_starts.append(self.seq_starts[-1] + count + bins)
            self.perm_starts.append(self.perm_starts[-1] + len(items))
            self.bin_starts.append(self.bin_starts[-1] + bins)
            self.long_starts.append(self.long_starts[-1] + len(long))
        self.perm = _join(perm, np.uint16)
        self.starts = _join(starts, np.uint16)
        self.long_docs = _join(long_docs, np.int64)
        self.long_pieces = np.concatenate([[0], np.cumsum(_join(pieces, np.int64))])

    def __len__(self) -> int:
        return self.seq_starts[-1]

    @property
    def nbytes(self) -> int:
        """Bytes this packing holds, beside ``bounds``."""
        arrays = (self.perm, self.starts, self.long_docs, self.long_pieces)
        return sum(a.nbytes for a in arrays) + 8 * 6 * len(self.full)

    @property
    def sequences_per_block(self) -> list[int]:
        return [b - a for a, b in itertools.pairwise(self.seq_starts)]

    def segments(self, i: int) -> list[Segment]:
        """The document segments of sequence ``i`` (``0 <= i < len(self)``), in order."""
        b = bisect.bisect_right(self.seq_starts, i) - 1
        j = i - self.seq_starts[b]
        bounds, seq_len = self.bounds, self.seq_len
        if j < self.full[b]:  # a full piece of a long document
            lo, hi = self.long_starts[b], self.long_starts[b + 1]
            g = int(self.long_pieces[lo]) + j
            k = lo + int(np.searchsorted(self.long_pieces[lo : hi + 1], g, side="right")) - 1
            doc = int(self.long_docs[k])
            start = int(bounds[doc]) + (g - int(self.long_pieces[k])) * seq_len
            return [Segment(doc, start, start + seq_len)]
        k = self.bin_starts[b] + j - self.full[b]
        first = self.perm_starts[b] + int(self.starts[k])
        last = (
            self.perm_starts[b] + int(self.starts[k + 1])
            if k + 1 < self.bin_starts[b + 1]
            else self.perm_starts[b + 1]
        )
        d0 = b * BLOCK
        out = []
        for offset in self.perm[first:last].tolist():
            doc = d0 + offset
            stop = int(bounds[doc + 1])
            out.append(Segment(doc, stop - (stop - int(bounds[doc])) % seq_len, stop))
        return out


def _small(n: int) -> type:
    """The smallest unsigned dtype that holds ``0 .. n - 1`` (16 bits sort by radix)."""
    return np.uint16 if n <= 1 << 16 else np.uint32 if n <= 1 << 32 else np.uint64


def _join(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
