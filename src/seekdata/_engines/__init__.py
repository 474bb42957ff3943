"""The loader's engines: one protocol, three paths.

:class:`seekdata.StatefulDataLoader` holds one :class:`Engine` and forwards to it:

- :class:`~seekdata._engines.seekable.SeekableEngine`: a seekdata sampler's cursor; every
  epoch is planned by arithmetic and a resume is an O(1) seek;
- :class:`~seekdata._engines.replay.ReplayEngine`: any other sampler or batch sampler; the
  cursor counts batches and a resume replays their indices (never their data);
- :class:`~seekdata._engines.iterable.IterableEngine`: an ``IterableDataset``, run by torchdata's
  loader, with worker RNG keyed by counters.

Each holds a :class:`~seekdata._cursor.Cursor`, which alone applies the epoch-end rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from seekdata._cursor import Cursor
from seekdata._device import DevicePrefetch

__all__ = ["Engine"]


class Engine(Protocol):
    """What the loader needs from a path (torchdata.nodes' one ``Stateful`` contract)."""

    seed: int
    cursor: Cursor
    step_rng: bool  # key the caller's global RNG by each batch's step (read at iter())
    lookahead: DevicePrefetch | None  # device=: batches moved ahead of the step (at iter())
    sampler: Any  # what ``loader.sampler`` shows
    batch_sampler: Any  # what ``loader.batch_sampler`` shows

    def iterate(self, place: Callable[[Any], Any] | None) -> Iterator[Any]:
        """A new iterator from the cursor; ``place`` moves each batch (e.g. to a device)."""
        ...

    def full_len(self) -> int:
        """Batches of a full epoch on this rank (``len(loader)``)."""
        ...

    def set_epoch(self, epoch: int) -> None: ...

    def set_option(self, name: str, value: Any) -> None:
        """A torch attribute read at every ``iter()`` was assigned (``num_workers``, ...)."""
        ...

    def skip(self, batches: int) -> None:
        """Move the cursor by ``batches`` global batches (back when negative), O(1)."""
        ...

    def skip_steps(self, start: int, stop: int) -> None:
        """Never hand out global steps ``[start, stop)``; recorded in the state."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Any, strict: bool) -> None:
        """Validate the whole state, then restore it; an iterator from before stops."""
        ...
