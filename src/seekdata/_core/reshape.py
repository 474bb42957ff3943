"""The rules of resuming a valid state on a loader of another shape.

A checkpoint of the same data (:mod:`seekdata._core.identity`) resumes *here* depending on how
this loader differs from the one that saved it: another world size or batch geometry (the global
batch must stay, and epochs must be cut alike: :func:`global_batch`, :func:`check_geometry`), a
sampler that cannot seek on another world size (:func:`check_replay_world`), an iterable
dataset's per-rank stream (:func:`check_iterable`). The engines supply the values; these decide
and word the errors (:class:`~seekdata.StateMismatchError`). A dataset that grew is
:mod:`seekdata._core.grown`'s; a mixture's changes are the mixture's own
(:mod:`seekdata.sources.mixtures.records`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seekdata._core import partition as _partition
from seekdata._core.checks import is_state_int

# the first check of a resume and the growths, the engines' spelling (they call them through
# this module): one idea each, in their own modules
from seekdata._core.grown import check_grown, growth_at
from seekdata._core.identity import check_data, stream_records
from seekdata._core.state import (
    K_BATCH_SIZE,
    K_ENGINE,
    K_EPOCH,
    K_EXHAUSTED,
    K_ORIGIN,
    K_POSITION,
    K_WORLD_SIZE,
    StateMismatchError,
    warn_caller,
)

__all__ = [
    "check_data",
    "check_geometry",
    "check_grown",
    "check_iterable",
    "check_replay_world",
    "global_batch",
    "growth_at",
    "stream_records",
]


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


def _ranks(world: int) -> str:
    return f"{world} rank" if world == 1 else f"{world} ranks"
