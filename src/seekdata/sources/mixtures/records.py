"""What a mixture's state records of it, and its own check of them at a resume.

A loader's or sampler's state over a :class:`seekdata.Mixture` records, beside the mixture's
``stream_signature``, the keys the mixture owns (its ``stream_records``, the source protocol):

- ``prefix`` (:data:`seekdata.state.K_PREFIX`): the signature of the stream consumed so far,
  written once the mixture has changes (a schedule, ``Mixture.changed``);
- ``history`` (:data:`seekdata.state.K_HISTORY`): one record per change that took effect.

(Its sources' own signatures, ``sources``, are the source protocol's: any dataset made of
sources records and checks them, :mod:`seekdata._core.identity`.) At ``load_state_dict`` the
core asks the mixture to check its records (its ``check_records``):
:func:`check_records` accepts a state that agrees on the stream consumed even if the mixture
changed after it, and refuses the others naming the first change that differs
(:func:`describe_change`, also what ``seekdata inspect`` prints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seekdata._core.checks import is_state_int
from seekdata._core.growth import signature_then
from seekdata._core.state import (
    K_DATASET,
    K_EPOCH,
    K_HISTORY,
    K_POSITION,
    K_PREFIX,
    check_dataset,
    describe_same,
)

__all__ = ["SAME", "check_records", "describe_change"]

#: What "the same dataset" means for a mixture, in the fix of a refusal: also for a state saved
#: over a mixture and loaded over another dataset (its signature reads ``Mixture(...)``).
SAME = "the same sources, weights and seed"
describe_same("Mixture", SAME)


def check_records(mix: Any, state: Mapping[str, Any], where: str, strict: bool) -> None:
    """``state``'s records of a mixture against ``mix`` (a :class:`seekdata.Mixture`): the
    same stream, or the same stream consumed."""
    here = mix.stream_records(state[K_EPOCH], state[K_POSITION], True)
    _check_consumed(state, signature_then(mix, None), here[K_PREFIX], here.get(K_HISTORY, []),
                  type(mix), where, strict)  # fmt: skip


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
    old = state.get(K_PREFIX, state.get(K_DATASET))
    if state.get(K_DATASET) == here or old == prefix:
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
