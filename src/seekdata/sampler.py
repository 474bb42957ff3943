"""Seekable samplers: a drop-in for ``torch.utils.data.DistributedSampler`` with a cursor.

The cursor is (epoch, global position): how many positions of the epoch's global stream
have been consumed, summed over all ranks. Rank r of W takes positions ``P0 + r + k*W``
from the position ``P0`` it started at, with torch's padding and ``drop_last`` rules, so the
state is identical on every rank, and a state saved with W ranks continues the same global
stream on W' ranks. Padding repeats the head of the partition: the epoch's head, as torch
does, or, after a resume on another world size, the head of the remaining stream, so nothing
consumed reappears.

A face: the implementation is :mod:`seekdata._core.sampler`.
"""

from __future__ import annotations

# dataset_length is not public: the loader's engines import it from here (new code: from
# seekdata._core.sampler)
from seekdata._core.sampler import DistributedSampler, dataset_length  # noqa: F401

__all__ = ["DistributedSampler"]
