"""The state schema: a cursor of a few JSON-native values, validated field by field.

A seekdata state is a flat ``dict`` of ints, strs and bools. It survives ``json.dumps`` and
``torch.load(weights_only=True)``, is identical on every rank, and never holds generator
bytes: every random number is derived from the counters it holds.

The implementation lives in :mod:`seekdata._core.state`; this module only re-exports.
"""

from __future__ import annotations

from seekdata._core.state import (
    KINDS,
    VERSION,
    StateMismatchError,
    check_dataset,
    check_in_order,
    check_one_seed,
    check_resize,
    check_state,
    check_step,
    warn_caller,
    warn_rewind,
)

__all__ = [
    "KINDS",
    "VERSION",
    "StateMismatchError",
    "check_dataset",
    "check_in_order",
    "check_one_seed",
    "check_resize",
    "check_state",
    "check_step",
    "warn_caller",
    "warn_rewind",
]
