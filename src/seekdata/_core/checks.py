"""The one set of argument checks, and the one rule they keep.

The rule (CONTRIBUTING.md, "Errors"):

- An integer argument is a Python ``int`` or a numpy integer (``np.int64(4)``, ``np.uint32(3)``:
  what indexing an array or a ``len`` of one gives), never a ``bool`` or ``np.bool_`` (``True``
  is an int to Python, never a count to a user). It is returned as a Python ``int``.
- A bool argument is a Python ``bool`` or ``np.bool_``, never an int: ``drop_last=1`` is
  refused, as torch's ``BatchSampler`` refuses it. It is returned as a Python ``bool``.
- A wrong type raises :class:`ArgumentError`: a ``TypeError`` that is also a ``ValueError``,
  because torch's ``DataLoader`` raises ``ValueError`` for some of the same arguments
  (``batch_size``, ``drop_last``), so code written against either ``except`` catches it.
- A right type with a wrong value (out of range) raises ``ValueError``.
- A checkpoint that does not fit is a :class:`seekdata.StateMismatchError` (a ``ValueError``;
  :mod:`seekdata._core.state`), never a plain ``ValueError``. The fields of a state are
  JSON-native, so a state's integer is a Python ``int`` only (:func:`is_state_int`): a numpy
  integer in a state would not survive ``json.dumps``.

Every message follows the formula: what must hold, what was given, how to fix it.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeGuard

import numpy as np

__all__ = [
    "ArgumentError",
    "check_bool",
    "check_counter",
    "check_int",
    "is_bool",
    "is_int",
    "is_state_int",
    "refuse_type",
]


class ArgumentError(TypeError, ValueError):
    """A bad argument: a ``TypeError`` for the wrong type that is also the ``ValueError``
    torch's ``DataLoader`` raises for the same argument, so either ``except`` catches it."""


def is_int(value: Any) -> TypeGuard[int | np.integer[Any]]:
    """An int or a numpy integer, never a bool: the one rule for an integer argument."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def is_state_int(value: Any) -> TypeGuard[int]:
    """A Python int, never a bool: the rule for an integer read from a (JSON-native) state."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_bool(value: Any) -> TypeGuard[bool | np.bool_]:
    """A bool or a numpy bool, never an int: the one rule for a flag."""
    return isinstance(value, bool | np.bool_)


def refuse_type(where: str, name: str, what: str, value: Any, fix: str) -> NoReturn:
    """Raise the :class:`ArgumentError` of an argument of the wrong type."""
    raise ArgumentError(
        f"{where}: {name} must be {what}; got {type(value).__name__} {value!r}; {fix}"
    )


def check_int(
    value: Any,
    name: str,
    where: str,
    low: int | None = None,
    *,
    what: str | None = None,
    fix: str | None = None,
) -> int:
    """Return ``value`` (an int or numpy integer, never a bool) as a Python int, at least
    ``low`` when given. ``what`` names the rule in the message ("a positive int" by default for
    ``low=1``), ``fix`` replaces the default how-to-fix of both messages."""
    if what is None:
        what = "an int" if low is None else "a positive int" if low == 1 else f"an int >= {low}"
    if not is_int(value):
        refuse_type(
            where, name, what, value, fix or f"pass an int such as {name}={max(low or 0, 1)}"
        )
    value = int(value)
    if low is not None and value < low:
        raise ValueError(
            f"{where}: {name} must be {what}; got {value}; {fix or f'pass {name} >= {low}'}"
        )
    return value


def check_counter(value: Any, name: str, where: str) -> int:
    """Return ``value`` as a non-negative Python int: a counter that keys randomness (a seed,
    an epoch, a step, an index), hashed, so any size is fine."""
    what = "a non-negative int"
    if not is_int(value):
        refuse_type(where, name, what, value, f"pass an int such as {name}=0")
    value = int(value)
    if value < 0:
        raise ValueError(
            f"{where}: {name} must be {what}; got {value}; "
            f"pass {name} >= 0 (counters are hashed, so large values are fine)"
        )
    return value


def check_bool(value: Any, name: str, where: str, *, fix: str | None = None) -> bool:
    """Return ``value`` (a bool or numpy bool, never an int) as a Python bool."""
    if not is_bool(value):
        refuse_type(where, name, "a bool", value, fix or f"pass {name}=True or {name}=False")
    return bool(value)
