"""The rules of resuming a valid state on a loader of another shape.

A checkpoint that passed :func:`seekdata._core.state.check_state` is well formed; whether it
resumes *here* depends on how this loader differs from the one that saved it: another world
size or batch geometry (the global batch must stay, and epochs must be cut alike:
:func:`global_batch`, :func:`check_geometry`), a sampler that cannot seek on another world
size (:func:`check_replay_world`), an iterable dataset's per-rank stream
(:func:`check_iterable`), a dataset that grew (:func:`check_grown`, :func:`growth_at`) and a
mixture that changed (:func:`check_mixture`, :func:`describe_change`). The engines supply
the values; these decide and word the errors (:class:`~seekdata.StateMismatchError`).

What identifies the data is checked before what shapes the batches (:func:`check_data`, then
the batch fields and these rules): a checkpoint of another dataset is refused as such."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seekdata._core import partition as _partition
from seekdata._core import source as _source
from seekdata._core.checks import is_state_int
from seekdata._core.growth import Growth, check_growths, refuse_unstable, signature_then
from seekdata._core.state import (
    BATCH_FIELDS,
    DATA_FIELDS,
    K_BATCH_SIZE,
    K_DATASET,
    K_ENGINE,
    K_EPOCH,
    K_EXHAUSTED,
    K_GROWN,
    K_HISTORY,
    K_KIND,
    K_N,
    K_ORIGIN,
    K_POSITION,
    K_PREFIX,
    K_SOURCES,
    K_WORLD_SIZE,
    StateMismatchError,
    check_dataset,
    check_fields,
    check_form,
    warn_caller,
)

__all__ = [
    "check_data",
    "check_geometry",
    "check_grown",
    "check_iterable",
    "check_mixture",
    "check_replay_world",
    "check_stream",
    "describe_change",
    "global_batch",
    "growth_at",
    "stream_records",
]


def check_data(
    state: Any,
    expected: Mapping[str, Any],
    dataset: Any,
    n_then: int | None,
    where: str,
    strict: bool,
) -> dict[str, Any]:
    """The first checks of a resume: ``state`` is well formed (every key of ``expected``
    included), then what identifies the data, first to last: the kind of state and the
    dataset's length, the dataset's own stream (:func:`check_stream`: its signature, a
    mixture's sources and changes), then the order and randomness over it (seed, order,
    shuffle, sample seed). Returns the fields of ``expected`` still to compare, those that say
    how the data is cut into batches (:data:`seekdata._core.state.BATCH_FIELDS`): the caller
    compares them after its own rules of another shape (:func:`global_batch`). ``n_then``: as
    for :func:`check_stream`."""
    check_form(state, expected, where=where)
    data = {k: v for k, v in expected.items() if k in DATA_FIELDS}
    check_fields(state, data, where=where, strict=strict)
    check_stream(state, dataset, n_then, where, strict)
    order = {k: v for k, v in expected.items() if k not in DATA_FIELDS and k not in BATCH_FIELDS}
    check_fields(state, order, where=where, strict=strict)
    return {k: v for k, v in expected.items() if k in BATCH_FIELDS}


def global_batch(
    state: Any,
    n: int,
    here: tuple[int, int],
    drop: tuple[bool, bool],
    where: str,
    strict: bool,
) -> int:
    """The per-rank batch size a loader state must hold on ``here`` = (W', B'): B', or the
    state's B when W·B = W'·B' (the same global batch: global step s is the positions
    [s·W·B, (s+1)·W·B) however it is factored) and both cut epochs alike
    (:func:`check_geometry`). A changed B that changes W·B is refused with the batch size that
    keeps it; with ``strict=False`` it is B' (the full check warns)."""
    w_here, b_here = here
    if not isinstance(state, Mapping):
        return b_here
    old, world = state.get(K_BATCH_SIZE), state.get(K_WORLD_SIZE)
    if not (is_state_int(old) and is_state_int(world)) or min(old, world) < 1 or old == b_here:
        return b_here  # a malformed field: the full check names it
    if old * world == b_here * w_here:  # the same global batch: a deliberate, checked change
        if any(drop):  # ... if it cuts epochs alike
            check_geometry(state, n, here, drop, where, strict)
        return old
    if not strict:
        return b_here
    fits = old * world // w_here if old * world % w_here == 0 else None
    fix = f"pass batch_size={fits} to keep the global batch, or " if fits not in (None, old) else ""
    raise StateMismatchError(
        f"{where}: batch_size is {old} on {world} ranks in the checkpoint (global batch "
        f"{old * world}) but {b_here} on {w_here} ranks here (global batch {b_here * w_here}); "
        f"a changed per-rank batch must keep the global batch; {fix}pass batch_size={old} "
        f"(the same per-rank batch, a new global batch), or strict=False"
    )


