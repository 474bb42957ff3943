"""What a mixture's state records of it, and its own check of them at a resume.

A loader's or sampler's state over a :class:`seekdata.Mixture` records, beside the mixture's
``stream_signature``, the records the mixture owns (its ``stream_records``, the source
protocol), under the one key a dataset's records sit in (``state["source"]``,
:data:`seekdata.state.K_SOURCE`, whose ``kind`` is ``"Mixture"``):

- ``prefix`` (:data:`K_PREFIX`): the signature of the stream consumed so far, written once the
  mixture has changes (a schedule, ``Mixture.changed``);
- ``history`` (:data:`K_HISTORY`): one record per change that took effect.

(Its sources' own signatures, ``sources``, sit beside them; they are the source protocol's:
any dataset made of sources records and checks them, :mod:`seekdata._core.identity`.) A state
of the first format held these keys at its top level: it is read as converted
(:func:`seekdata._core.state.upgrade`). At ``load_state_dict`` the core asks the mixture to
check its records (its ``check_records``): :func:`check_records` accepts a state that agrees on
the stream consumed even if the mixture changed after it, and refuses the others naming the
first change that differs (:func:`describe_change`, also what ``seekdata inspect`` prints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seekdata._core.checks import is_state_int
from seekdata._core.growth import signature_then
from seekdata._core.identity import records_of
from seekdata._core.state import (
    K_DATASET,
    K_EPOCH,
    K_POSITION,
    K_SOURCE,
    StateMismatchError,
    check_dataset,
    describe_same,
    upgrade,
)

__all__ = ["K_HISTORY", "K_PREFIX", "SAME", "check_records", "describe_change", "saved_prefix"]

#: In a mixture's records, written once it has changes (a schedule, or ``Mixture.changed``):
#: the signature of the stream consumed so far (``Mixture.prefix_signature``). A mixture that
#: agrees on that prefix (one changed after the cursor) accepts the state. Absent otherwise.
K_PREFIX = "prefix"
#: In a mixture's records, written with :data:`K_PREFIX` once a change took effect: one record
#: per change (``at``, ``epoch``, ``position``, ``digest``, and ``added``/``removed``/``grown``/
#: ``weights`` where they apply), for error messages and ``seekdata inspect``. Absent otherwise.
K_HISTORY = "history"
#: The type of each of the mixture's records.
_TYPES = {K_PREFIX: str, K_HISTORY: list}

#: What "the same dataset" means for a mixture, in the fix of a refusal: also for a state saved
#: over a mixture and loaded over another dataset (its signature reads ``Mixture(...)``).
SAME = "the same sources, weights and seed"
describe_same("Mixture", SAME)


def check_records(mix: Any, state: Mapping[str, Any], where: str, strict: bool) -> None:
    """``state``'s records of a mixture against ``mix`` (a :class:`seekdata.Mixture`): the
    same stream, or the same stream consumed."""
    state = upgrade(state)  # a state of the first format: its records at the top level
    _check_form(state, where)
    here = mix.stream_records(state[K_EPOCH], state[K_POSITION], True)
    _check_consumed(state, signature_then(mix, None), here[K_PREFIX], here.get(K_HISTORY, []),
                  type(mix), where, strict)  # fmt: skip


def _check_form(state: Mapping[str, Any], where: str) -> None:
    """The mixture's records are each of their type (the core checked only that the records
    are a dict), so a fix never suggests an invalid value."""
    records = records_of(state)
    for key, want in _TYPES.items():
        value = records.get(key)
        if value is not None and not isinstance(value, want):
            raise StateMismatchError(
                f"{where}: state[{K_SOURCE!r}][{key!r}] must be {want.__name__}; got "
                f"{type(value).__name__} {value!r}; pass an unmodified state_dict()"
            )


def saved_prefix(state: Mapping[str, Any]) -> Any:
    """The signature of the stream a (current-format) state consumed: its mixture's
    :data:`K_PREFIX`, else its whole stream's signature (a mixture without changes)."""
    return records_of(state).get(K_PREFIX, state.get(K_DATASET))


def _check_consumed(
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
    if state.get(K_DATASET) == here or saved_prefix(state) == prefix:
        return
    saved = records_of(state).get(K_HISTORY, [])
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
    check_dataset(state, here, dataset, where, strict, detail, same=SAME)


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
