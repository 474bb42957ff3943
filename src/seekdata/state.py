"""The state schema: a cursor of a few JSON-native values, validated field by field.

A seekdata state is a ``dict`` of ints, strs and bools (and, where a dataset keeps records of
its own stream, one ``dict`` of them under ``K_SOURCE``). It survives ``json.dumps`` and
``torch.load(weights_only=True)``, is identical on every rank, and never holds generator
bytes: every random number is derived from the counters it holds.

The implementation lives in :mod:`seekdata._core.state`; this module only re-exports:
the names of ``__all__`` and, outside it as before, the state keys (``K_EPOCH`` ...); a
mixture's own record keys (``K_PREFIX``, ``K_HISTORY``) live with the mixture
(:mod:`seekdata.sources.mixtures.records`).
"""

from __future__ import annotations

from seekdata._core.state import (
    K_BATCH_DROP_LAST,
    K_BATCH_SIZE,
    K_DATASET,
    K_DROP_LAST,
    K_ENGINE,
    K_EPOCH,
    K_EXHAUSTED,
    K_GROWN,
    K_KIND,
    K_N,
    K_ORDER,
    K_ORIGIN,
    K_POSITION,
    K_SAMPLE_SEED,
    K_SEED,
    K_SHUFFLE,
    K_SKIPS,
    K_SOURCE,
    K_SOURCES,
    K_STEP,
    K_UNIT,
    K_VERSION,
    K_WORLD_SIZE,
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
from seekdata.sources.mixtures.records import K_HISTORY, K_PREFIX

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
