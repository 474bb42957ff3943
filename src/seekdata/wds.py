"""Random access to webdataset tar shards.

:class:`TarShards` is a map-style dataset over webdataset shards: ``len()`` is
the number of samples in all shards, and ``ds[i]`` reads sample ``i`` (in shard
order, then tar order) by seeking to its members' bytes, using a per-shard
byte-offset index (built once; see :mod:`seekdata.sources.wds.tarindex` for the rules).
Samples are the dicts ``webdataset.WebDataset(urls, shardshuffle=False)``
yields, in the same order: ``__key__``, ``__url__``, ``__local_path__`` (local
shards) and one entry per extension.

Shard-aware orders read :attr:`TarShards.shard_sizes` and
:attr:`TarShards.shard_starts`, so each worker can stream its shards
sequentially while the epoch is still shuffled.

Remote shards (``s3://``, ``gs://``, ``az://``, ``https://``, ``hf://``) are read by byte
range through :mod:`seekdata.sources.remote` by the same class, whose ``prefetch`` fetches a
batch's byte ranges at once (docs/remote.md); ``RemoteTarShards``, the subclass earlier
releases returned for them, is another name for :class:`TarShards` now.

The implementation lives in :mod:`seekdata.sources.wds.shards`; this module only re-exports.
"""

from __future__ import annotations

from seekdata.sources.wds.shards import (
    MAX_OPEN_FILES,
    PICKLE_EXTENSIONS,
    RemoteTarShards,
    TarShards,
)

__all__ = [
    "MAX_OPEN_FILES",
    "PICKLE_EXTENSIONS",
    "RemoteTarShards",
    "TarShards",
]
