"""The source protocol: what a dataset may declare so that a loader resumes it exactly, and the
one place that reads each declaration (public as :class:`seekdata.sources.SeekableSource`).

A map-style dataset (``__len__``, a pure ``__getitem__``) is all a seekdata loader needs: its
cursor, orders and keys do the rest. A *source* says more about itself, so that a checkpoint
saved over it is refused when its data changed, so that it can grow, shuffle or reseed itself,
and so that it can be a source of a :class:`seekdata.Mixture`. ``Mixture``, ``TarShards`` and the
token corpora declare these members; a dataset of yours declares those that apply
(docs/sources.md). Every member is optional: the loader reads each one through the accessor
below it (never with a ``getattr`` of its own), and a dataset without it gets the default the
accessor names. This module lives in the core because the core reads the declarations (the
state checks, growth, the orders); it imports nothing above it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "SeekableSource",
    "append_stable",
    "finds_sources",
    "grow_instead",
    "has_stream_records",
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
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


# --- the accessors: the one place each member is read ------------------------------------------


def stream_signature(dataset: Any) -> str | None:
    """``dataset.stream_signature``; None when it declares none (or not a str)."""
    value = getattr(dataset, "stream_signature", None)
    return value if isinstance(value, str) else None


def signature_of_first(dataset: Any) -> Callable[[int], str] | None:
    """``dataset.signature_of_first``; None when it declares none."""
    first = getattr(dataset, "signature_of_first", None)
    return first if callable(first) else None


def append_stable(dataset: Any) -> bool:
    """``dataset.append_stable``: only an explicit ``False`` refuses growth."""
    return getattr(dataset, "append_stable", None) is not False


def grow_instead(dataset: Any) -> str | None:
    """``dataset.grow_instead``: what to do instead of growing; None when it says nothing."""
    instead = getattr(dataset, "grow_instead", None)
    return str(instead) if instead else None


def shard_sizes(dataset: Any) -> Sequence[int] | None:
    """``dataset.shard_sizes``; None for a dataset that is not sharded."""
    return getattr(dataset, "shard_sizes", None)


def shard_sizes_of_first(dataset: Any) -> Callable[[int], Sequence[int]] | None:
    """``dataset.shard_sizes_of_first``; None when it declares none."""
    first = getattr(dataset, "shard_sizes_of_first", None)
    return first if callable(first) else None


def stream_records(dataset: Any, epoch: int, position: int, always: bool = False) -> dict[str, Any]:
    """``dataset.stream_records(epoch, position, always)``; ``{}`` without it."""
    records = getattr(dataset, "stream_records", None)
    return dict(records(epoch, position, always)) if callable(records) else {}


def has_stream_records(dataset: Any) -> bool:
    """Whether ``dataset`` declares ``stream_records`` (a stream with a history)."""
    return callable(getattr(dataset, "stream_records", None))


def source_signatures(dataset: Any) -> list[list[Any]]:
    """``dataset.source_signatures()``; ``[]`` without it."""
    sources = getattr(dataset, "source_signatures", None)
    return list(sources()) if callable(sources) else []


def finds_sources(dataset: Any) -> bool:
    """Whether ``dataset`` declares ``source_with_id`` (recorded sources can be checked)."""
    return callable(getattr(dataset, "source_with_id", None))


def source_with_id(dataset: Any, source_id: int) -> tuple[str, Any] | None:
    """``dataset.source_with_id(source_id)``; None without it or without that source."""
    find = getattr(dataset, "source_with_id", None)
    return find(source_id) if callable(find) else None


def shuffles_itself(dataset: Any) -> bool:
    """``dataset.shuffles_itself``; False without it."""
    return bool(getattr(dataset, "shuffles_itself", False))


def reseeds_global_rng_itself(dataset: Any) -> bool:
    """``dataset.reseeds_global_rng_itself``; False without it."""
    return bool(getattr(dataset, "reseeds_global_rng_itself", False))
