"""The source protocol: what a dataset may declare so that a loader resumes it exactly, and the
one place that reads each declaration (public as :class:`seekdata.sources.SeekableSource`).

A map-style dataset (``__len__``, a pure ``__getitem__``) is all a seekdata loader needs: its
cursor, orders and keys do the rest. A *source* says more about itself, so that a checkpoint
saved over it is refused when its data changed, so that it can grow, shuffle or reseed itself,
and so that it can be a source of a :class:`seekdata.Mixture`. ``Mixture``, ``TarShards`` and the
token corpora declare these members; a dataset of yours declares those that apply
(docs/sources.md). Every member is optional: the loader reads each one through the accessor
below it (never with a ``getattr`` of its own), and a dataset without it gets the default the
accessor names. A dataset that wraps a source answers every member for it
(:class:`WrapsSource`); torch's own wrappers of a signed source get a signature derived from
what they wrap (:func:`declared`). This module lives in the core because the core reads the
declarations (the state checks, growth, the orders); it imports nothing above it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ABSENT",
    "MEMBERS",
    "SeekableSource",
    "WrapsSource",
    "accepts_signature",
    "append_stable",
    "check_records",
    "declared",
    "finds_sources",
    "grow_instead",
    "has_stream_records",
    "prefetch",
    "reads_in_batches",
    "reseeds_global_rng_itself",
    "shard_sizes",
    "shard_sizes_of_first",
    "shuffles_itself",
    "signature_of_first",
    "source_signatures",
    "source_with_id",
    "stream_records",
    "stream_signature",
]


@runtime_checkable
class SeekableSource(Protocol):
    """A map-style dataset that declares what decides its items. Every member but ``__len__``
    and ``__getitem__`` is optional (a ``Protocol`` cannot say so: the accessors of
    :mod:`seekdata._core.source` give each one's default), so ``isinstance(ds, SeekableSource)``
    asks only whether ``ds`` is map-style.

    ``stream_signature: str``
        What decides which bytes sit at each index: lengths, file order, packing arguments (a
        short hash, not the data). Read by ``state_dict()`` (the state records it) and by
        ``load_state_dict`` (a state saved over another signature is refused with a
        ``StateMismatchError``, or warned about with ``strict=False``); by a ``Mixture``, for
        each of its sources. Without it: the loader checks only ``len(dataset)``.
    ``signature_of_first(n) -> str``
        The ``stream_signature`` the dataset had when it held only its first ``n`` items: how a
        dataset that grew (``load_state_dict(state, grow=True)``, ``grown=``) proves its old
        items are the checkpoint's. Without it: a dataset that grew is compared with its whole
        ``stream_signature``, which differs, so the growth is refused.
    ``accepts_signature(signature, n) -> bool``
        Whether ``signature``, a form an earlier release wrote and this one no longer writes,
        describes the dataset's first ``n`` items: how a checkpoint written before a family
        changed the form of its signature (tar shards before manifests: a digest of digests
        now) still resumes. Asked only when a state's signature is not the dataset's, by
        ``load_state_dict`` and growth; it may be slow (read every per-file index once) and
        should say so. Without it: a signature that differs is refused.
    ``append_stable: bool``
        ``True`` (or absent): appending data keeps every old item at its index with its bytes,
        so the dataset may grow. ``False``: it may not (a packing that depends on every
        document); growth is refused with ``grow_instead``. Read by ``grow=True``, ``grown=``
        and ``Mixture.changed(grown=)``.
    ``grow_instead: str``
        What to do instead of growing, when ``append_stable`` is ``False`` (the end of the
        refusal's message). Without it: "start a new run on the grown dataset".
    ``shard_sizes: Sequence[int]``
        Items per shard, in index order (shard ``k`` holds the next ``shard_sizes[k]``
        indices). Read by ``order="shards"`` (whole shards a few at a time, shuffled inside a
        window) and by growth (a sharded dataset grows by whole shards). Without it:
        ``order="shards"`` is refused (a ``Mixture`` source gets the Feistel order instead).
    ``shard_sizes_of_first(n) -> Sequence[int]``
        The ``shard_sizes`` the dataset had when it held only its first ``n`` items: for a
        dataset cut into shards of a fixed number of items (``TokenWindows(shard_windows=)``),
        whose last, shorter shard fills up as data is appended. Read by growth, to rebuild the
        shard-local order the checkpoint's epoch had. Without it: a sharded dataset grows by
        whole shards (``n`` must be a sum of its first ``shard_sizes``).
    ``stream_records(epoch, position, always=False) -> dict``
        State keys of a dataset whose stream has a history (a ``Mixture``'s changes: its prefix
        signature and the history of its changes at the cursor): written into every
        ``state_dict()``, and read back at ``load_state_dict``, where a state that agrees on
        the stream consumed is accepted even if the dataset changed since. ``always``: return
        the keys even where nothing changed yet (the loader's check asks so). Without it: the
        state records only ``stream_signature``. (Earlier releases called it
        ``_stream_records``, a private name; the loader reads only this one.)
    ``check_records(state, where, strict) -> None``
        The dataset's own check of the keys its ``stream_records`` wrote, at
        ``load_state_dict``: return when ``state`` continues this dataset's stream, raise
        ``StateMismatchError`` naming what differs when it does not (with ``strict=False``:
        warn and return). It is asked instead of the ``stream_signature`` comparison, so it
        decides the signature too. Without it: the state's ``stream_signature`` must be the
        dataset's.
    ``source_signatures() -> list[[id, length, signature]]``
        For a dataset made of sources, each source's ``stream_signature``: a state records them
        so that a source rebuilt on other data is refused by id. Without it: none recorded.
    ``source_with_id(id) -> (label, dataset) | None``
        The source with that id, to check a recorded source signature against (None: removed,
        never read again). Without it: recorded source signatures are not checked.
    ``shuffles_itself: bool``
        The dataset maps positions to items in an order of its own (a ``Mixture`` interleaves
        and shuffles), so ``shuffle=True`` on top would only scatter it: the sampler warns and
        reads it in order. Without it: ``False``.
    ``reseeds_global_rng_itself: bool``
        The dataset seeds global RNG from its own keys around each fetch (a ``Mixture`` keys a
        sample by its source's counters), so the loader does not reseed it first. Without it:
        ``False`` (the loader reseeds around every fetch, ``reseed_global_rng=True``).
    ``reads_batches: bool``
        ``True``: the loader reads a batch with one ``__getitems__(indices)`` call (a real
        batched read: ``ParquetRows`` returns a dict of columns), its global RNG and
        ``sample_rng()`` keyed by the batch. ``False``: one ``__getitem__`` per sample, each
        under its own key, even where ``__getitems__`` exists (the file-backed sources define
        one for torch's own DataLoader). Without it: torch's rule (a callable
        ``__getitems__``; for torch's wrappers, what they wrap). Either way a dataset without a
        callable ``__getitems__`` is read one sample at a time.
    ``prefetch(indices) -> None``
        Fetch what the samples ``indices`` will read, in as few requests as possible; it
        changes no sample and draws nothing. The loader calls it once per batch, before it
        reads the batch's samples one by one under their per-sample keys, so a source reads
        remote files in batches while its keys stay per sample, local or remote alike (the
        file-backed sources: a no-op for local files). Without it: nothing is fetched ahead.
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


#: The members of the protocol, in the order :class:`SeekableSource` documents them. Every
#: accessor below reads one of them through :func:`declared`; :class:`WrapsSource` forwards
#: each of them (tests/transforms/test_wrapper_protocol.py checks all three agree).
MEMBERS = (
    "stream_signature",
    "signature_of_first",
    "accepts_signature",
    "append_stable",
    "grow_instead",
    "shard_sizes",
    "shard_sizes_of_first",
    "stream_records",
    "check_records",
    "source_signatures",
    "source_with_id",
    "shuffles_itself",
    "reseeds_global_rng_itself",
    "reads_batches",
    "prefetch",
)


class _Absent:
    __slots__ = ()

    def __bool__(self) -> bool:  # an absent flag reads as False
        return False

    def __repr__(self) -> str:
        return "ABSENT"


#: What :func:`declared` returns for a member a dataset does not declare.
ABSENT: Any = _Absent()


def declared(dataset: Any, name: str) -> Any:
    """What ``dataset`` declares for the protocol member ``name`` (one of :data:`MEMBERS`), or
    :data:`ABSENT`: the one place a declaration is read.

    Its own attribute first; a dataset without a ``stream_signature`` that is one of torch's
    wrappers (``Subset``, ``ConcatDataset``, ``StackDataset``) of a signed dataset gets one
    derived from what it wraps (:func:`_derived_signature`), so a changed source behind it is
    refused like the source itself."""
    if name not in MEMBERS:
        raise ValueError(
            f"declared: name must be a member of the source protocol {MEMBERS}; got {name!r}; "
            f"add a new member to MEMBERS and document it in SeekableSource"
        )
    value = getattr(dataset, name, ABSENT)
    if value is ABSENT and name == "stream_signature":
        derived = _derived_signature(dataset)
        return ABSENT if derived is None else derived
    return value


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def _derived_signature(dataset: Any) -> str | None:
    """The signature of torch's wrapper ``dataset`` around signed datasets; None when it is
    none of them, or when nothing it wraps is signed (then, as without a wrapper, the loader
    checks only the length).

    - ``Subset(ds, indices)``: the inner signature and a digest of the indices (sha256 of them
      as little-endian int64), so other indices or a changed ``ds`` differ;
    - ``ConcatDataset(parts)``, ``StackDataset(*parts, **parts)``: a digest of each part's
      length and signature (None for an unsigned part, which is checked by its length only),
      in order (and by key), so a changed, reordered or resized part differs.

    torch is not imported here (the torch-free tools import this module): a dataset that is one
    of torch's wrappers was made with torch, so it is in ``sys.modules`` already."""
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return None
    if isinstance(dataset, data.Subset):
        inner = stream_signature(dataset.dataset)
        if inner is None:
            return None
        import numpy as np  # loaded with torch

        indices = np.asarray(dataset.indices, dtype="<i8")
        picked = hashlib.sha256(indices.tobytes()).hexdigest()[:16]
        return f"Subset({len(indices)} of {inner}, indices {picked})"
    parts: list[Any]
    if isinstance(dataset, data.ConcatDataset):
        kind, parts = "ConcatDataset", [[None, d] for d in dataset.datasets]
    elif isinstance(dataset, data.StackDataset):
        kind, stacked = "StackDataset", dataset.datasets
        items = stacked.items() if isinstance(stacked, dict) else enumerate(stacked)
        parts = [[key, d] for key, d in items]
    else:
        return None
    described = [[key, len(d), stream_signature(d)] for key, d in parts]
    if all(signature is None for _, _, signature in described):
        return None
    return f"{kind}({len(parts)} parts, {_digest(described)})"


def _torch_reads_in_batches(dataset: Any) -> bool:
    """torch's rule for a dataset that declares nothing: a callable ``__getitems__``, except for
    torch's wrappers, which define ``__getitems__`` whatever they wrap: a ``Subset`` reads in
    batches when its dataset does, a ``StackDataset`` when all of its datasets do."""
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return True
    kind = type(dataset)
    if kind.__getitems__ is data.Subset.__getitems__:
        return reads_in_batches(dataset.dataset)
    if kind.__getitems__ is data.StackDataset.__getitems__:
        parts = dataset.datasets
        return all(
            reads_in_batches(d) for d in (parts.values() if isinstance(parts, dict) else parts)
        )
    return True


def _has_getitems(dataset: Any) -> bool:
    return callable(getattr(dataset, "__getitems__", None))


def _forwarded(name: str) -> property:
    def get(self: Any) -> Any:
        value = declared(self.dataset, name)
        if value is ABSENT:
            raise AttributeError(
                f"{type(self).__name__}: its dataset ({type(self.dataset).__name__}) does not "
                f"declare {name!r}"
            )
        return value

    return property(get, doc=f"The wrapped dataset's ``{name}`` (source protocol).")


class WrapsSource:
    """Base of a dataset that wraps a source (its ``dataset`` attribute) and answers every
    member of the protocol (:data:`MEMBERS`) for it: each one is the wrapped dataset's, as
    :func:`declared` reads it, and absent where the wrapped dataset declares nothing — so a
    checkpoint over other data is refused through the wrapper as without it (DESIGN: "wrappers
    carry the protocol"). A wrapper that changes what a member says (it reorders items, say)
    overrides that member."""

    dataset: Any


for _name in MEMBERS:
    setattr(WrapsSource, _name, _forwarded(_name))
del _name


# --- the accessors: the one place each member is read ------------------------------------------


def stream_signature(dataset: Any) -> str | None:
    """``dataset.stream_signature`` (derived for torch's wrappers, see :func:`declared`); None
    when it declares none (or not a str)."""
    value = declared(dataset, "stream_signature")
    return value if isinstance(value, str) else None


def signature_of_first(dataset: Any) -> Callable[[int], str] | None:
    """``dataset.signature_of_first``; None when it declares none."""
    first = declared(dataset, "signature_of_first")
    return first if callable(first) else None


def accepts_signature(dataset: Any, signature: str, n: int) -> bool:
    """``dataset.accepts_signature(signature, n)``: whether an earlier form of signature
    describes its first ``n`` items; False without it."""
    accepts = declared(dataset, "accepts_signature")
    return bool(accepts(signature, n)) if callable(accepts) else False


def append_stable(dataset: Any) -> bool:
    """``dataset.append_stable``: only an explicit ``False`` refuses growth."""
    return declared(dataset, "append_stable") is not False


def grow_instead(dataset: Any) -> str | None:
    """``dataset.grow_instead``: what to do instead of growing; None when it says nothing."""
    instead = declared(dataset, "grow_instead")
    return str(instead) if instead else None


def shard_sizes(dataset: Any) -> Sequence[int] | None:
    """``dataset.shard_sizes``; None for a dataset that is not sharded."""
    sizes = declared(dataset, "shard_sizes")
    return None if sizes is ABSENT else sizes


def shard_sizes_of_first(dataset: Any) -> Callable[[int], Sequence[int]] | None:
    """``dataset.shard_sizes_of_first``; None when it declares none."""
    first = declared(dataset, "shard_sizes_of_first")
    return first if callable(first) else None


def stream_records(dataset: Any, epoch: int, position: int, always: bool = False) -> dict[str, Any]:
    """``dataset.stream_records(epoch, position, always)``; ``{}`` without it."""
    records = declared(dataset, "stream_records")
    return dict(records(epoch, position, always)) if callable(records) else {}


def has_stream_records(dataset: Any) -> bool:
    """Whether ``dataset`` declares ``stream_records`` (a stream with a history)."""
    return callable(declared(dataset, "stream_records"))


def check_records(dataset: Any, state: Any, where: str, strict: bool) -> bool:
    """``dataset.check_records(state, where, strict)``, and True: the dataset checked its own
    records; False without it (the caller compares the signature)."""
    check = declared(dataset, "check_records")
    if not callable(check):
        return False
    check(state, where, strict)
    return True


def source_signatures(dataset: Any) -> list[list[Any]]:
    """``dataset.source_signatures()``; ``[]`` without it."""
    sources = declared(dataset, "source_signatures")
    return list(sources()) if callable(sources) else []


def finds_sources(dataset: Any) -> bool:
    """Whether ``dataset`` declares ``source_with_id`` (recorded sources can be checked)."""
    return callable(declared(dataset, "source_with_id"))


def source_with_id(dataset: Any, source_id: int) -> tuple[str, Any] | None:
    """``dataset.source_with_id(source_id)``; None without it or without that source."""
    find = declared(dataset, "source_with_id")
    return find(source_id) if callable(find) else None


def shuffles_itself(dataset: Any) -> bool:
    """``dataset.shuffles_itself``; False without it."""
    return bool(declared(dataset, "shuffles_itself"))


def reseeds_global_rng_itself(dataset: Any) -> bool:
    """``dataset.reseeds_global_rng_itself``; False without it."""
    return bool(declared(dataset, "reseeds_global_rng_itself"))


def reads_in_batches(dataset: Any) -> bool:
    """Whether a loader reads ``dataset`` a batch at a time (one ``__getitems__`` call): what
    ``dataset.reads_batches`` declares, else torch's rule (:func:`_torch_reads_in_batches`);
    never without a callable ``__getitems__``. The one rule of the loader
    (:func:`seekdata._loader.fetch.batched_read`) and of the wrappers above it."""
    said = declared(dataset, "reads_batches")
    if not _has_getitems(dataset):
        return False
    return bool(said) if said is not ABSENT else _torch_reads_in_batches(dataset)


def prefetch(dataset: Any) -> Callable[[Any], None] | None:
    """``dataset.prefetch``; None when it declares none."""
    fetch = declared(dataset, "prefetch")
    return fetch if callable(fetch) else None
