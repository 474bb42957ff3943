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
from seekdata._loader.device import DevicePrefetch
from seekdata._loader.engines.iterable import IterableEngine
from seekdata._loader.engines.replay import ReplayEngine
from seekdata._loader.engines.seekable import SeekableEngine
from seekdata.sampler import DistributedSampler, dataset_length

__all__ = ["Engine", "build"]


class Engine(Protocol):
    """What the loader needs from a path (torchdata.nodes' one ``Stateful`` contract)."""

    seed: int
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

    def shard(self, num_replicas: int, rank: int) -> None:
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


def build(
    dataset: Any,
    *,
    seed: int,
    seed_explicit: bool,
    sampler: Any,
    batch_sampler: Any,
    owns_sampler: bool,
    shuffle: bool | None,
    batch_size: int | None,
    drop_last: bool,
    collate_fn: Callable[[list[Any]], Any] | None,
    batch_transform: Callable[..., Any] | None,
    worker_init_fn: Callable[[int], None] | None,
    reseed: tuple[str, ...],
    reseed_global_rng: bool | tuple[str, ...],
    step_rng: bool,
    batched_fetch: bool,
    snapshot_every_n_steps: int | None,
    grown: Any,
    options: dict[str, Any],
    where: str,
) -> tuple[Engine, Callable[[list[Any]], Any]]:
    """The one engine of a loader, with the collate function it uses: the iterable path for an
    ``IterableDataset``, the seekable path for a seekdata sampler (the loader's own by default),
    the replay path for any other sampler or batch sampler. ``options``: torch's DataLoader
    arguments every engine passes on unchanged."""
    if grown is not None and not (owns_sampler and sampler is None):
        raise ValueError(
            f"{where}: grown= declares the growths of the loader's own sampler; got it with "
            f"{'a sampler' if sampler is not None else 'a batch_sampler or IterableDataset'}; "
            f"pass grown= to seekdata.DistributedSampler(dataset, ..., grown=...) instead"
        )
    if isinstance(dataset, torch.utils.data.IterableDataset):
        if isinstance(dataset, torch.utils.data.IterDataPipe) and shuffle is not None:
            torch.utils.data.graph_settings.apply_shuffle_settings(dataset, shuffle=shuffle)
        torchdata_options = dict(
            batch_size=batch_size,
            collate_fn=collate_fn,
            drop_last=drop_last,
            worker_init_fn=worker_init_fn,
            snapshot_every_n_steps=snapshot_every_n_steps or 1,
            **options,
        )
        engine = IterableEngine(
            dataset, seed, torchdata_options, seed_explicit=seed_explicit, reseed=reseed,
            step_rng=step_rng,
        )  # fmt: skip
        return engine, collate_fn or torch.utils.data.default_collate
    n = dataset_length(dataset, where)
    if owns_sampler and sampler is None:
        sampler = DistributedSampler(dataset, 1, 0, shuffle=bool(shuffle), seed=seed, grown=grown)
    if collate_fn is None:
        batching = batch_size is not None or batch_sampler is not None
        collate_fn = (
            torch.utils.data.default_collate if batching else torch.utils.data.default_convert
        )
    common = dict(
        seed=seed,
        seed_explicit=seed_explicit,
        owns_sampler=owns_sampler,
        reseed=reseed_global_rng,
        batch_size=batch_size,
        drop_last=drop_last,
        per_sample=batch_size is None and batch_sampler is None,
        collate_fn=collate_fn,
        batch_transform=batch_transform,
        worker_init_fn=worker_init_fn,
        options=options,
        step_rng=step_rng,
        batched_fetch=batched_fetch,
    )
    if isinstance(sampler, DistributedSampler) and batch_sampler is None:
        if sampler.n != n:
            raise ValueError(
                f"{where}: the sampler must cover the dataset; it covers {sampler.n} "
                f"samples but len(dataset) is {n}; build the sampler on this dataset"
            )
        return SeekableEngine(sampler, dataset, **common), collate_fn
    return ReplayEngine(sampler, batch_sampler, n, dataset, **common), collate_fn
