"""The state schema: a cursor of a few JSON-native values, validated field by field.

A seekdata state is a flat ``dict`` of ints, strs and bools. It survives ``json.dumps`` and
``torch.load(weights_only=True)``, is identical on every rank, and never holds generator
bytes: every random number is derived from the counters it holds.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["VERSION", "StateMismatchError", "check_state", "warn_rewind"]

#: The format version written by this release. States from a newer release are rejected.
VERSION = 1

#: Marker key: its value is the format version. Finds seekdata states nested in checkpoints.
K_VERSION = "seekdata"
#: What wrote the state: "sampler" or "loader".
K_KIND = "kind"
#: The epoch the cursor is in.
K_EPOCH = "epoch"
#: Global positions of the epoch consumed, summed over all ranks; ``n`` means the epoch ended.
K_POSITION = "position"
#: At the epoch's end: whether its iterator already finished (raised StopIteration). Then a
#: later ``iter()`` with no ``set_epoch`` starts the next epoch; if not, that ``iter()`` first
#: yields the (empty) rest of this epoch, as the uninterrupted run's loop would.
K_EXHAUSTED = "exhausted"
#: Dataset length.
K_N = "n"
#: Seed of the order (the sampler's seed).
K_SEED = "seed"
#: The order's spec string, e.g. "feistel", "torch", "shards(window=4,...)".
K_ORDER = "order"
#: Whether the order is shuffled (False means sequential whatever ``order`` says).
K_SHUFFLE = "shuffle"
#: The sampler's ``drop_last`` (drop the tail that does not divide among ranks).
K_DROP_LAST = "drop_last"
#: World size when the state was written. A seekable cursor accepts another one (the remaining
#: positions are re-partitioned); a sampler that cannot seek refuses it mid-epoch.
K_WORLD_SIZE = "world_size"
#: The global position where the current partition of the epoch began: 0, or where a resume
#: on another world size re-partitioned it. Padding repeats positions from here, so nothing
#: consumed before it reappears. Absent in older states (read as 0).
K_ORIGIN = "origin"
#: Loader only: samples per batch on each rank.
K_BATCH_SIZE = "batch_size"
#: Loader only: the DataLoader's ``drop_last`` (drop each rank's last partial batch).
K_BATCH_DROP_LAST = "batch_drop_last"
#: Loader only: seed of per-sample and batch-level randomness (the loader's ``seed``).
K_SAMPLE_SEED = "sample_seed"
#: Loader only: batches this rank has consumed in the epoch (the global step in the epoch).
K_STEP = "step"
#: Loader only, written when not empty: global-step ranges ``[start, stop)`` the loader skips
#: (``loader.skip_steps``), sorted and disjoint; a global step is epoch × len(loader) + step.
K_SKIPS = "skips"
#: Loader only, written when the dataset defines its own stream (its ``stream_signature``, e.g.
#: a :class:`seekdata.Mixture`: sources, weights, seed): a state from another mixture of the
#: same length is refused instead of continuing another stream. Absent otherwise.
K_DATASET = "dataset"


class StateMismatchError(ValueError):
    """A checkpointed state does not fit the object loading it (field, both values, the fix)."""


_TYPES: dict[str, type | tuple[type, ...]] = {
    K_VERSION: int,
    K_KIND: str,
    K_EPOCH: int,
    K_POSITION: int,
    K_EXHAUSTED: bool,
    K_N: int,
    K_SEED: int,
    K_ORDER: str,
    K_SHUFFLE: bool,
    K_DROP_LAST: bool,
    K_WORLD_SIZE: int,
    K_BATCH_SIZE: int,
    K_BATCH_DROP_LAST: bool,
    K_SAMPLE_SEED: int,
    K_STEP: int,
    K_ORIGIN: int,
    K_SKIPS: list,
    K_DATASET: str,
}

_FIX = {
    K_N: "pass the same dataset, or strict=False to keep the cursor on this dataset",
    K_SEED: "pass seed={old}, or strict=False to continue with another order",
    K_ORDER: "pass order={old!r}, or strict=False to continue with another order",
    K_SHUFFLE: "pass shuffle={old}, or strict=False",
    K_DROP_LAST: "pass drop_last={old}, or strict=False",
    K_BATCH_SIZE: "pass batch_size={old}, or strict=False to continue with another batch size",
    K_BATCH_DROP_LAST: "pass drop_last={old} to the loader, or strict=False",
    K_SAMPLE_SEED: "pass seed={old} to the loader, or strict=False",
    K_KIND: "load a {old} state into a {old}",
    K_DATASET: "build the dataset the checkpoint was saved with (the same sources, weights and "
    "seed), or strict=False to continue this dataset's stream from the cursor",
}


def check_state(
    state: Any, expected: Mapping[str, Any], *, where: str, strict: bool = True
) -> list[str]:
    """Validate ``state`` against the fields ``expected`` (name -> value here).

    Raises :class:`StateMismatchError` (or ``TypeError`` for a non-dict) naming the field,
    both values and the fix. With ``strict=False`` mismatching stream fields are returned
    (for a warning) instead of raised; structure, types and versions are always checked.
    """
    if not isinstance(state, Mapping):
        raise TypeError(
            f"{where}: state must be a dict from state_dict(); got {type(state).__name__}; "
            f"pass the dict you saved"
        )
    if not state:
        raise StateMismatchError(
            f"{where}: state is empty; a seekdata state has at least "
            f"{K_VERSION!r}, {K_EPOCH!r} and {K_POSITION!r}; pass the dict state_dict() returned"
        )
    if K_VERSION not in state:
        raise StateMismatchError(
            f"{where}: state has no {K_VERSION!r} version key, so it was not written by "
            f"seekdata (keys: {sorted(state)[:8]}); pass the dict that seekdata's state_dict() "
            f"returned"
        )
    version = state[K_VERSION]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise StateMismatchError(f"{where}: state version must be a positive int; got {version!r}")
    if version > VERSION:
        raise StateMismatchError(
            f"{where}: state has format version {version} but this seekdata reads up to "
            f"{VERSION}; upgrade seekdata to the release that wrote the checkpoint"
        )
    required = [K_KIND, K_EPOCH, K_POSITION, K_EXHAUSTED, *expected]
    missing = [k for k in dict.fromkeys(required) if k not in state]
    if missing:
        raise StateMismatchError(
            f"{where}: state is missing {', '.join(map(repr, missing))}; a complete state has "
            f"{', '.join(map(repr, dict.fromkeys(required)))}; pass an unmodified state_dict()"
        )
    for key, value in state.items():
        want = _TYPES.get(key)
        bad_bool = want is int and isinstance(value, bool)
        if want is not None and (bad_bool or not isinstance(value, want)):
            name = want.__name__ if isinstance(want, type) else "/".join(t.__name__ for t in want)
            raise StateMismatchError(
                f"{where}: state[{key!r}] must be {name}; got {type(value).__name__} {value!r}; "
                f"pass an unmodified state_dict()"
            )
    for key, low in ((K_EPOCH, 0), (K_POSITION, 0), (K_STEP, 0), (K_ORIGIN, 0), (K_WORLD_SIZE, 1)):
        if key in state and state[key] < low:
            raise StateMismatchError(
                f"{where}: state[{key!r}] must be >= {low}; got {state[key]}; pass an "
                f"unmodified state_dict()"
            )
    if K_ORIGIN in state and state[K_ORIGIN] > state[K_POSITION]:
        raise StateMismatchError(
            f"{where}: state[{K_ORIGIN!r}] must be <= state[{K_POSITION!r}] "
            f"({state[K_POSITION]}); got {state[K_ORIGIN]}; pass an unmodified state_dict()"
        )
    if K_SKIPS in state:
        _check_skips(state[K_SKIPS], where)
    mismatched: list[str] = []
    for key, here in expected.items():
        old = state[key]
        if old == here and type(old) is type(here):
            continue
        fix = _FIX.get(key, "pass the same configuration").format(old=old)
        message = f"{where}: {key} is {old!r} in the checkpoint but {here!r} here; {fix}"
        if strict or key == K_KIND:
            raise StateMismatchError(message)
        mismatched.append(message)
    return mismatched


def _check_skips(skips: list[Any], where: str) -> None:
    last = -1
    for pair in skips:
        ok = isinstance(pair, list) and len(pair) == 2
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
        if not ok or not last < pair[0] < pair[1]:
            raise StateMismatchError(
                f"{where}: state[{K_SKIPS!r}] must be sorted, disjoint [start, stop) pairs of "
                f"global steps with 0 <= start < stop; got {skips!r}; pass an unmodified "
                f"state_dict()"
            )
        last = pair[1]


def warn_rewind(where: str, epoch: int, restored: int | None, stacklevel: int = 3) -> None:
    """Warn when ``set_epoch(epoch)`` goes below the epoch a state restored (a buggy resume)."""
    if restored is not None and epoch < restored:
        warnings.warn(
            f"{where}: set_epoch({epoch}) is below the restored epoch {restored}, so the run "
            f"goes back to epoch {epoch} and trains again on epochs it already saw; when "
            f"resuming, start the epoch loop at the checkpoint's epoch ({restored})",
            stacklevel=stacklevel,
        )
