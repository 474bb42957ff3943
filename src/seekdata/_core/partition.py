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

__all__ = [
    "batches",
    "coverage",
    "epoch_holes",
    "kept_step",
    "local_len",
    "local_positions",
    "move",
    "moved",
    "position_after",
]


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
    if origin > start:  # the epoch re-partitioned ahead of start (a dataset that grew there)
        return np.where(pos < n, pos, origin + (pos - n) % max(n - origin, 1))
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


def coverage(
    n: int, world: int, batch: int, drop_sampler: bool, drop_loader: bool, start: int
) -> tuple[int, int, int]:
    """A partition from ``start`` on ``world`` ranks of ``batch``: (its steps, the position
    where the real positions it covers end, how many padding positions it adds). Global step s
    is the positions ``[start + s·world·batch, start + (s+1)·world·batch)``, so two partitions
    with equal coverage hand out the same positions at every step."""
    local = local_len(n, world, drop_sampler, start)
    steps = batches(local, batch, drop_loader)
    covered = start + min(steps * batch, local) * world
    return steps, min(covered, n), max(covered - n, 0)


def move(
    geo: tuple[int, int, bool, int, bool],
    per_epoch: int,
    at: tuple[int, int, int],
    k: int,
) -> tuple[int, int, int]:
    """(epoch, position, batch) after moving ``k`` batches (back when negative) from ``at`` =
    (epoch, global position, number of the batch that starts there) on ``geo`` = (n, world,
    the sampler's drop_last, batch_size, the batches' drop_last): what consuming ``k`` batches
    does. Within the epoch the batches run on from the position (a partition resumed on
    another world size keeps its offset); beyond it every epoch counts ``per_epoch`` batches
    from its start. An ended epoch (position >= n) counts from its end, batch ``per_epoch``.
    Raises before epoch 0."""
    n, world, drop_last, b, drop_batch = geo
    epoch, position, batch = at
    g = world * b
    if position >= n:
        position, batch, left = per_epoch * g, per_epoch, 0
    else:
        left = batches(local_len(n, world, drop_last, position), b, drop_batch)
    first = batch - min(position // g, batch)  # the lowest batch reachable back in this epoch
    target = batch + k
    if first <= target < batch + left:
        return epoch, position + k * g, target
    if target >= batch + left:
        epoch, target = moved(epoch + 1, 0, target - batch - left, per_epoch)
    else:
        epoch, target = moved(epoch, 0, target - first, per_epoch)
    return epoch, position_after(n, world, drop_last, 0, target * b), target


def moved(epoch: int, step: int, k: int, per_epoch: int) -> tuple[int, int]:
    """(epoch, step) after moving ``k`` batches (back when negative) from ``step`` of
    ``epoch``, across epoch ends; every epoch has ``per_epoch`` batches. Raises before epoch 0."""
    target = epoch * per_epoch + step + k
    if target < 0:
        raise ValueError(
            f"cannot move {k} batches from step {step} of epoch {epoch}: that is before the "
            f"first batch of epoch 0 ({per_epoch} batches per epoch); pass a smaller move"
        )
    return divmod(target, per_epoch)


def epoch_holes(
    skips: list[list[int]], epoch: int, per_epoch: int, lo: int, hi: int
) -> list[tuple[int, int]]:
    """The global-step ranges ``skips`` (global step = epoch × per_epoch + step) that fall in
    ``epoch``'s steps ``[lo, hi)``, as sorted in-epoch ranges."""
    base = epoch * per_epoch
    holes = []
    for a, b in skips:
        a, b = max(a - base, lo), min(b - base, hi)
        if a < b:
            holes.append((a, b))
    return sorted(holes)


def kept_step(step0: int, k: int, holes: list[tuple[int, int]]) -> int:
    """The in-epoch step after ``k`` batches kept from ``step0``, jumping over ``holes`` (sorted,
    disjoint in-epoch ranges, each after ``step0``): a hole right after the k-th batch is jumped
    at once."""
    step = step0 + k
    for a, b in holes:
        if a <= step:
            step += b - a
    return step
