"""Partition maths: which global positions each rank takes. Pure functions, no state.

The epoch's global stream has positions ``0 .. n-1``. From the position ``start`` a partition
began at, rank r of W takes ``start + r + k*W`` for its local steps k = 0, 1, ... Without
``drop_last`` every rank takes ``ceil((n - start) / W)`` positions and the ones past the end
pad from the partition's ``origin`` (the epoch's head, as torch pads, or, after a resume on
another world size, the head of what was left: nothing consumed reappears); with
``drop_last`` every rank takes ``floor((n - start) / W)`` and the tail is dropped.
"""

from __future__ import annotations

import numpy as np

__all__ = ["batches", "local_len", "local_positions", "position_after"]


def local_len(n: int, world: int, drop_last: bool, start: int) -> int:
    """Positions each rank takes from global position ``start`` to the end of the epoch."""
    left = max(n - start, 0)
    return left // world if drop_last else -(-left // world)


def local_positions(
    n: int, world: int, rank: int, start: int, origin: int, k0: int, k1: int
) -> np.ndarray:
    """Rank ``rank``'s global positions (in ``[0, n)``) for its local steps ``k0 <= k < k1``
    of the partition that began at ``start``; positions past ``n`` pad from ``origin``."""
    pos = start + rank + world * np.arange(k0, k1, dtype=np.int64)
    return origin + (pos - origin) % max(n - origin, 1)


def position_after(n: int, world: int, drop_last: bool, start: int, consumed: int) -> int:
    """The global cursor after every rank consumed ``consumed`` positions from ``start``:
    ``n`` (the end, the same whatever the world size) once the partition is used up."""
    if consumed >= local_len(n, world, drop_last, start):
        return n
    return start + consumed * world


def batches(local: int, batch_size: int, drop_last: bool) -> int:
    """Batches of ``batch_size`` in ``local`` samples; the last one is short unless dropped."""
    return local // batch_size if drop_last else -(-local // batch_size)
