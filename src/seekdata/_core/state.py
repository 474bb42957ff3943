"""The state schema: a cursor of a few JSON-native values, validated field by field.

The public face is :mod:`seekdata.state`; its docstring is the user's guide to this module.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from seekdata._core.checks import is_state_int

__all__ = [
    "BATCH_FIELDS",
    "CHECK_ORDER",
    "DATA_FIELDS",
    "KINDS",
    "VERSION",
    "StateMismatchError",
    "check_dataset",
    "check_fields",
    "check_form",
    "check_in_order",
    "check_one_seed",
    "check_resize",
    "check_state",
    "check_step",
    "describe_same",
    "warn_caller",
    "warn_rewind",
]

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
#: Iterable loaders only: torchdata's own state of the stream, nested (JSON-native).
K_ENGINE = "engine"
#: Written when the dataset defines its own stream (its ``stream_signature``: a
#: :class:`seekdata.Mixture`'s sources, weights, seed; a token corpus's files and arguments): a
#: state over another stream of the same length is refused instead of continuing it. Absent
#: otherwise; absent from a sampler's state written before samplers recorded it (not checked).
K_DATASET = "dataset"
#: growths of the dataset so far, ``[[epoch, position, length before], ...]`` (only if any)
K_GROWN = "grown"
#: Written over a mixture with changes (a schedule, or ``Mixture.changed``): the
#: signature of the stream consumed so far (``Mixture.prefix_signature``). A mixture that agrees
#: on that prefix (one changed after the cursor) accepts the state. Absent otherwise.
K_PREFIX = "prefix"
#: Written with :data:`K_PREFIX` once a change took effect: one record per change
#: (``at``, ``epoch``, ``position``, ``digest``, and ``added``/``removed``/``grown``/``weights``
#: where they apply), for error messages and ``seekdata inspect``. Absent otherwise.
K_HISTORY = "history"
#: Written over a :class:`seekdata.Mixture` whose sources define their own streams (token
#: corpora, tar shards): ``[[source id, length, stream_signature], ...]``, one per such source
#: as it stands now. At load each source still present must have the same first ``length`` items
#: (token files in another order inside a mixture are refused). Absent otherwise.
K_SOURCES = "sources"


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
    K_GROWN: list,
    K_PREFIX: str,
    K_HISTORY: list,
    K_SOURCES: list,
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
    K_DATASET: "build the dataset the checkpoint was saved with ({same}), or strict=False to "
    "continue this dataset's stream from the cursor",
}
#: ``n`` grew: the fix names the declaration first.
_FIX_GREW = (
    "if the dataset grew since (append-only), load_state_dict(state, grow=True) "
    "(docs/growth.md); else pass the same dataset, or strict=False to keep the cursor on it"
)
#: What "the same dataset" means in the fix of a refused signature, unless the dataset's own
#: check says it (``check_dataset(same=...)``) or its family registered its wording
#: (:func:`describe_same`).
_SAME_DATA = "the same data in the same order, and the same arguments"
#: A family's wording, by the kind its signatures start with (``Kind(...)``): a state saved over
#: one is refused with it even by a dataset of another family. Filled by :func:`describe_same`.
_SAME_BY_KIND: dict[str, str] = {}

#: What continuing means, for a mismatch that ``strict=False`` lets through (with a warning).
_CONTINUES = {
    K_N: "the cursor's positions now index this dataset",
    K_SEED: "the order is this seed's from here on",
    K_ORDER: "the order is this one from here on",
    K_SHUFFLE: "the order is this one from here on",
    K_DROP_LAST: "the epoch's tail follows this setting",
    K_BATCH_SIZE: "batches have this size from here on",
    K_BATCH_DROP_LAST: "the epoch's last batch follows this setting",
    K_SAMPLE_SEED: "samples' randomness is keyed by this seed from here on",
    K_DATASET: "this dataset's stream continues from the cursor",
}

#: The kinds of state, and the keys each must hold (what its writer always writes). ``origin``
#: and ``skips`` may be absent (a state from before origin existed; no skip recorded).
_STREAM = (K_N, K_SEED, K_ORDER, K_SHUFFLE, K_DROP_LAST, K_WORLD_SIZE)
_BATCHES = (K_BATCH_SIZE, K_BATCH_DROP_LAST, K_SAMPLE_SEED)
KINDS: dict[str, tuple[str, ...]] = {
    "sampler": _STREAM,
    "loader": (*_STREAM, *_BATCHES, K_STEP),
    "iterable": (*_BATCHES, K_WORLD_SIZE),
}

# the lowest valid value of each integer field
_LOWEST = {
    K_EPOCH: 0, K_POSITION: 0, K_STEP: 0, K_ORIGIN: 0, K_WORLD_SIZE: 1, K_N: 1, K_SEED: 0,
    K_SAMPLE_SEED: 0, K_BATCH_SIZE: 1,
}  # fmt: skip


#: The order in which a state's fields are compared with the object loading it, after the state
#: is found well formed (:func:`check_form`): what the data is (the kind of state, the dataset's
#: length; then, in :func:`seekdata._core.reshape.check_data`, the dataset's own stream), the
#: order and randomness over it, and last how that order is cut into batches. A checkpoint of
#: another dataset is refused as another dataset, not with a batch size whose fix leads to the
#: next refusal. Fields not listed are compared after these, in the order given.
CHECK_ORDER = (
    K_KIND,
    K_N,
    K_SEED,
    K_ORDER,
    K_SHUFFLE,
    K_SAMPLE_SEED,
    K_DROP_LAST,
    K_BATCH_SIZE,
    K_BATCH_DROP_LAST,
)
#: The fields of :data:`CHECK_ORDER` that say what the data is: compared before the dataset's
#: own stream; the rest after it.
DATA_FIELDS = (K_KIND, K_N)
#: The fields of :data:`CHECK_ORDER` that say how the data is cut into batches: compared last.
#: (A world size that cannot be resumed on is refused after all of them:
#: :mod:`seekdata._core.reshape`.)
BATCH_FIELDS = (K_DROP_LAST, K_BATCH_SIZE, K_BATCH_DROP_LAST)


def check_state(
    state: Any, expected: Mapping[str, Any], *, where: str, strict: bool = True
) -> None:
    """Validate ``state`` against the fields ``expected`` (name -> value here).

    Raises :class:`StateMismatchError` (or ``TypeError`` for a non-dict) naming the field,
    both values and the fix. Every key its kind requires must be present and every value
    valid before any is compared (:func:`check_form`), so a fix never suggests an invalid
    value; then the fields are compared in :data:`CHECK_ORDER` (:func:`check_fields`). With
    ``strict=False`` a mismatching stream field is a warning at the caller's line saying what
    continuing means; structure, types, kinds and versions are always checked.
    """
    check_form(state, expected, where=where)
    check_fields(state, expected, where=where, strict=strict)


def check_form(state: Any, expected: Mapping[str, Any], *, where: str) -> None:
    """``state`` is a well-formed seekdata state holding the keys its kind requires and those
    of ``expected``, each of its type and in range; compares nothing with this object."""
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
    if not is_state_int(version) or version < 1:
        raise StateMismatchError(f"{where}: state version must be a positive int; got {version!r}")
    if version > VERSION:
        raise StateMismatchError(
            f"{where}: state has format version {version} but this seekdata reads up to "
            f"{VERSION}; upgrade seekdata to the release that wrote the checkpoint"
        )
    kind = state.get(K_KIND)
    if K_KIND in state and kind not in KINDS:
        raise StateMismatchError(
            f"{where}: state[{K_KIND!r}] must be one of {', '.join(map(repr, KINDS))}; got "
            f"{kind!r}; pass an unmodified state_dict()"
        )
    required = [K_KIND, K_EPOCH, K_POSITION, K_EXHAUSTED, *KINDS.get(str(kind), ()), *expected]
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
    for key, low in _LOWEST.items():  # an invalid value is never suggested as the fix
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
    replay = str(state.get(K_ORDER, "")).startswith("replay:")  # position counts batches
    if K_N in state and not replay and state[K_POSITION] > state[K_N]:
        raise StateMismatchError(
            f"{where}: state[{K_POSITION!r}] is {state[K_POSITION]}, past the epoch's end "
            f"{state[K_N]}; pass an unmodified state_dict()"
        )
    if K_SKIPS in state:
        _check_skips(state[K_SKIPS], where)


def check_fields(
    state: Mapping[str, Any], expected: Mapping[str, Any], *, where: str, strict: bool = True
) -> None:
    """Compare the fields ``expected`` (name -> value here) of a state :func:`check_form`
    accepted, in :data:`CHECK_ORDER`: the first that differs is refused with both values and
    the fix (with ``strict=False``, a warning for each that differs; ``kind`` always refuses)."""
    rank = {key: i for i, key in enumerate(CHECK_ORDER)}
    for key in sorted(expected, key=lambda k: rank.get(k, len(rank))):
        here, old = expected[key], state[key]
        if old == here and type(old) is type(here):
            continue
        if strict or key == K_KIND:
            grew = key == K_N and isinstance(here, int) and here > old
            fix = _FIX_GREW if grew else _FIX.get(key, "pass the same configuration")
            fix = fix.format(old=old)
            raise StateMismatchError(
                f"{where}: {key} is {old!r} in the checkpoint but {here!r} here; {fix}"
            )
        warn_caller(
            f"{where}: {key} is {old!r} in the checkpoint but {here!r} here; continuing with "
            f"{here!r} (strict=False): {_CONTINUES.get(key, 'this value applies from here on')}"
        )


def check_dataset(
    state: Mapping[str, Any],
    here: str | None,
    dataset: type,
    where: str,
    strict: bool,
    detail: str = "",
    same: str | None = None,
    accepts: Callable[[str], bool] | None = None,
) -> None:
    """A loader state's dataset signature (:data:`K_DATASET`) against this loader's dataset's
    ``stream_signature`` (``here``; None for a dataset without one), both ways: a state saved
    over a dataset with its own stream loads only into that stream, and a dataset with its own
    stream takes only a state saved over it. ``detail``: how the two differ, if known;
    ``same``: what "the same dataset" means for it (default: the wording the family of the
    checkpoint's signature registered with :func:`describe_same`, else the same data and
    arguments); ``accepts``: whether a signature of an earlier form describes it (the
    source's ``accepts_signature``)."""
    old = state.get(K_DATASET)
    if old == here or (isinstance(old, str) and here is not None and accepts and accepts(old)):
        return
    if here is None:
        problem = (
            f"the checkpoint was saved over a dataset with its own stream ({old!r}) but this "
            f"loader's {dataset.__name__} has none"
        )
    elif old is None:
        problem = (
            f"this loader's {dataset.__name__} has its own stream ({here!r}) but the state has "
            f"no {K_DATASET!r} signature: it was saved over a dataset without one (a plain "
            f"dataset of the same length), or edited"
        )
    else:
        problem = f"{K_DATASET} is {old!r} in the checkpoint but {here!r} here{detail}"
    if strict:
        if same is None:
            kind = old.partition("(")[0] if isinstance(old, str) else None
            same = _SAME_BY_KIND.get(kind, _SAME_DATA) if kind else _SAME_DATA
        raise StateMismatchError(f"{where}: {problem}; {_FIX[K_DATASET].format(same=same)}")
    warn_caller(f"{where}: {problem}; continuing (strict=False): {_CONTINUES[K_DATASET]}")


def describe_same(kind: str, same: str) -> None:
    """Register what "the same dataset" means for signatures that start with ``kind(``: a
    source family whose ``stream_signature`` names its kind (``Mixture(...)``) calls it once, at
    import, so that a state saved over one of its datasets is refused with its wording even by
    a dataset of another family."""
    _SAME_BY_KIND[kind] = same


def check_in_order(in_order: bool) -> None:
    """A cursor describes what was consumed only when batches arrive in order."""
    if not in_order:
        raise ValueError(
            "StatefulDataLoader.state_dict: exact resume needs in_order=True; with "
            "in_order=False batches reach you out of order, so no cursor says which were "
            "consumed; pass in_order=True to checkpoint"
        )


def check_step(state: Mapping[str, Any], limit: int, where: str) -> int:
    """A loader state's batch in the epoch (``step``; typed and signed by :func:`check_state`),
    at most ``limit`` at its position; returned."""
    step = int(state.get(K_STEP, 0))
    if step > limit:
        raise StateMismatchError(
            f"{where}: state[{K_STEP!r}] must be in [0, {limit}] at position "
            f"{state[K_POSITION]} (a batch consumes at least one position); got {step}; "
            f"pass an unmodified state_dict()"
        )
    return step


def check_resize(now: Any, old_n: int, new_n: int, where: str) -> None:
    """A dataset whose length changed: only between epochs, where the cursor counts none."""
    if 0 < now.position < old_n:
        raise ValueError(
            f"{where}: len(dataset) changed from {old_n} to {new_n} in the middle of epoch "
            f"{now.epoch} (at position {now.position}), where the cursor counts the old length; "
            f"finish the epoch, or call set_epoch({now.epoch + 1}), before iterating"
        )


def check_one_seed(state: Any, where: str) -> None:
    """A loader that owns its sampler keys its order and its samples with one seed, so a state
    it adopts its seed from (``seed=None``) has ``seed == sample_seed``: two valid, different
    values mean an edited state, or one saved by a loader with a sampler of its own."""
    if not isinstance(state, Mapping) or state.get(K_KIND) != "loader":
        return  # the full check names what is wrong with it
    seed, sample = state.get(K_SEED), state.get(K_SAMPLE_SEED)
    valid = all(is_state_int(v) and v >= 0 for v in (seed, sample))
    if valid and seed != sample:
        raise StateMismatchError(
            f"{where}: state[{K_SAMPLE_SEED!r}] is {sample} but state[{K_SEED!r}] is {seed}, "
            f"and this loader orders and keys its samples with one seed (its own sampler, "
            f"seed=None: adopted from the checkpoint); pass an unmodified state_dict(), or "
            f"build the loader with the sampler the checkpoint's loader had"
        )


def warn_caller(message: str) -> None:
    """A ``UserWarning`` attributed to the first frame outside seekdata: the user's line that
    called into it, however deep the warning was raised."""
    # the seekdata package: this file is seekdata/_core/state.py
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 2  # stacklevel 2: the frame that called warn_caller
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(message, UserWarning, stacklevel=level)


def _check_skips(skips: list[Any], where: str) -> None:
    last = -1
    for pair in skips:
        ok = isinstance(pair, list) and len(pair) == 2
        ok = ok and all(is_state_int(v) for v in pair)
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
