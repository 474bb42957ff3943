"""The base every file-backed source builds on: one class, local or remote.

A family (tar shards, token files, Parquet) describes its files once, each with a local path or
a remote handle (:class:`seekdata.sources.remote.RemoteFile`), and reads item ``i`` from them.
What is the same for every family lives here:

- :meth:`FileSource._check_index`: an item index as the one integer rule takes it, negative
  ones counted from the end, others refused with the formula;
- :meth:`FileSource.prefetch`, a member of the source protocol: the byte ranges a batch's items
  will read (:meth:`FileSource._byte_ranges`, the family's) fetched in as few requests as
  possible, concurrently — a no-op for local files. It changes no item and draws nothing, so
  the loader calls it before reading the batch's items one by one under their per-sample keys,
  local or remote alike (``reads_batches = False``: the loader never reads a batch through
  :meth:`FileSource.__getitems__`);
- :meth:`FileSource.__getitems__`: the same for a caller that reads a batch (torch's own
  DataLoader): prefetch, then each item.

There is no remote subclass: a source over remote URLs is the same class, whose files hold
remote handles.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, SupportsIndex, TypeVar

from torch.utils.data import Dataset

from seekdata.sources import remote

__all__ = ["FileSource"]

T = TypeVar("T")


class FileSource(Dataset[T]):
    """Base of a map-style dataset over files, local or remote (the module docstring)."""

    #: Names the dataset in messages.
    _where = "FileSource"
    #: The end of the refusal of an index that is not an int (how to index this dataset).
    _index_hint = ""
    #: Whether a batch's remote objects are streamed (read ahead) by :meth:`prefetch`: a
    #: shard-local order reads each object whole while its window lasts.
    _streams = True
    #: Source protocol: the loader reads one item at a time, each under its own key, after
    #: :meth:`prefetch` (a family with a real batched read, such as Parquet's, says True).
    reads_batches = False

    def __len__(self) -> int:
        raise NotImplementedError

    def _byte_ranges(self, index: int) -> list[tuple[Any, int, int]]:
        """``(remote file, first byte, end byte)`` that item ``index`` reads from remote files;
        ``[]`` for an item of local files."""
        return []

    def _check_index(self, index: SupportsIndex) -> int:
        """``index`` as an int in ``[0, len)`` (a negative one counted from the end)."""
        try:
            i = operator.index(index)
        except TypeError as exc:
            raise TypeError(
                f"{self._where}: index must be an int, got {type(index).__name__}"
                + self._index_hint
            ) from exc
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self._where}: index must be in [0, {n}), got {i}")
        return i + n if i < 0 else i

    def prefetch(self, indices: Sequence[SupportsIndex]) -> None:
        """Fetch what the items ``indices`` will read, in as few requests as possible (the
        neighbours in one file in one request, the requests at once); changes no item and
        draws no random number. A no-op when every file is local."""
        wanted = [r for i in indices for r in self._byte_ranges(self._check_index(i))]
        if wanted:
            remote.prefetch(wanted, shards=self._streams)

    def __getitems__(self, indices: Sequence[int]) -> Any:
        """The items ``indices``, in that order: :meth:`prefetch`, then each item (a list)."""
        self.prefetch(indices)
        return [self[i] for i in indices]
