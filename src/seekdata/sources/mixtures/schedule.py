"""The weights of a :class:`seekdata.Mixture` over its stream: one set, or a schedule of them.

A schedule is a list of segments ``[(0, w_0), (P_1, w_1), ...]`` over stream positions
``P = mixture_epoch * len(mixture) + p``. Segment j covers ``[P_j, P_{j+1})`` (the last one has
no end). Inside it, the weight tree of ``w_j`` (built over the sources whose weight is not 0)
routes the positions counted from the segment's start, ``t = P - P_j``, and source k continues
from ``base_j[k]``, the positions it received before ``P_j``: one O(K) walk of the previous
segment's tree per boundary, done once. So which source sits at ``P`` and its own stream
position cost a bisection over the starts and one tree walk, O(log S + log K), from O(S * K)
ints. Plain weights are the schedule of one segment, and give the same stream as before
schedules existed.
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections.abc import Mapping, Sequence, Sized
from fractions import Fraction
from typing import Any, NamedTuple

import torch.utils.data

from seekdata._core.checks import ArgumentError, check_counter, check_int, is_int
from seekdata.sources.mixtures.tree import Tree, up

WHERE = "Mixture"


def _fraction(value: Any, label: str, zero: bool) -> Fraction:
    """``value`` as an exact, finite Fraction: > 0, or >= 0 where ``zero`` (a schedule)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(
            f"{WHERE}: weights must be real numbers (int, float, Fraction); {label} is "
            f"{type(value).__name__} {value!r}; pass e.g. weights=[0.7, 0.3] or [7, 3]"
        )
    if isinstance(value, numbers.Rational):
        frac = Fraction(int(value.numerator), int(value.denominator))
    else:
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(
                f"{WHERE}: weights must be finite; {label} is {f}; pass a positive number"
            )
        frac = Fraction(str(f))  # the shortest decimal that reads back as f: 0.3 is 3/10
    if frac < 0 or (frac == 0 and not zero):
        fix = (
            "pass 0 to leave the source out of that segment"
            if zero
            else "drop the source instead of giving it weight 0, or use schedule= to leave it "
            "out for a while"
        )
        raise ValueError(
            f"{WHERE}: weights must be {'>= 0 in a schedule' if zero else '> 0'}; {label} is "
            f"{value!r}; {fix}"
        )
    return frac


