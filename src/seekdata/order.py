"""Epoch orders: pure functions ``(seed, epoch, position) -> dataset index``.

Every order is a bijection on ``[0, n)`` for each epoch, with random access: the index at
any position is computed directly, without materialising the epoch.

- ``"feistel"`` (default): a keyed Feistel network on ``ceil(log2 n)`` bits with cycle
  walking. O(1) memory, O(1) per position, vectorised over arrays of positions.
- ``"torch"``: exactly ``torch.randperm(n, generator=manual_seed(seed + epoch))``, the
  permutation of ``torch.utils.data.DistributedSampler``. O(n) time and memory per epoch
  (cached for the current epoch): opt in only to continue a run started with torch's sampler.
- ``"sequential"``: position p is index p.
- ``"shards"`` / :class:`Shards`: for sharded datasets (``dataset.shard_sizes``): shards are
  permuted per (seed, epoch), then samples are permuted within windows of a few consecutive
  shards, so reads stay within a few shards at a time while the order stays pure and
  O(log shards) seekable.

The implementation lives in :mod:`seekdata._core.orders`; this module only re-exports.
"""

from __future__ import annotations

from seekdata._core.orders import (
    ORDERS,
    Feistel,
    Order,
    Sequential,
    Shards,
    TorchRandperm,
    feistel_index,
    feistel_permute,
    make_order,
)

__all__ = [
    "ORDERS",
    "Feistel",
    "Order",
    "Sequential",
    "Shards",
    "TorchRandperm",
    "feistel_index",
    "feistel_permute",
    "make_order",
]
