"""What a loader rebuilt by a framework needs from the loader it rebuilds, framework-neutral.

A framework that shards loaders may rebuild one for another rank from its batch sampler alone
(``type(loader)(dataset, batch_sampler=type(loader.batch_sampler)(sampler=wrapper, ...))``).
The loader records, against its own sampler, what such a rebuild needs (:func:`remember`: did
the loader build the sampler, its seed); :func:`origin` reads it back; a rebuilt batch sampler
carries a :class:`RankRequest`, which :class:`seekdata.StatefulDataLoader` turns back into the
same seekable stream on the requested rank (``assign_rank``). Which frameworks rebuild, and
how they are recognised, is the business of :mod:`seekdata.integrations.hooks`.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

__all__ = ["Origin", "RankRequest", "origin", "remember"]


class Origin(NamedTuple):
    """What the loader that owns a sampler was built with: whether it built the sampler, and
    its seed (given, or adopted from a checkpoint)."""

    owns_sampler: bool
    seed_explicit: bool
    seed: int


_ORIGINS: weakref.WeakKeyDictionary[Any, Origin] = weakref.WeakKeyDictionary()


def remember(sampler: Any, owns_sampler: bool, seed_explicit: bool, seed: int) -> None:
    """A loader over ``sampler`` was built (or adopted a seed): what a rebuild needs."""
    _ORIGINS[sampler] = Origin(owns_sampler, seed_explicit, seed)


def origin(sampler: Any) -> Origin | None:
    """What the loader over ``sampler`` was built with; None when no loader owns it."""
    return _ORIGINS.get(sampler) if sampler is not None else None


class RankRequest(NamedTuple):
    """A framework asked for ``sampler``'s stream on ``rank`` of ``world`` ranks
    (``assign_rank``); the rest is the original loader's."""

    sampler: Any  # the original loader's seekdata.DistributedSampler
    world: int
    rank: int
    batch_size: int
    drop_last: bool
    owns_sampler: bool
    seed_explicit: bool
    seed: int
