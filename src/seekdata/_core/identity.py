"""The same data: what a state records of the dataset it was saved over, checked first.

A checkpoint that passed :func:`seekdata._core.state.check_form` is well formed; the first
question of a resume is whether it was saved over *this* data. :func:`check_data` answers it
before anything that shapes the batches: the kind of state and the dataset's length, then the
dataset's own stream (:func:`check_stream`: its ``stream_signature``, or, for a source whose
stream has a history, the records that source wrote and checks itself — a
:class:`seekdata.Mixture`'s changes), then the order and randomness over it. So a checkpoint of
another dataset is refused as such, not with a batch size whose fix leads to the next refusal.
:func:`stream_records` is what a state records of the dataset, the other half.

A source that owns records (``stream_records``) names them and checks them
(``check_records``, :class:`seekdata.sources.SeekableSource`): the core knows only that such
records exist and whom to ask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seekdata._core import source as _source
from seekdata._core.checks import is_state_int
from seekdata._core.growth import signature_then
from seekdata._core.state import (
    BATCH_FIELDS,
    DATA_FIELDS,
    K_DATASET,
    K_EPOCH,
    K_KIND,
    K_POSITION,
    K_SOURCES,
    StateMismatchError,
    check_dataset,
    check_fields,
    check_form,
    warn_caller,
)

__all__ = ["check_data", "check_stream", "stream_records"]


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


def stream_records(dataset: Any, epoch: int, position: int) -> dict[str, Any]:
    """What a loader's or sampler's state records of ``dataset``'s own stream at the cursor:
    its ``stream_signature`` (:data:`K_DATASET`) and the records a source with a history keeps
    (its ``stream_records``: a mixture's changes), and for a dataset made of sources each
    source's own signature (:data:`K_SOURCES`)."""
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
    """A loader's or sampler's state against ``dataset``'s own stream, when it defines one:
    its ``stream_signature``, or, for a source that keeps records (``stream_records``), the
    source's own check of them (``check_records``: a mixture accepts a state that agrees on the
    stream consumed). ``n_then``: the length the state was saved with, where the dataset grew
    since (its first ``n_then`` items must be what it had then). A sampler state with no record
    of the dataset (written before samplers recorded one) is not checked."""
    here = _source.stream_records(dataset, state[K_EPOCH], state[K_POSITION], always=True)
    if state.get(K_KIND) == "sampler" and K_DATASET not in state and not here.keys() & state:
        return
    _check_sources(state, dataset, where, strict)
    if _source.check_records(dataset, state, where, strict):  # the source's own records
        return
    signature = signature_then(dataset, n_then)
    grew = n_then is not None and signature is not None and n_then != len(dataset)
    detail = (
        f" (the signature of its first {n_then} items: it grew since; its old items must be "
        f"the checkpoint's, in their order, with new data appended after them)"
        if grew
        else ""
    )
    n = len(dataset) if n_then is None else n_then
    accepts = lambda old: _source.accepts_signature(dataset, old, n)  # noqa: E731
    check_dataset(state, signature, type(dataset), where, strict, detail, accepts=accepts)


def _check_sources(state: Mapping[str, Any], dataset: Any, where: str, strict: bool) -> None:
    """Each source of a dataset made of sources (a mixture) recorded with its own stream
    (:data:`K_SOURCES`) against the source with that id here: its first ``length`` items must be
    what they were. A source removed since (``Mixture.gone``) or absent is not read, so not
    checked; a state without the record (an older release, or no source with a stream) is not
    checked."""
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
        if now == entry[2] or (now and _source.accepts_signature(source, entry[2], entry[1])):
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
