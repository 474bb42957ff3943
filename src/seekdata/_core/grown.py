"""A checkpoint of a dataset that grew: which growths a resume adopts, or adds.

A state records the growths before it (:data:`seekdata._core.state.K_GROWN`, ``[epoch,
position, length before]`` each); a loader may declare growths of its own (``grown=``) or
declare one at its cursor (``load_state_dict(state, grow=True)``). :func:`check_grown` decides
which length the state was saved with and which growths to adopt; :func:`growth_at` adds the
one ``grow=True`` declares. How an epoch is ordered across a growth is
:mod:`seekdata._core.growth`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seekdata._core.checks import is_state_int
from seekdata._core.growth import Growth, check_growths, refuse_unstable
from seekdata._core.state import K_EPOCH, K_EXHAUSTED, K_GROWN, K_N, K_POSITION, StateMismatchError

__all__ = ["check_grown", "growth_at"]

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
