"""Changes of a :class:`seekdata.Mixture` decided at resume, and what a state records of them.

A change decided at resume is a schedule entry whose start is the resume position: other
weights from there on, an added source (weight 0 before, so it starts at its beginning), a
removed one (weight 0 from there on, its count frozen) or a source that grew (a per-source
length table, :mod:`seekdata.sources.mixtures.growth`). :func:`changed` builds that mixture;
the history *is* the code that builds it, so any checkpoint, earlier or later, resumes into
one stream.

What a loader's state records (only for a mixture with changes; an unchanged mixture writes
what it wrote before): the *prefix signature* of the stream consumed (:func:`prefix_signature`:
the mixture truncated before the resume position), which a mixture that agrees on the past
accepts, and the *history* (:func:`history`): one short record per change that took effect,
to name the first differing change when a state is refused and for ``seekdata inspect``.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from seekdata._core import state as _state
from seekdata._core.checks import ArgumentError, check_counter, is_int, is_state_int
from seekdata._core.growth import check_append, refuse_unstable, signature_then
from seekdata._core.state import StateMismatchError
from seekdata.sources.mixtures import records as _records
from seekdata.sources.mixtures.schedule import integer_weights, parse_weights, source_index

#: ``seekdata.Mixture``, which imports this module (typed loosely to keep imports one-way)
Mixture = Any

WHERE = "Mixture.changed"
#: At most this many names (added, removed, grown) or weights in a history record; more: a count.
_LISTED = 8


class Change(NamedTuple):
    """A changed mixture's arguments: its sources (a dict by name, or a list), schedule and
    source ids, and the growths ``(source, at, n0, n1)`` it installs."""

    sources: Any
    schedule: list[tuple[int, Any]]
    source_ids: list[int]
    growths: list[tuple[int, int, int, int]]


#: Per mixture: its prefix signatures and history records, made once (a mixture's segments and
#: growths never change after it is built).
_MEMOS: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


def _memo(mix: Mixture) -> dict[Any, Any]:
    memo = _MEMOS.get(mix)
    if memo is None:
        memo = _MEMOS[mix] = {}
    return memo


class Gone:
    """A removed source that must not be read: ``length`` items to route and to sign, never
    fetched (:meth:`seekdata.Mixture.gone`)."""

    def __init__(self, length: int) -> None:
        self.length = check_counter(length, "length", "Mixture.gone")
        if self.length < 1:
            raise ValueError(
                "Mixture.gone: length must be the removed source's length (>= 1); got 0; pass "
                "len() of the source as the checkpoint saw it"
            )

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        raise RuntimeError(
            f"Mixture.gone: this source was removed and cannot be fetched (index {index}); it "
            f"is read only by positions before its removal: resume from a checkpoint saved "
            f"after it, or pass the real dataset"
        )


def stream_position(mix: Mixture, at: Any) -> int:
    """``at`` as the stream position of the change: an int (a multiple of the window), or a
    loader/sampler state's ``epoch * len + position`` rounded up to the window."""
    window = max(mix.window, 1)
    if isinstance(at, Mapping):
        at = _state.upgrade(at)  # a state of the first format: its records at the top level
        fields = {}
        for key in (_state.K_EPOCH, _state.K_POSITION):
            value = at.get(key)
            if not is_state_int(value) or value < 0:
                raise StateMismatchError(
                    f"{WHERE}: at must be a stream position or a loader/sampler state with "
                    f"{_state.K_EPOCH!r} and {_state.K_POSITION!r}; "
                    f"the state's {key!r} is {value!r}; pass loader.state_dict() as saved"
                )
            fields[key] = int(value)
        n = at.get(_state.K_N, mix.length)
        if n != mix.length:
            raise StateMismatchError(
                f"{WHERE}: the state was saved over a dataset of {n} positions per epoch but "
                f"this mixture has {mix.length}; call changed() on the mixture the checkpoint "
                f"was saved with"
            )
        stream = fields[_state.K_EPOCH] * mix.length + fields[_state.K_POSITION]
        saved = _records.saved_prefix(at)
        if at.get(_state.K_DATASET) not in (None, mix.stream_signature) and saved not in (
            None, prefix_signature(mix, stream)
        ):  # fmt: skip
            raise StateMismatchError(
                f"{WHERE}: the state was saved over another mixture ({at.get(_state.K_DATASET)}) "
                f"than this one ({mix.stream_signature}) before its position P={stream:,}; "
                f"call changed() on the mixture the checkpoint was saved with (with its history)"
            )
        return -(-stream // window) * window  # the rest of a started window keeps its weights
    if not is_int(at):
        raise ArgumentError(
            f"{WHERE}: at must be a stream position (int) or a loader/sampler state (dict); "
            f"got {type(at).__name__}; pass loader.state_dict() or epoch * len(mix) + position"
        )
    stream = check_counter(at, "at", WHERE)
    if stream % window:
        raise ValueError(
            f"{WHERE}: with window={window} a change must start at a multiple of {window}, so "
            f"that no window straddles it; got {stream}; use {stream - stream % window + window}"
        )
    return stream


def changed(
    mix: Mixture,
    at: Any,
    weights: Any,
    add: Mapping[str, Any] | Sequence[Any] | None,
    remove: Sequence[Any],
    grown: Mapping[Any, Any] | None,
    length: int | None,
) -> Change:
    """What the mixture ``mix`` until ``at``, changed from there on, is built from (see
    :meth:`Mixture.changed`, which builds it)."""
    if length is not None and length != mix.length:
        raise ValueError(
            f"{WHERE}: length= (a new mixture epoch length) is not supported; got {length} for "
            f"a mixture of length {mix.length}; leave it unset (the epoch length is kept)"
        )
    stream = stream_position(mix, at)
    if stream == 0:
        raise ValueError(
            f"{WHERE}: at is position 0, before anything was read: there is no history to "
            f"keep; build the new mixture directly with seekdata.Mixture(...)"
        )
    late = [g for g in mix.growths if g[1] >= stream]
    if late:
        raise ValueError(
            f"{WHERE}: this mixture already grows a source at P={late[0][1]:,}, at or after "
            f"the change at P={stream:,}; change from after P={late[-1][1]:,}, or build the "
            f"mixture without that growth"
        )
    k = len(mix.datasets)
    names = list(mix.names) if mix.names is not None else None
    new = _added(add, names)
    datasets = list(mix.datasets)
    if names is not None:
        names += [str(name) for name in new]
    datasets += list(new.values()) if isinstance(new, Mapping) else list(new)
    growths = list(mix.growths)
    for key, dataset in (grown or {}).items():
        s = source_index(key, mix.names, k, "grown")
        n0, n1 = mix.sizes[s], len(dataset)
        label = repr(mix.names[s]) if mix.names is not None else str(s)
        if isinstance(mix.datasets[s], Gone) or isinstance(dataset, Gone):
            raise ValueError(f"{WHERE}: source {label} was removed (Mixture.gone); it cannot grow")
        refuse_unstable(dataset, WHERE, f"grown source {label}")
        if n1 <= n0:
            raise ValueError(
                f"{WHERE}: grown source {label} must be longer than before (append-only); it "
                f"had {n0} items and has {n1}; a source that lost or rewrote items is another "
                f"source: add it under a new name and remove the old one"
            )
        # what the plain sampler checks too: whole shards; its first n0 items as they were
        check_append(dataset, n0, WHERE, f"grown source {label}",
                     signature_then(mix.datasets[s], None))  # fmt: skip
        datasets[s] = dataset
        growths.append((s, stream, n0, n1))
    fracs = parse_weights(weights, len(datasets), names, "weights", zero=True)
    if not any(fracs):
        raise ValueError(
            f"{WHERE}: weights gives every source weight 0 from P={stream:,}; give at least "
            f"one source a positive weight"
        )
    for key in remove:
        s = source_index(key, mix.names, k, "remove")
        if fracs[s]:
            label = repr(mix.names[s]) if mix.names is not None else str(s)
            raise ValueError(
                f"{WHERE}: source {label} is removed at P={stream:,}, but weights gives it "
                f"{fracs[s]}; give it 0 or leave it out of weights"
            )
    extra = [0] * (len(datasets) - k)
    schedule: list[tuple[int, Any]] = [
        (seg.start, [*seg.a, *extra]) for seg in mix.segments if seg.start < stream
    ]
    schedule.append((stream, integer_weights(fracs)))
    ids = list(mix.source_ids)
    ids += range(max(ids) + 1, max(ids) + 1 + len(extra))
    sources = dict(zip(names, datasets, strict=True)) if names is not None else datasets
    return Change(sources, schedule, ids, growths)


def _added(
    add: Mapping[str, Any] | Sequence[Any] | None, names: list[str] | None
) -> Mapping[str, Any] | Sequence[Any]:
    """The added sources: a dict by new name (named sources) or a list (unnamed ones)."""
    if add is None:
        return []
    if names is not None:
        if not isinstance(add, Mapping) or not all(isinstance(n, str) for n in add):
            raise TypeError(
                f"{WHERE}: the sources are named, so add must be a dict {{name: dataset}}; got "
                f"{add!r}; pass e.g. add={{'books': books}}"
            )
        taken = [name for name in add if name in names]
        if taken:
            raise ValueError(
                f"{WHERE}: add names {taken}, already sources of this mixture; give an added "
                f"source a new name (a source that grew: grown=)"
            )
        return add
    if isinstance(add, Mapping) or not isinstance(add, Sequence):
        raise TypeError(
            f"{WHERE}: the sources are unnamed, so add must be a list of datasets; got "
            f"{type(add).__name__}; pass e.g. add=[books], or name the sources with a dict"
        )
    return add


# --- what a state records -------------------------------------------------------------------


def _size_before(mix: Mixture, k: int, stream: int) -> int:
    """Source k's length for stream positions before ``stream``."""
    for s, at, n0, _ in mix.growths:
        if s == k and at >= stream:
            return n0
    return mix.sizes[k]


def _digest(spec: Any) -> str:
    return hashlib.sha256(repr(spec).encode()).hexdigest()[:16]


def prefix_signature(mix: Mixture, stream: int) -> str:
    """The signature of the stream on ``[0, stream)`` (rounded up to the window): the segments
    that start before it, the last one extended without end; the sources present in them with
    their lengths then; the growths before it. One segment without growth is signed exactly as
    a plain mixture of its present sources: a state saved before changes existed is its own
    prefix. Position 0 signs the first segment (a change at 0 is a new mixture)."""
    window = max(mix.window, 1)
    cut = max(-(-stream // window) * window, 1)
    segments = [seg for seg in mix.segments if seg.start < cut]
    growths = tuple(g for g in mix.growths if g[1] < cut)
    key = ("prefix", len(segments), len(growths))  # the same cut: the same signature
    memo = _memo(mix)
    if key not in memo:
        memo[key] = _prefix(mix, segments, growths, cut)
    return str(memo[key])


def _prefix(mix: Mixture, segments: list[Any], growths: tuple[Any, ...], cut: int) -> str:
    present = [k for k in range(len(mix.datasets)) if any(seg.a[k] for seg in segments)]
    sizes = [_size_before(mix, k, cut) for k in present]
    ids = [mix.source_ids[k] for k in present]
    tail = (mix.seed, mix.order, mix.window, mix.length, mix.reseed_global_rng)
    if len(segments) == 1 and not growths:
        spec: Any = (sizes, ids, [segments[0].a[k] for k in present], *tail)
    else:
        routes = tuple((seg.start, tuple(seg.a[k] for k in present)) for seg in segments)
        spec = (present, sizes, ids, routes, growths, *tail)
    return f"Mixture(K={len(present)}, length={mix.length}, seed={mix.seed}, {_digest(spec)})"


def _names(mix: Mixture, ks: Sequence[int]) -> list[Any] | int:
    if len(ks) > _LISTED:
        return len(ks)
    return [mix.names[k] if mix.names is not None else k for k in ks]


def history(mix: Mixture, stream: int | None = None) -> list[dict[str, Any]]:
    """One record per change (segment start > 0 or growth) at or before ``stream`` (all if
    None): where, what (added, removed, grown, the weights for K <= 8) and a digest of it."""
    memo = _memo(mix)
    if "history" not in memo:  # hashing K = 1,000 big weights per change: once
        memo["history"] = _history(mix)
    return [r for r in memo["history"] if stream is None or r["at"] <= stream]


def _history(mix: Mixture) -> list[dict[str, Any]]:
    segments = {seg.start: j for j, seg in enumerate(mix.segments) if seg.start}
    ats = sorted({*segments, *(g[1] for g in mix.growths)})
    out = []
    for at in ats:
        record: dict[str, Any] = {
            "at": at, "epoch": at // mix.length, "position": at % mix.length,
        }  # fmt: skip
        spec: list[Any] = [at]
        if at in segments:
            j = segments[at]
            seg, before = mix.segments[j], mix.segments[:j]
            present = [k for k, x in enumerate(seg.a) if x]
            added = [k for k in present if not any(b.a[k] for b in before)]
            removed = [k for k, x in enumerate(before[-1].a) if x and not seg.a[k]]
            if added:
                record["added"] = _names(mix, added)
            if removed:
                record["removed"] = _names(mix, removed)
            if len(seg.a) <= _LISTED:
                record["weights"] = [str(Fraction(x, sum(seg.a))) for x in seg.a]
            spec.append([(k, mix.source_ids[k], _size_before(mix, k, at + 1), seg.a[k])
                         for k in present])  # fmt: skip
        grew = [g for g in mix.growths if g[1] == at]
        if grew:
            if len(grew) > _LISTED:
                record["grown"] = len(grew)
            else:
                record["grown"] = {
                    str(mix.names[s] if mix.names is not None else s): [n0, n1]
                    for s, _, n0, n1 in grew
                }
            spec.append(grew)
        record["digest"] = _digest(spec)
        out.append(record)
    return out


def records(mix: Mixture, epoch: int, position: int, always: bool) -> dict[str, Any]:
    """The state keys of a mixture with changes (``always``: of any mixture) at the cursor."""
    if not always and len(mix.segments) == 1 and not mix.growths:
        return {}
    stream = epoch * mix.length + position
    done = history(mix, stream)
    return {
        _records.K_PREFIX: prefix_signature(mix, stream),
        **({_records.K_HISTORY: done} if done else {}),
    }
