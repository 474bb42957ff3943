"""The loader's engines: one protocol, three paths.

:class:`seekdata.StatefulDataLoader` holds one :class:`Engine` and forwards to it:

- :class:`~seekdata._loader.engines.seekable.SeekableEngine`: a seekdata sampler's cursor; every
  epoch is planned by arithmetic and a resume is an O(1) seek;
- :class:`~seekdata._loader.engines.replay.ReplayEngine`: any other sampler or batch sampler; the
  cursor counts batches and a resume replays their indices (never their data);
- :class:`~seekdata._loader.engines.iterable.IterableEngine`: an ``IterableDataset``, run by
  torchdata's loader, with worker RNG keyed by counters.

Each holds a :class:`~seekdata._core.cursor.Cursor`, which alone applies the epoch-end rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch.utils.data

from seekdata._core.cursor import Cursor
from seekdata._loader.config import Keys, LoaderConfig
from seekdata._loader.device import DevicePrefetch
from seekdata._loader.engines.iterable import IterableEngine
from seekdata._loader.engines.replay import ReplayEngine
from seekdata._loader.engines.seekable import SeekableEngine
from seekdata.sampler import DistributedSampler, dataset_length

__all__ = ["Engine", "build"]


class Engine(Protocol):
    """What the loader needs from a path (torchdata.nodes' one ``Stateful`` contract)."""

    keys: Keys  # the seed and the reseed choice, shared with the loader and its config
    cursor: Cursor
    step_rng: bool  # key the caller's global RNG by each batch's number (read at iter())
    lookahead: DevicePrefetch | None  # device=: batches moved ahead of the step (at iter())
    place: Callable[[Any], Any] | None  # moves each batch handed out (loader.place)
    sampler: Any  # what ``loader.sampler`` shows
    batch_sampler: Any  # what ``loader.batch_sampler`` shows

    def iterate(self) -> Iterator[Any]:
        """A new iterator from the cursor; the live one from before stops."""
        ...

    def full_len(self) -> int:
        """Batches of a full epoch on this rank (``len(loader)``)."""
        ...

    def set_epoch(self, epoch: int) -> None: ...

    def set_option(self, name: str, value: Any) -> None:
        """A torch attribute read at every ``iter()`` was assigned (``num_workers``, ...)."""
        ...

    @property
    def seed(self) -> int:
        """``keys.seed``: the seed now."""
        ...

    def assign_rank(self, num_replicas: int, rank: int) -> None:
        """Become rank ``rank`` of ``num_replicas``; the cursor is global: it stays."""
        ...

    def skip(self, batches: int) -> None:
        """Move the cursor by ``batches`` global batches (back when negative), O(1)."""
        ...

    def skip_steps(self, start: int, stop: int) -> None:
        """Never hand out global steps ``[start, stop)``; recorded in the state."""
        ...

    def seek_batch(self, batch: int) -> None:
        """The cursor at batch ``batch`` of the epoch the next iterator runs."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Any, strict: bool, grow: bool = False) -> None:
        """Validate the whole state, then restore it; an iterator from before stops.
        ``grow``: the dataset grew since the state was saved (a seekable sampler only)."""
        ...


def build(dataset: Any, config: LoaderConfig) -> tuple[Engine, Callable[[list[Any]], Any]]:
    """The one engine of a loader, with the collate function it uses: the iterable path for an
    ``IterableDataset``, the seekable path for a seekdata sampler (the loader's own by default),
    the replay path for any other sampler or batch sampler."""
    where = "StatefulDataLoader"
    if isinstance(dataset, torch.utils.data.IterableDataset):
        if isinstance(dataset, torch.utils.data.IterDataPipe) and config.shuffle is not None:
            torch.utils.data.graph_settings.apply_shuffle_settings(dataset, shuffle=config.shuffle)
        return IterableEngine(
            dataset, config
        ), config.collate_fn or torch.utils.data.default_collate
    n = dataset_length(dataset, where)
    sampler = config.sampler
    if config.owns_sampler and sampler is None:
        sampler = DistributedSampler(
            dataset, 1, 0, shuffle=bool(config.shuffle), seed=config.seed, grown=config.grown
        )
    collate_fn: Callable[[list[Any]], Any] = (
        config.collate_fn
        if config.collate_fn is not None
        else torch.utils.data.default_convert
        if config.per_sample
        else torch.utils.data.default_collate
    )
    if isinstance(sampler, DistributedSampler) and config.batch_sampler is None:
        if sampler.n != n:
            raise ValueError(
                f"{where}: the sampler must cover the dataset; it covers {sampler.n} "
                f"samples but len(dataset) is {n}; build the sampler on this dataset"
            )
        return SeekableEngine(sampler, dataset, config, collate_fn), collate_fn
    return ReplayEngine(sampler, n, dataset, config, collate_fn), collate_fn