def check_geometry(
    state: Mapping[str, Any],
    n: int,
    here: tuple[int, int],
    drop: tuple[bool, bool],
    where: str,
    strict: bool,
) -> None:
    """A state saved on W ranks × B loads on W' × B' with W'·B' = W·B only if both cut the
    epochs alike: with ``drop_last`` (the sampler's or the loader's, ``drop``) the number of
    steps and the tail dropped or padded depend on W and B themselves, and another cut would
    hand out other samples at every later step. ``here``: (W', B'); the state holds (W, B)."""
    old = (state[K_WORLD_SIZE], state[K_BATCH_SIZE])
    position, origin = state.get(K_POSITION), state.get(K_ORIGIN, 0)
    if not (is_state_int(position) and is_state_int(origin)):
        return  # malformed: the full check names it
    mid = 0 < position < n and 0 <= origin <= position

    def cut(world: int, batch: int) -> tuple[tuple[int, int, int], ...]:
        whole = _partition.coverage(n, world, batch, *drop, 0)
        if not mid:
            return (whole,)
        if (world, batch) == old:  # the checkpoint's partition goes on from its origin
            steps, end, pad = _partition.coverage(n, world, batch, *drop, origin)
            rest = (steps - (position - origin) // (world * batch), end, pad)
        else:  # another world size re-partitions from the cursor
            rest = _partition.coverage(n, world, batch, *drop, position)
        return whole, rest

    want = cut(*old)
    if cut(*here) == want:
        return
    g = old[0] * old[1]
    fits = [f"{w} × {g // w}" for w in range(1, g + 1) if g % w == 0 and cut(w, g // w) == want]
    (steps_old, end_old, pad_old), (steps_new, end_new, pad_new) = want[0], cut(*here)[0]
    problem = (
        f"with drop_last, {n} samples on {_ranks(old[0])} × {old[1]} make epochs of {steps_old} "
        f"steps covering positions [0, {end_old}) (+{pad_old} padding), but on "
        f"{_ranks(here[0])} × {here[1]} (the same global batch) {steps_new} steps covering "
        f"[0, {end_new}) (+{pad_new} padding)"
        + ("" if want[0] != cut(*here)[0] else ", and the rest of this epoch is cut otherwise")
    )
    if not strict:
        warn_caller(f"{where}: {problem}; continuing (strict=False) with this cut of epochs")
        return
    raise StateMismatchError(
        f"{where}: {problem}: every later step would see other samples; resume on ranks × "
        f"batch size that cut epochs alike ({', '.join(fits)}), or strict=False to continue "
        f"with this cut"
    )


def check_replay_world(
    state: Mapping[str, Any], here: int, total: int | None, sampler: Any, where: str
) -> None:
    """A sampler that cannot seek partitions the epoch by world size: the rest of an epoch
    continues only on the world size that consumed its start."""
    old, done = state.get(K_WORLD_SIZE), state[K_POSITION]
    ended = state[K_EXHAUSTED] or done == 0 or (total is not None and done >= total)
    if old is not None and old != here and not ended:
        raise StateMismatchError(
            f"{where}: world_size is {old} in the checkpoint but {here} here, and the sampler "
            f"{type(sampler).__name__} cannot seek: it partitions the epoch by world size, so "
            f"the rest of epoch {state[K_EPOCH]} ({done} batches consumed on each rank) cannot "
            f"be continued on {here} ranks without losing or repeating samples; resume on "
            f"{old} ranks, or from an epoch boundary, or use seekdata.DistributedSampler "
            f"(order='torch' keeps torch's order), whose cursor re-partitions the rest"
        )


def check_iterable(state: Mapping[str, Any], num_workers: int, world: int, where: str) -> None:
    """An iterable loader's state: torchdata's nested state, complete for this
    ``num_workers`` (torchdata itself would fail at the next ``iter()``, or for ``{}`` silently
    restart the stream), and this world size (each rank's stream is its own)."""
    engine, fix = state.get(K_ENGINE), "pass an unmodified state_dict()"
    if not isinstance(engine, dict) or not engine:
        raise StateMismatchError(
            f"{where}: state[{K_ENGINE!r}] must be the non-empty dict torchdata's state_dict() "
            f"returned; got {type(engine).__name__} {str(engine)[:60]}; {fix}"
        )
    if "_snapshot" in engine:
        snap = engine["_snapshot"]
        main = snap.get("_main_snapshot") if isinstance(snap, dict) else None
        old = main.get("_num_workers") if isinstance(main, dict) else None
        if not is_state_int(old) or "_steps_since_snapshot" not in engine:
            raise StateMismatchError(
                f"{where}: state[{K_ENGINE!r}] is an incomplete torchdata worker state (no "
                f"'_snapshot._main_snapshot._num_workers' or '_steps_since_snapshot'); {fix}"
            )
    elif "_num_yielded" in engine:
        old = 0
    else:
        raise StateMismatchError(
            f"{where}: state[{K_ENGINE!r}] is not a torchdata state (keys: "
            f"{sorted(map(str, engine))[:6]}); {fix}"
        )
    if old != num_workers:
        raise StateMismatchError(
            f"{where}: num_workers is {old} in the checkpoint but {num_workers} here; an "
            f"IterableDataset splits its stream over the workers itself, so its state resumes "
            f"only on the same worker count; pass num_workers={old}, or use a map-style dataset "
            f"(any num_workers at resume)"
        )
    if state[K_WORLD_SIZE] != world:
        raise StateMismatchError(
            f"{where}: world_size is {state[K_WORLD_SIZE]} in the checkpoint but {world} here; "
            f"an IterableDataset's state is its own rank's stream, so it resumes only on the "
            f"same world size; resume on {state[K_WORLD_SIZE]} ranks, or use a map-style "
            f"dataset (elastic)"
        )


_INSPECT = "`seekdata inspect` of a checkpoint saved after the growth prints them"


def _recorded(state: Any, where: str) -> list[list[int]]:
    grown = state.get(K_GROWN, []) if isinstance(state, Mapping) else []
    ok = isinstance(grown, list) and all(
        isinstance(g, list) and len(g) == 3 and all(is_state_int(v) and v >= 0 for v in g)
        for g in grown
    )
    if not ok:
        raise StateMismatchError(
            f"{where}: state[{K_GROWN!r}] must be a list of [epoch, position, length] ints; "
            f"got {grown!r}; pass an unmodified state_dict()"
        )
    return list(grown)


def _next_start(state: Mapping[str, Any], n: int) -> tuple[int, int]:
    epoch, position = state.get(K_EPOCH), state.get(K_POSITION)
    if not (is_state_int(epoch) and is_state_int(position)):
        return (0, 0)  # check_state words the error
    ended = position >= n and bool(state.get(K_EXHAUSTED))
    return (epoch + 1, 0) if ended else (epoch, position)


def check_grown(
    state: Any, growths: tuple[Growth, ...], n: int, where: str, dataset: Any
) -> tuple[int, tuple[Growth, ...]]:
    """(the dataset length ``state`` was saved with, the growths to adopt), given this
    loader's declared ``growths`` (``n``: its length now; checked against ``dataset`` when
    declared). A checkpoint records the growths before it: a loader that declares none adopts
    them (checked here); one that declares some must declare these first. A checkpoint saved
    before a declared growth had the length before it, and must stand in that growth's epoch,
    at or before it."""
    recorded, ours = _recorded(state, where), [list(g) for g in growths]
    if not ours and recorded:
        return n, check_growths(recorded, n, where, dataset)
    if recorded != ours[: len(recorded)]:
        raise StateMismatchError(
            f"{where}: the checkpoint's dataset grew at {recorded} ([epoch, position, length "
            f"before]) but this loader declares {ours}; pass grown= with the checkpoint's "
            f"growths ({_INSPECT}), or none"
        )
    if len(recorded) == len(ours):
        return n, growths
    nxt = growths[len(recorded)]
    at = _next_start(state, state.get(K_N) if is_state_int(state.get(K_N)) else nxt.length)
    if any(g.epoch != at[0] for g in growths[len(recorded) :]) or at[1] > nxt.position:
        when = "after" if at > (nxt.epoch, nxt.position) else "before the epoch of"
        raise StateMismatchError(
            f"{where}: the checkpoint stands at epoch {at[0]}, position {at[1]}, {when} the "
            f"growth declared at epoch {nxt.epoch}, position {nxt.position}, and does not "
            f"record it (growths it does not record must all be in its epoch, after its "
            f"position: the epochs between were cut over another length); resume from a "
            f"checkpoint saved in epoch {growths[-1].epoch} or after it"
        )
    return nxt.length, growths


def growth_at(
    state: Any, growths: tuple[Growth, ...], n: int, where: str, dataset: Any
) -> tuple[Growth, ...]:
    """``load_state_dict(state, grow=True)``: ``dataset`` grew since ``state`` was saved, to
    ``n`` items. The growths (the checkpoint's, then the new one at its cursor); changes
    nothing. Whether its old items are still the checkpoint's is :func:`check_stream`'s."""
    recorded = _recorded(state, where)
    old = state.get(K_N) if isinstance(state, Mapping) else None
    if not is_state_int(old) or old < 1:
        raise StateMismatchError(
            f"{where}: grow=True reads the dataset's old length from state[{K_N!r}]; got "
            f"{old!r}; pass an unmodified state_dict() of a seekable loader or sampler"
        )
    refuse_unstable(dataset, where)  # first: whatever its length, it cannot grow so
    if old >= n:
        raise StateMismatchError(
            f"{where}: grow=True declares that the dataset grew since the checkpoint; it had "
            f"{old} items then and has {n} now; pass grow=False (a dataset that lost items is "
            f"another dataset)"
        )
    if growths and recorded != [list(g) for g in growths]:
        raise StateMismatchError(
            f"{where}: grow=True adds a growth to those the checkpoint records ({recorded}); "
            f"this loader declares {[list(g) for g in growths]}; declare none with grow=True "
            f"(the checkpoint carries them)"
        )
    epoch, position = _next_start(state, old)
    return check_growths([*recorded, Growth(epoch, position, old)], n, where, dataset)


def stream_records(dataset: Any, epoch: int, position: int) -> dict[str, Any]:
    """What a loader's or sampler's state records of ``dataset``'s own stream at the cursor:
    its ``stream_signature`` (:data:`K_DATASET`) and a mixture's changes (prefix, history)."""
    out: dict[str, Any] = {}
    signature = signature_then(dataset, None)
    if signature is not None:
        out[K_DATASET] = signature
    out.update(_source.stream_records(dataset, epoch, position))
    signed = _source.source_signatures(dataset)
    if signed:
        out[K_SOURCES] = signed
    return out


def check_stream(
    state: Mapping[str, Any], dataset: Any, n_then: int | None, where: str, strict: bool
) -> None:
    """A loader's or sampler's state against ``dataset``'s own stream, when it defines one
    (its ``stream_signature``; a :class:`seekdata.Mixture`'s changes): the same stream, or,
    for a mixture, the same stream consumed. ``n_then``: the length the state was saved with,
    where the dataset grew since (its first ``n_then`` items must be what it had then). A
    sampler state without a signature (written before samplers recorded one) is not checked."""
    if state.get(K_KIND) == "sampler" and K_DATASET not in state and K_PREFIX not in state:
        return
    _check_sources(state, dataset, where, strict)
    here = _source.stream_records(dataset, state[K_EPOCH], state[K_POSITION], always=True)
    if here:  # a mixture: a state that agrees on the stream consumed is accepted
        check_mixture(state, signature_then(dataset, None), here[K_PREFIX],
                      here.get(K_HISTORY, []), type(dataset), where, strict)  # fmt: skip
        return
    signature = signature_then(dataset, n_then)
    grew = n_then is not None and signature is not None and n_then != len(dataset)
    detail = (
        f" (the signature of its first {n_then} items: it grew since; its old items must be "
        f"the checkpoint's, in their order, with new data appended after them)"
        if grew
        else ""
    )
    check_dataset(state, signature, type(dataset), where, strict, detail)


def _check_sources(state: Mapping[str, Any], dataset: Any, where: str, strict: bool) -> None:
    """Each source of a mixture recorded with its own stream (:data:`K_SOURCES`) against the
    source with that id here: its first ``length`` items must be what they were. A source
    removed since (``Mixture.gone``) or absent is not read, so not checked; a state without the
    record (an older release, or no source with a stream) is not checked."""
    recorded = state.get(K_SOURCES)
    if not recorded or not _source.finds_sources(dataset):
        return
    for entry in recorded:
        if not (isinstance(entry, list) and len(entry) == 3 and is_state_int(entry[0])
                and is_state_int(entry[1]) and isinstance(entry[2], str)):  # fmt: skip
            raise StateMismatchError(
                f"{where}: each of state[{K_SOURCES!r}] must be [source id, length, "
                f"signature]; got {entry!r}; pass an unmodified state_dict()"
            )
        found = _source.source_with_id(dataset, entry[0])
        if found is None:
            continue
        label, source = found
        now = signature_then(source, entry[1]) if len(source) >= entry[1] else None
        if now == entry[2]:
            continue
        problem = (
            f"source {label} is not the data the checkpoint read: the signature of its first "
            f"{entry[1]} items is {now!r} here but {entry[2]!r} in the checkpoint"
        )
        if strict:
            raise StateMismatchError(
                f"{where}: {problem}; build that source on the same files in the same order "
                f"(sort a glob), or strict=False to continue over this data from the cursor"
            )
        warn_caller(f"{where}: {problem}; continuing (strict=False) over this data")


def _ranks(world: int) -> str:
    return f"{world} rank" if world == 1 else f"{world} ranks"


def check_mixture(
    state: Mapping[str, Any],
    here: str | None,
    prefix: str,
    history: list[dict[str, Any]],
    dataset: type,
    where: str,
    strict: bool,
) -> None:
    """A loader state over a mixture with changes: accepted when the stream is the same
    (``here``, the mixture's ``stream_signature``) or when this mixture agrees on the stream
    consumed (``prefix``, its prefix signature at the state's position; ``history``, its
    change records up to there). Else refused naming the first change that differs."""
    old = state.get(K_PREFIX, state.get("dataset"))
    if state.get("dataset") == here or old == prefix:
        return
    saved = state.get(K_HISTORY, [])
    detail = ""
    if isinstance(saved, list):
        for i in range(max(len(saved), len(history))):
            a = saved[i] if i < len(saved) and isinstance(saved[i], Mapping) else None
            b = history[i] if i < len(history) else None
            if a is not None and b is not None and a.get("digest") == b.get("digest"):
                continue
            if a is not None and b is not None and a.get("at") == b.get("at"):
                detail = (
                    f"; the checkpoint changed at P={_num(a.get('at'))} ({describe_change(a)}), "
                    f"this mixture changes there ({describe_change(b)})"
                )
            elif a is not None and (b is None or _before(a, b)):
                detail = (
                    f"; the checkpoint changed at P={_num(a.get('at'))} ({describe_change(a)}), "
                    f"this mixture has no change there: build it with the same history "
                    f"(mix.changed({_num(a.get('at'), '_')}, ...))"
                )
            elif b is not None:
                detail = (
                    f"; this mixture changes at P={_num(b.get('at'))} ({describe_change(b)}), "
                    f"before the checkpoint's position, where the checkpoint has no change"
                )
            break
    check_dataset(state, here, dataset, where, strict, detail)


def _before(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    at_a, at_b = a.get("at"), b.get("at")
    return is_state_int(at_a) and is_state_int(at_b) and at_a < at_b


def _num(value: Any, sep: str = ",") -> str:
    return f"{value:,}".replace(",", sep) if is_state_int(value) else repr(value)


def describe_change(record: Mapping[str, Any]) -> str:
    """One change record of a state's ``history``, for people: ``+ books; - web; code grew
    1,000 -> 1,200; weights 1/2 3/10 1/5``."""
    parts = []
    for key, sign in (("added", "+"), ("removed", "-")):
        names = record.get(key)
        if isinstance(names, list):
            parts.append(f"{sign} {', '.join(map(str, names))}")
        elif names is not None:
            parts.append(f"{sign} {names} sources")
    grown = record.get("grown")
    if isinstance(grown, Mapping):
        parts += [f"{name} grew {_num(n[0])} -> {_num(n[1])}" for name, n in grown.items()
                  if isinstance(n, list) and len(n) == 2]  # fmt: skip
    elif grown is not None:
        parts.append(f"{grown} sources grew")
    weights = record.get("weights")
    if isinstance(weights, list):
        parts.append(f"weights {' '.join(map(str, weights))}")
    return "; ".join(parts) or "weights changed"