def integer_weights(fracs: Sequence[Fraction]) -> list[int]:
    """The weights as coprime integers with the same ratios (exact); zeros stay 0."""
    denominator = math.lcm(*(f.denominator for f in fracs))
    ints = [int(f * denominator) for f in fracs]
    g = math.gcd(*ints)
    return [a // g for a in ints]


def source_index(key: Any, names: Sequence[str] | None, k: int, label: str) -> int:
    """The source a weight mapping's key names: a name (str) or an index (int)."""
    if isinstance(key, str):
        if names is None:
            raise ValueError(
                f"{WHERE}: {label} names source {key!r}, but the sources have no names; pass "
                f"the datasets as a dict {{name: dataset}}, or refer to sources by index"
            )
        if key not in names:
            raise ValueError(
                f"{WHERE}: {label} names source {key!r}, which is not one of {list(names)}; "
                f"use one of those names or an index"
            )
        return names.index(key)
    if not is_int(key):
        raise ArgumentError(
            f"{WHERE}: {label}: a source is a name (str) or an index (int); got "
            f"{type(key).__name__} {key!r}"
        )
    if not 0 <= key < k:
        raise ValueError(
            f"{WHERE}: {label}: source index must be in [0, {k}); got {key}; use an index "
            f"of the datasets list"
        )
    return int(key)


def parse_weights(
    spec: Any, k: int, names: Sequence[str] | None, label: str, zero: bool
) -> list[Fraction]:
    """One weight per source from a list (in the sources' order) or a mapping by name or
    index (a source the mapping leaves out gets 0 in a schedule; plain weights name all)."""
    if isinstance(spec, Mapping):
        out: list[Fraction | None] = [None] * k
        for key, value in spec.items():
            s = source_index(key, names, k, label)
            name = repr(names[s]) if names is not None else str(s)
            if out[s] is not None:
                raise ValueError(
                    f"{WHERE}: {label} gives source {name} two weights; give each source one"
                )
            out[s] = _fraction(value, f"{label}[{key!r}]", zero)
        missing = [s for s, w in enumerate(out) if w is None]
        if missing and not zero:
            which = [names[s] if names is not None else s for s in missing]
            raise ValueError(
                f"{WHERE}: weights must give every source a weight; {which} missing; add them, "
                f"or use schedule= where a source may be left out (weight 0)"
            )
        return [Fraction(0) if w is None else w for w in out]
    if not isinstance(spec, Sequence) or isinstance(spec, str | bytes):
        raise TypeError(
            f"{WHERE}: {label} must be a list of numbers or a dict by source; got {spec!r}; "
            f"pass e.g. [0.7, 0.3] or {{'web': 0.7, 'code': 0.3}}"
        )
    if len(spec) != k:
        raise ValueError(
            f"{WHERE}: one weight per dataset and at least one dataset; got {k} datasets and "
            f"{len(spec)} weights{'' if label == 'weights' else ' in ' + label}"
        )
    return [_fraction(w, f"weight {s}" if label == "weights" else f"{label}[{s}]", zero)
            for s, w in enumerate(spec)]  # fmt: skip


def parse_schedule(
    schedule: Any, k: int, names: Sequence[str] | None, window: int
) -> list[tuple[int, list[int]]]:
    """``[(start, weights), ...]`` checked: starts from 0, strictly increasing, multiples of
    ``window``; weights >= 0, some > 0 in every segment, every source > 0 in some segment."""
    if not isinstance(schedule, Sequence) or isinstance(schedule, str | bytes) or not schedule:
        raise TypeError(
            f"{WHERE}: schedule must be a non-empty list of (start position, weights); got "
            f"{schedule!r}; pass e.g. [(0, [0.7, 0.3]), (10**6, [0.5, 0.5])]"
        )
    out: list[tuple[int, list[int]]] = []
    for i, entry in enumerate(schedule):
        label = f"schedule[{i}]"
        if not isinstance(entry, Sequence) or isinstance(entry, str | bytes) or len(entry) != 2:
            raise TypeError(
                f"{WHERE}: {label} must be a pair (start position, weights); got {entry!r}; "
                f"pass e.g. (10**6, {{'web': 1, 'code': 1}})"
            )
        start = check_counter(entry[0], f"{label} start", WHERE)
        if i == 0 and start != 0:
            raise ValueError(
                f"{WHERE}: schedule[0] must start at position 0 (the weights from the stream's "
                f"start); got {start}; put the first weights at 0"
            )
        if out and start <= out[-1][0]:
            raise ValueError(
                f"{WHERE}: schedule starts must increase strictly; {label} starts at {start}, "
                f"after schedule[{i - 1}] at {out[-1][0]}; sort the entries and merge those "
                f"that start at the same position"
            )
        if window > 1 and start % window:
            raise ValueError(
                f"{WHERE}: with window={window} every schedule start must be a multiple of "
                f"{window}, so that no window straddles a change; {label} starts at {start}; "
                f"use {start - start % window} or {start - start % window + window}"
            )
        fracs = parse_weights(entry[1], k, names, label, zero=True)
        if not any(fracs):
            raise ValueError(
                f"{WHERE}: {label} gives every source weight 0; give at least one source a "
                f"positive weight, or drop the entry"
            )
        out.append((start, integer_weights(fracs)))
    for s in range(k):
        if all(a[s] == 0 for _, a in out):
            name = repr(names[s]) if names is not None else str(s)
            raise ValueError(
                f"{WHERE}: source {name} has weight 0 in every segment of the schedule, so it "
                f"is never read; give it a positive weight somewhere, or drop it"
            )
    return out


class Segment(NamedTuple):
    """One segment: where it starts, its integer weights (0: absent), the tree over the
    sources present (``leaves[j]`` is the source of the tree's leaf j), and each source's
    positions received before ``start``."""

    start: int
    a: list[int]
    tree: Tree
    leaves: list[int]
    base: list[int]


class Schedule:
    """Segments of weights over the stream; ``locate`` and ``counts`` in stream positions (a
    window's shuffle is applied before, by the mixture: starts are multiples of the window)."""

    def __init__(self, segments: list[tuple[int, list[int]]]) -> None:
        k = len(segments[0][1])
        self.segments: list[Segment] = []
        base = [0] * k
        for j, (start, a) in enumerate(segments):
            if j:  # what each source received in the previous segment, up to this start
                prev = self.segments[-1]
                base = self._add(prev, prev.tree.counts(start - prev.start))
            leaves = [s for s in range(k) if a[s]]
            self.segments.append(Segment(start, a, Tree([a[s] for s in leaves]), leaves, base))
        self.starts = [seg.start for seg in self.segments]

    @staticmethod
    def _add(seg: Segment, tree_counts: list[int]) -> list[int]:
        out = list(seg.base)
        for leaf, c in enumerate(tree_counts):
            out[seg.leaves[leaf]] += c
        return out

    def segment(self, position: int) -> Segment:
        """The segment that holds stream position ``position``."""
        if len(self.segments) == 1:
            return self.segments[0]
        return self.segments[bisect.bisect_right(self.starts, position) - 1]

    def locate(self, position: int) -> tuple[int, int]:
        """(source, positions the source received before ``position``): O(log S + log K)."""
        seg = self.segment(position)
        leaf, c = seg.tree.locate(position - seg.start)
        k = seg.leaves[leaf]
        return k, seg.base[k] + c

    def counts(self, position: int) -> list[int]:
        """Positions each source received before ``position``: O(log S + K)."""
        seg = self.segment(position)
        return self._add(seg, seg.tree.counts(position - seg.start))

    def bounds(self, window: int) -> list[float]:
        """Per segment: over every prefix of the segment (counted from its start), each
        source's count stays within this of its weight times the prefix. With a ``window`` of
        B positions, ``3 * bound_k + B * weight_k`` (exact at window ends)."""
        out = []
        for seg in self.segments:
            if window <= 1:
                out.append(max(seg.tree.bounds))
                continue
            total = sum(seg.a)
            out.append(max(
                up(3 * Fraction(b) + Fraction(window * seg.a[s], total))
                for b, s in zip(seg.tree.bounds, seg.leaves, strict=True)
            ))  # fmt: skip
        return out

    def spec(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """(start, integer weights) per segment: what decides the routing, for signatures."""
        return tuple((seg.start, tuple(seg.a)) for seg in self.segments)


def check_length(length: Any, where: str) -> int:
    """``length`` as an int >= 1: the rule and the message say the same thing."""
    fix = "pass the samples per mixture epoch, or leave it unset for the sources' total"
    return check_int(length, "length", where, 1, what="an int >= 1 or None", fix=fix)


def source_length(dataset: Any, k: int) -> int:
    where = "Mixture"
    if isinstance(dataset, torch.utils.data.IterableDataset) or not (
        isinstance(dataset, Sized) and hasattr(dataset, "__getitem__")
    ):
        raise TypeError(
            f"{where}: every source must be map-style (__len__ and __getitem__), because the "
            f"mixture reads sample i of a source directly; source {k} is "
            f"{type(dataset).__name__}; wrap shards in seekdata.wds.TarShards"
        )
    n = len(dataset)
    if n < 1:
        raise ValueError(
            f"{where}: every source must hold at least 1 sample; source {k} "
            f"({type(dataset).__name__}) has len 0; drop it or fix its path"
        )
    return n
